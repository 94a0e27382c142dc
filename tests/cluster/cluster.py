"""Processes and requests for the cluster tests: ferrocache nodes that can be killed and
restarted on the same port, twemproxy (nutcracker) in front of them, and batched
requests that say which node holds which key.

Every wait here is a poll with a deadline (`POLL_TIMEOUT_S`), never a fixed sleep that a
busy machine could outrun. Servers are started and readied through tests/clients/harness.py.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

import harness  # noqa: E402

from pymemcache.client.base import Client  # noqa: E402
from pymemcache.exceptions import MemcacheServerError, MemcacheUnexpectedCloseError  # noqa: E402

# Bound of every poll: ejection, rejoin, a retried batch. Generous, so that a loaded
# machine slows the test down without failing it.
POLL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.02
# Keys per multi-get or pipelined set_many.
BATCH = 500


def wait_for(what, check, timeout_s=POLL_TIMEOUT_S):
    """Polls `check()` until it returns something true, which it returns."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(POLL_INTERVAL_S)


def batches(items, size=BATCH):
    items = list(items)
    for i in range(0, len(items), size):
        yield items[i : i + size]


def direct_client(port):
    return Client(("127.0.0.1", port), connect_timeout=5, timeout=10, default_noreply=False)


class Node:
    """One ferrocache on 127.0.0.1, with memcached's flags `-U 0 -m 64 -t 1`. `kill()`
    sends SIGKILL by PID; `start()` again takes the same port."""

    def __init__(self, name, port=None):
        self.name = name
        self.port = port
        self.proc = None

    def start(self):
        fixed = self.port is not None
        for _ in range(1 if fixed else 20):
            port = self.port if fixed else harness.probably_free_port()
            args = harness.server_command("ferrocache")
            args += ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-t", "1"]
            if os.geteuid() == 0:
                args += ["-u", "root"]
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=harness._die_with_parent,
            )
            self.proc = proc
            if harness.wait_ready(proc.pid, port, alive=lambda: proc.poll() is None):
                self.port = port
                return self
            self.stop()
        where = f" on port {self.port}" if fixed else ""
        raise RuntimeError(f"could not start {self.name}{where}")

    def kill(self):
        """SIGKILL, then reap: the node dies as in a crash, without closing anything."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc is not None:
            harness.stop_server(self.proc)

    def client(self):
        return direct_client(self.port)

    def get_many(self, keys):
        """The keys this node holds, with their values: one multi-get per batch."""
        client = self.client()
        try:
            found = {}
            for batch in batches(keys):
                found.update(client.get_many(batch))
            return found
        finally:
            client.close()


class Twemproxy:
    """nutcracker in the foreground (no -d: the PID is ours), with one pool `cluster` over
    `nodes`, listening and serving stats on free 127.0.0.1 ports."""

    # As in docs/operations.md, but for `timeout`: a node's reply later than that counts as
    # a failure, and two eject it, so a loaded test machine gets more than 400 ms.
    SETTINGS = {
        "hash": "fnv1a_64",
        "distribution": "ketama",
        "timeout": 2000,
        "auto_eject_hosts": "true",
        "server_retry_timeout": 2000,
        "server_failure_limit": 2,
    }

    def __init__(self, workdir, nodes):
        self.workdir = Path(workdir)
        self.nodes = nodes
        self.conf = self.workdir / "nutcracker.yml"
        self.log = self.workdir / "nutcracker.log"
        self.proc = None
        self.port = None
        self.stats_port = None

    def config(self, port):
        lines = ["cluster:", f"  listen: 127.0.0.1:{port}"]
        lines += [f"  {key}: {value}" for key, value in self.SETTINGS.items()]
        lines += ["  servers:"]
        lines += [f"    - 127.0.0.1:{node.port}:1 {node.name}" for node in self.nodes]
        return "\n".join(lines) + "\n"

    def start(self):
        for _ in range(20):
            port = harness.probably_free_port()
            self.conf.write_text(self.config(port))
            check = subprocess.run(["nutcracker", "-t", "-c", str(self.conf)],
                                   capture_output=True, text=True, timeout=30)
            assert check.returncode == 0 and "syntax is ok" in check.stderr, check
            stats_port = harness.probably_free_port()
            # No -p: nutcracker 0.5.0 writes its pid file only when it daemonizes (-d).
            # Stats are aggregated every 100 ms (-i), not every 30 s.
            proc = subprocess.Popen(
                ["nutcracker", "-c", str(self.conf), "-o", str(self.log),
                 "-s", str(stats_port), "-a", "127.0.0.1", "-i", "100"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=harness._die_with_parent)
            self.proc = proc
            if harness.wait_ready(proc.pid, port, alive=lambda: proc.poll() is None):
                self.port = port
                self.stats_port = stats_port
                return self
            self.stop()  # lost a race for one of its ports
        raise RuntimeError(f"could not start nutcracker; its log:\n{self.log_tail()}")

    def stop(self):
        if self.proc is not None:
            harness.stop_server(self.proc)

    def log_tail(self, lines=40):
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def client(self):
        return direct_client(self.port)

    def stats(self):
        """The stats port's JSON: the pool `cluster`, with a dict per server."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=10) as s:
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data)["cluster"]


# What twemproxy answers, for a request it cannot forward, instead of the server's reply.
PROXY_ERRORS = (MemcacheServerError, MemcacheUnexpectedCloseError, OSError)


def retried(what, request, tolerated=PROXY_ERRORS):
    """`request()`, again while it fails with one of `tolerated` (through the proxy: a
    request that reaches a dead node while twemproxy tries it again after
    server_retry_timeout), bounded."""
    errors = []

    def attempt():
        try:
            return (request(),)
        except tolerated as e:
            errors.append(e)
            return None

    try:
        return wait_for(what, attempt)[0]
    except TimeoutError as e:
        raise TimeoutError(f"{e}; last errors: {errors[-3:]}") from None


def proxy_get_many(proxy, keys):
    """Every key through the proxy, in multi-gets; a batch is retried on an error."""
    client = proxy.client()
    try:
        found = {}
        for batch in batches(keys):
            found.update(retried("get through the proxy", lambda: client.get_many(batch)))
        return found
    finally:
        client.close()


def proxy_set_many(proxy, values):
    """Pipelined sets through the proxy; a batch is retried on an error."""
    client = proxy.client()
    try:
        for batch in batches(values):
            failed = retried("set through the proxy",
                             lambda: client.set_many({key: values[key] for key in batch}))
            assert not failed, f"not stored: {failed[:5]}"
    finally:
        client.close()


def owners(nodes, keys):
    """Which node holds each key, asked of every node directly."""
    where = {}
    for node in nodes:
        for key in node.get_many(keys):
            assert key not in where, f"{key} on both {where[key].name} and {node.name}"
            where[key] = node
    return where
