"""A server run under valgrind's callgrind, for counting user-space instructions
(scripts/callgrind-per-request, scripts/instr-gate).

Counts hardly depend on what else the machine is doing: callgrind counts instructions,
not time. What does move them is what the program is given: the key hash's seed (a
ferrocache started with `--hash-seed` fixes it), and how requests are batched into reads.

Every process started here is killed by PID when the `with` block ends, or at exit.
"""

import os
import resource
import signal
import socket
import subprocess
import time

started = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _total(path):
    for line in open(path):
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


class Callgrind:
    """One server process under callgrind, listening on a free loopback port.

    `argv` is the server's command line without `-p`/`-l`; `out` the callgrind output
    file's path, to which callgrind appends `-TT`, the thread's number, one file a
    thread (`--separate-threads=yes`)."""

    def __init__(self, argv, out, extra=(), start_timeout=60):
        self.out = out
        self.port = free_port()
        for name in os.listdir(os.path.dirname(out) or "."):
            # Thread files of an earlier run kept in the same directory.
            if name.startswith(os.path.basename(out) + "-"):
                os.remove(os.path.join(os.path.dirname(out), name))
        args = (["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 "--separate-threads=yes", *extra] + list(argv)
                + ["-p", str(self.port), "-l", "127.0.0.1"])
        if os.geteuid() == 0:
            # Stay root, so that callgrind can write its file at exit.
            args += ["-u", "root"]
        # valgrind keeps the top 12 descriptors and refuses any other hard limit, and
        # memcached sets its hard limit to -c: give both 1024.
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)))
        started.append(self.proc)
        deadline = time.time() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited under valgrind: {' '.join(args)}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline:
                    self.close()
                    raise RuntimeError("server did not start under valgrind")
                time.sleep(0.05)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stop(self):
        """SIGTERM (both servers exit cleanly on it, and callgrind writes its counts
        then), then each thread's total instructions, by callgrind's thread number
        (the order of creation)."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)
        self.close()
        totals = {}
        folder = os.path.dirname(self.out) or "."
        for name in os.listdir(folder):
            full = os.path.join(folder, name)
            if full.startswith(self.out + "-"):
                totals[int(full[len(self.out) + 1:])] = _total(full)
        if not totals:
            raise RuntimeError(f"no callgrind output {self.out}-*")
        return totals

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc in started:
            started.remove(self.proc)


def kill_all():
    for proc in list(started):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        started.remove(proc)
