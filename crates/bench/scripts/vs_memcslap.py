#!/usr/bin/env python3
"""ferrobench vs memcslap: who drives more gets/s from one client core?

Starts `memcached -t 1` pinned to CPU 0, then alternates (A B A B ...)
memcslap and ferrobench pinned to CPU 1, 50 connections, no pipelining, and
prints each run plus the medians: gets/s and client CPU µs per get (user +
system of the client process, from rusage). The memcached it starts is
killed by PID at the end.

usage: vs_memcslap.py [ROUNDS] [FERROBENCH]   (defaults: 3, target/release/ferrobench)
"""
import json, os, re, resource, socket, statistics, subprocess, sys, time

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
FB = sys.argv[2] if len(sys.argv) > 2 else "target/release/ferrobench"
KEYS = 4000          # memcslap: each of the 50 threads gets every key once
CONNS = 50


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_memcslap(addr):
    before = child_cpu()
    out = subprocess.run(["taskset", "-c", "1", "memcslap", "-s", addr, "-t", "get", "-c", str(CONNS),
                          "-e", str(KEYS), "-N"], capture_output=True, text=True, check=True).stdout
    cpu = child_cpu() - before
    secs = float(re.search(r"Time to get\s+\d+ keys by\s+\d+ threads:\s+([\d.]+)", out).group(1))
    gets = KEYS * CONNS
    return gets / secs, cpu * 1e6 / gets


def run_ferrobench(addr):
    before = child_cpu()
    out = subprocess.run(["taskset", "-c", "1", FB, "-s", addr, "--key-size", "20", "--value-size", "20",
                          "-c", str(CONNS), "--threads", "1", "--ratio", "1:0", "--keyspace", str(KEYS),
                          "--preload", "--duration", "5", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"ferrobench failed: {out.stderr}")
    out = out.stdout
    cpu = child_cpu() - before
    r = json.loads(out)
    # The process's CPU includes the preload; the report's own figure is the run only.
    return r["ops_per_sec"], r["client_cpu_us_per_op"], cpu


def main():
    port = free_port()
    mc = subprocess.Popen(["taskset", "-c", "0", "memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port),
                           "-U", "0", "-t", "1", "-m", "256"])
    try:
        addr = f"127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        ms, fb = [], []
        for i in range(ROUNDS):
            rate, cpu = run_memcslap(addr)
            ms.append((rate, cpu))
            print(f"round {i + 1}: memcslap   {rate:10.0f} gets/s  {cpu:6.2f} µs CPU/get", flush=True)
            rate, cpu, _ = run_ferrobench(addr)
            fb.append((rate, cpu))
            print(f"round {i + 1}: ferrobench {rate:10.0f} gets/s  {cpu:6.2f} µs CPU/get", flush=True)
        med = lambda xs, k: statistics.median(x[k] for x in xs)
        print(f"median: memcslap   {med(ms, 0):10.0f} gets/s  {med(ms, 1):6.2f} µs CPU/get")
        print(f"median: ferrobench {med(fb, 0):10.0f} gets/s  {med(fb, 1):6.2f} µs CPU/get")
    finally:
        mc.kill()
        mc.wait()


if __name__ == "__main__":
    main()
