"""Shared pieces of the side-by-side benchmark scripts (bench-udp, bench-backends).

Servers are started pinned with taskset and killed by PID (on exit too, through
`install_cleanup`); ferrobench runs pinned to the other CPU and reports JSON; server CPU
comes from /proc/PID/stat (utime + stime).
"""

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")
started = []


def build_and_locate():
    """Build the server and ferrobench in release; return the target directory.

    With FERRO_PREBUILT=1 nothing is built and the target directory is the checkout's
    own `target` (a machine without a Rust toolchain, given the two binaries)."""
    if os.environ.get("FERRO_PREBUILT") == "1":
        return os.path.join(ROOT, "target")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "ferrocache-server",
                    "-p", "ferrocache-bench"], cwd=ROOT, check=True)
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(meta)["target_directory"]


def free_port():
    """A port free for both TCP and UDP a moment ago."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no free port")


def cpu_split(pid):
    """(user, system) CPU seconds of process `pid` so far, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def cpu_secs(pid):
    return sum(cpu_split(pid))


def start(kind, argv, cpu, udp=False, extra=(), threads=1):
    """Start `argv` (a server binary and nothing else) with `threads` workers (-t) on
    CPU `cpu` (a number, or a taskset list such as "0-3").

    `kind` is "memcached" or anything else for ferrocache (it picks the -u user when
    running as root). Returns (process, port) once the port accepts."""
    port = free_port()
    args = list(argv) + ["-t", str(threads), "-m", "1024", "-c", "4096", "-p", str(port),
                         "-U", str(port) if udp else "0", "-l", "127.0.0.1"] + list(extra)
    if os.geteuid() == 0:
        args += ["-u", "nobody" if kind == "memcached" else "root"]
    proc = subprocess.Popen(["taskset", "-c", str(cpu)] + args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(proc)
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{kind} did not start")


def stop(proc):
    proc.kill()
    proc.wait()
    started.remove(proc)


def ferrobench(bench, port, cpu, extra, timeout=120, threads=1):
    cmd = ["taskset", "-c", str(cpu), bench, "-s", f"127.0.0.1:{port}", "-t", str(threads),
           "--json", "--quiet"] + list(extra)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         timeout=timeout).stdout
    return json.loads(out)


def row(result, cpu_used):
    """The figures a table shows, from a ferrobench JSON result and server CPU seconds."""
    ops = result["ops"]
    lat = result["latency_us"]
    return {
        "ops_per_sec": result["ops_per_sec"],
        "p50": lat["p50"],
        "p99": lat["p99"],
        "p999": lat["p999"],
        "cpu_us_per_op": cpu_used * 1e6 / ops if ops else float("nan"),
        "hit_ratio": result["hit_ratio"],
    }


def cell(rows, field, fmt):
    """Median (min–max) of one field over repetitions."""
    vals = [r[field] for r in rows]
    return (f"{fmt.format(statistics.median(vals))} "
            f"({fmt.format(min(vals))}–{fmt.format(max(vals))})")


def median(rows, field):
    return statistics.median(r[field] for r in rows)


def _kill_all():
    for proc in list(started):
        proc.kill()
        proc.wait()
        started.remove(proc)


def run_main(main):
    """Run `main`, killing every started server on exit, error or signal."""
    def on_signal(*_):
        _kill_all()
        sys.exit(130)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        main()
    finally:
        _kill_all()
