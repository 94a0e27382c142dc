"""The libmemcached-tools command-line clients (Debian's `memc*` names for memcp,
memcat, memrm, memflush, memstat, ...) against ferrocache and memcached, in text mode
and in `--binary` mode. Each tool's exit status and output is checked; the same
expectations hold on both servers.

The tools store a file under its base name, with its bytes as the value; memcat prints
each value followed by a newline.
"""

import subprocess

import pytest

from harness import require_tool

MODES = ["text", "binary"]
TIMEOUT_S = 30
# memcping has no --binary: it pings with libmemcached's default, the text protocol.
TEXT_ONLY = {"memcping"}


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def tool(kind, spawn, mode):
    """tool(name, *args, servers=None) -> CompletedProcess, on one fresh server."""
    default = f"127.0.0.1:{spawn(kind)}"

    def run(name, *args, servers=None):
        argv = [require_tool(name), f"--servers={servers or default}"]
        if mode == "binary" and name not in TEXT_ONLY:
            argv.append("--binary")
        return subprocess.run(
            argv + list(args), capture_output=True, timeout=TIMEOUT_S, check=False
        )

    run.spawn = lambda: f"127.0.0.1:{spawn(kind)}"
    return run


def ok(result):
    assert result.returncode == 0, (result.args, result.returncode, result.stderr)
    return result.stdout


def failed(result):
    assert result.returncode != 0, (result.args, result.stdout, result.stderr)
    return result


@pytest.fixture
def files(tmp_path):
    contents = {
        "alpha": b"first value",
        "beta": bytes(range(256)) * 64,  # every byte value, 16 KiB
        "gamma": b"",
    }
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path, contents


def test_copy_cat_remove(tool, files):
    directory, contents = files
    ok(tool("memccp", *(str(directory / name) for name in contents)))
    # One key, then several in one call (the multi-get equivalent).
    assert ok(tool("memccat", "alpha")) == b"first value\n"
    assert ok(tool("memccat", "alpha", "beta", "gamma")) == b"".join(
        value + b"\n" for value in contents.values()
    )
    failed(tool("memccat", "missing"))
    # memcexist: exit status 0 for a hit, 1 for a miss.
    ok(tool("memcexist", "alpha"))
    failed(tool("memcexist", "missing"))
    ok(tool("memcrm", "alpha"))
    failed(tool("memcrm", "alpha"))
    failed(tool("memccat", "alpha"))
    assert ok(tool("memccat", "beta")) == contents["beta"] + b"\n"


def test_copy_modes_flags_touch(tool, files, mode):
    directory, _ = files
    alpha = str(directory / "alpha")
    # --add refuses an existing key, --replace a missing one.
    failed(tool("memccp", "--replace", alpha))
    ok(tool("memccp", "--add", "--flags=7", alpha))
    failed(tool("memccp", "--add", alpha))
    (directory / "alpha").write_bytes(b"second")
    ok(tool("memccp", "--replace", "--flags=4294967295", alpha))
    # -F prints the flags before the value.
    assert ok(tool("memccat", "-F", "alpha")) == b"4294967295\nsecond\n"
    ok(tool("memctouch", "--expire=100", "alpha"))
    failed(tool("memctouch", "--expire=100", "missing"))
    ok(tool("memccp", "--expire=-1", str(directory / "beta")))
    if mode == "text":
        # A negative expiry expires at once ...
        failed(tool("memccat", "beta"))
    else:
        # ... but binary expirations are unsigned: 0xffffffff is far in the future.
        assert ok(tool("memccat", "beta")) == (directory / "beta").read_bytes() + b"\n"


def test_flush(tool, files):
    directory, contents = files
    ok(tool("memccp", *(str(directory / name) for name in contents)))
    ok(tool("memcflush"))
    for name in contents:
        failed(tool("memccat", name))


def test_stat_ping_version(tool, files):
    directory, _ = files
    ok(tool("memccp", str(directory / "alpha")))
    stats = ok(tool("memcstat")).decode()
    assert stats.startswith("Server: 127.0.0.1 (")
    fields = dict(
        line.strip().split(": ", 1) for line in stats.splitlines()[1:] if ": " in line
    )
    assert fields["curr_items"] == "1"
    assert fields["threads"] == "2"
    assert fields["version"].startswith("1.6.18")
    version = tool("memcstat", "--server-version")
    ok(version)
    # It prints "HOST:PORT VERSION" on standard error.
    assert version.stderr.decode().split()[1] == "1.6.18"
    assert "Network Latency Test" in ok(tool("memcstat", "--analyze=latency")).decode()
    ok(tool("memcping"))


def test_two_servers(tool, files):
    directory, contents = files
    servers = f"{tool.spawn()},{tool.spawn()}"
    names = [f"k{i}" for i in range(30)]
    for name in names:
        (directory / name).write_bytes(name.encode() * 3)
    ok(tool("memccp", *(str(directory / name) for name in names), servers=servers))
    assert ok(tool("memccat", *names, servers=servers)) == b"".join(
        name.encode() * 3 + b"\n" for name in names
    )
    report = ok(tool("memcstat", "--analyze", servers=servers)).decode()
    assert "Number of Servers Analyzed         : 2" in report
    ok(tool("memcflush", servers=servers))
    failed(tool("memccat", names[0], servers=servers))
