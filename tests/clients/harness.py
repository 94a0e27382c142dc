"""Servers for the real-client tests: start ferrocache or memcached on a free port, wait
until that process (and no other) listens, kill it by PID.

The pytest client tests start their servers here, mostly through conftest.py's `spawn`
fixture: extra server flags (`-S`, `-s`, `-I`), several servers per test. A command line
serves scripts/test-clients, which starts the servers of its Go, Node and Java clients:

    python3 tests/clients/harness.py free-port      # prints a port that was free
    python3 tests/clients/harness.py wait PID PORT  # exit 0 once PID alone listens on
                                                    # PORT; 1 if PID exited; 2 timeout

ferrocache binds one SO_REUSEPORT listener per worker, so a second server can bind a
port that is already taken. Readiness is therefore "PID owns every listening socket on
PORT", not "something accepts on PORT".

The ferrocache binary is $FERROCACHE_BIN, or target/release/ferrocache under
$CARGO_TARGET_DIR or the repository.
"""

import ctypes
import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 5.0
KINDS = ("ferrocache", "memcached")


def require(module):
    """Imports a client library; the test module is skipped when it is missing, unless
    $FERROCACHE_CLIENTS_REQUIRED is set (scripts/test-clients sets it, after installing
    every client), where a missing client is an error."""
    if os.environ.get("FERROCACHE_CLIENTS_REQUIRED"):
        return importlib.import_module(module)
    import pytest

    return pytest.importorskip(module, reason=f"{module} not installed: run scripts/test-clients")


def require_tool(name):
    """Path of a command-line tool; skip or error as `require` does."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not installed: run scripts/test-clients"
        if os.environ.get("FERROCACHE_CLIENTS_REQUIRED"):
            raise FileNotFoundError(message)
        import pytest

        pytest.skip(message)
    return path


def ferrocache_bin():
    if os.environ.get("FERROCACHE_BIN"):
        return Path(os.environ["FERROCACHE_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "release" / "ferrocache"


def server_command(kind):
    if kind == "ferrocache":
        path = ferrocache_bin()
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: run `cargo build --release`")
        return [str(path)]
    if kind != "memcached":
        raise ValueError(f"unknown server kind {kind!r}")
    path = shutil.which("memcached")
    if path is None:
        raise FileNotFoundError("memcached not installed: run scripts/test-clients")
    return [path]


def _die_with_parent():
    # PR_SET_PDEATHSIG: if pytest is killed, the server goes too.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def probably_free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 10 and fields[3] == "0A":
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def _socket_inodes(pid):
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_ready(pid, port, alive=None):
    """True once `pid` alone listens on TCP `port` and accepts; False if it exited."""
    alive = alive or (lambda: _alive(pid))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if not alive():
            return False
        listeners = _listening_inodes(port)
        if listeners and listeners <= _socket_inodes(pid):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                pass
        time.sleep(0.005)
    raise TimeoutError(f"server did not accept on port {port} within {STARTUP_TIMEOUT_S} s")


def _wait_unix_ready(proc, path):
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {path}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
            return
        except OSError:
            time.sleep(0.005)
    raise TimeoutError(f"server did not accept on {path} within {STARTUP_TIMEOUT_S} s")


def _popen(kind, args, env):
    args = server_command(kind) + list(args)
    if os.geteuid() == 0:
        args += ["-u", "root"]
    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
        preexec_fn=_die_with_parent,
    )


def start_server(kind, extra_args=(), env=None):
    """Starts `kind` on a free 127.0.0.1 port with memcached's flags
    `-U 0 -t 2 -m 64` plus `extra_args`; returns (process, port).
    Retries on a lost port race."""
    for _ in range(20):
        port = probably_free_port()
        args = ["-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "2", "-m", "64"]
        proc = _popen(kind, args + list(extra_args), env)
        try:
            if wait_ready(proc.pid, port, alive=lambda: proc.poll() is None):
                return proc, port
        except BaseException:
            stop_server(proc)
            raise
        stop_server(proc)
    raise RuntimeError(f"could not start {kind} on a free port")


def start_unix_server(kind, path, extra_args=()):
    """Starts `kind` listening on the UNIX socket `path` only; returns the process."""
    proc = _popen(kind, ["-s", str(path), "-U", "0", "-t", "2", "-m", "64"] + list(extra_args), None)
    try:
        _wait_unix_ready(proc, path)
    except BaseException:
        stop_server(proc)
        raise
    return proc


def stop_server(proc):
    """Kills by PID and reaps."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def main(argv):
    if argv[1:] == ["free-port"]:
        print(probably_free_port())
        return 0
    if len(argv) == 4 and argv[1] == "wait":
        try:
            return 0 if wait_ready(int(argv[2]), int(argv[3])) else 1
        except TimeoutError as e:
            print(e, file=sys.stderr)
            return 2
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
