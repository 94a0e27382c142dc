"""memcached's own operator tools against ferrocache and memcached: Debian's
memcached-tool (the Perl script shipped in the memcached package, modes `display`,
`stats`, `settings` and `dump`) and libmemcached-tools' `memcdump`.

Both servers get the same 40 keys (four value sizes, a few flags, some with a TTL); then
each tool's output must have the same *shape* on both: the same `display` header and row
format, with every stored item counted; the same stat and setting names (ferrocache may
add the names listed in FERROCACHE_EXTRA_STATS and FERROCACHE_EXTRA_SETTINGS, which
memcached does not have); the same keys, flags and values from `dump` and the same keys
from `memcdump`. Values that differ by nature (pids, times, byte counts) are not compared.
"""

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import require_tool

TIMEOUT_S = 30
MEMCACHED_TOOL = "/usr/share/memcached/scripts/memcached-tool"

# ferrocache's own statistics, printed after memcached's in `stats`: its memory
# accounting (docs/protocol.md, "stats").
FERROCACHE_EXTRA_STATS = {
    "store_budget_bytes",
    "item_memory_bytes",
    "index_bytes",
    "conn_buffer_bytes",
    "conn_buffer_pooled_bytes",
    "conn_state_bytes",
    "conn_charged_bytes",
}
# ferrocache's own settings in `stats settings`: its flags that memcached does not have
# (the I/O backend, pinning, busy polling, huge pages, UDP GSO, zero copy, the null
# store used by benchmarks) and `watch_enabled`.
FERROCACHE_EXTRA_SETTINGS = {
    "watch_enabled",
    "io_backend",
    "null_store",
    "pin",
    "busy_poll_us",
    "large_pages",
    "udp_gso",
    "zero_copy_min",
    "latency_histograms",
    "metrics_listen",
}

# 40 keys: ten each of four sizes, in different slab classes; flags vary, and every
# fourth key has a TTL (an absolute expiry in `dump`).
SIZES = (10, 200, 3000, 40000)
TTL_S = 3600


def stored_items():
    items = {}
    for size in SIZES:
        for i in range(10):
            key = f"tool:{size}:{i}"
            value = (f"{key}=".encode() + bytes(range(97, 123)) * (size // 26 + 1))[:size]
            items[key] = (i * 7, TTL_S if i % 4 == 0 else 0, value)
    return items


ITEMS = stored_items()


def store(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        stream = conn.makefile("rb")
        for key, (flags, ttl, value) in ITEMS.items():
            command = b"set %s %d %d %d\r\n" % (key.encode(), flags, ttl, len(value))
            conn.sendall(command + value + b"\r\n")
            assert stream.readline() == b"STORED\r\n", key


@pytest.fixture(scope="module")
def servers():
    """Both servers, started once for the module, holding the same 40 items."""
    import harness

    procs = []
    ports = {}
    try:
        for kind in harness.KINDS:
            proc, port = harness.start_server(kind)
            procs.append(proc)
            store(port)
            ports[kind] = port
        yield ports
    finally:
        for proc in procs:
            harness.stop_server(proc)


def memcached_tool():
    path = Path(MEMCACHED_TOOL)
    if not path.is_file():
        require_tool("memcached-tool-not-installed")  # skips, or fails when required
    return str(path)


def run(argv):
    result = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, check=False)
    assert result.returncode == 0, (argv, result.returncode, result.stderr)
    return result.stdout.decode("latin-1")


def tool(servers, kind, mode):
    return run(["perl", memcached_tool(), f"127.0.0.1:{servers[kind]}", mode])


def field_names(output):
    """The names of `memcached-tool stats|settings`: a header, then `name value` lines."""
    lines = output.splitlines()
    header = lines[0]
    assert header.startswith("#127.0.0.1:") and header.split()[1:] == ["Field", "Value"], header
    names = []
    for line in lines[1:]:
        fields = line.split(None, 1)
        assert fields, line
        names.append(fields[0])
    assert names == sorted(names)
    return names


def test_display(servers, kind):
    # One row per slab class in use: number, chunk size, age, pages, count, full?,
    # evicted, evict time, OOM.
    header = "  #  Item_Size  Max_age   Pages   Count   Full?  Evicted Evict_Time OOM"
    row = re.compile(
        r"^ *(\d+) +(\d+B|\d+\.\dK) +(\d+)s +(\d+) +(\d+) +(yes| no) +(\d+) +(\d+) +(\d+)$"
    )
    lines = tool(servers, kind, "display").splitlines()
    assert lines[0] == header, (kind, lines[0])
    rows = [row.match(line) for line in lines[1:]]
    assert rows and all(rows), (kind, lines)
    classes = [int(m.group(1)) for m in rows]
    assert classes == sorted(set(classes)), (kind, classes)
    # Every stored item is counted in some class, and only those.
    assert sum(int(m.group(5)) for m in rows) == len(ITEMS), (kind, lines)
    # Four value sizes from 10 B to 40 KB do not fit one class.
    assert len(rows) >= 2, (kind, lines)


def test_stats_names(servers):
    names = {kind: field_names(tool(servers, kind, "stats")) for kind in servers}
    assert {"pid", "curr_items", "get_hits"} <= set(names["memcached"])
    missing = set(names["memcached"]) - set(names["ferrocache"])
    assert not missing, f"ferrocache lacks memcached's stats {sorted(missing)}"
    extra = set(names["ferrocache"]) - set(names["memcached"]) - FERROCACHE_EXTRA_STATS
    assert not extra, f"ferrocache has undocumented stats {sorted(extra)}"


def test_settings_names(servers):
    names = {kind: field_names(tool(servers, kind, "settings")) for kind in servers}
    assert {"maxbytes", "maxconns", "item_size_max"} <= set(names["memcached"])
    missing = set(names["memcached"]) - set(names["ferrocache"])
    assert not missing, f"ferrocache lacks memcached's settings {sorted(missing)}"
    extra = set(names["ferrocache"]) - set(names["memcached"]) - FERROCACHE_EXTRA_SETTINGS
    assert not extra, f"ferrocache has undocumented settings {sorted(extra)}"


def parse_dump(output):
    """`memcached-tool dump` prints each item as an `add KEY FLAGS EXPTIME LEN` command
    and its value (exptime 0, or the absolute expiry time)."""
    items = {}
    data = output.encode("latin-1")
    pos = 0
    header = re.compile(rb"add (\S+) (\d+) (-?\d+) (\d+)\r\n")
    while pos < len(data):
        m = header.match(data, pos)
        assert m, data[pos : pos + 80]
        length = int(m.group(4))
        start = m.end()
        assert data[start + length : start + length + 2] == b"\r\n"
        value = data[start : start + length]
        items[m.group(1).decode()] = (int(m.group(2)), int(m.group(3)), value)
        pos = start + length + 2
    return items


def test_dump(servers, kind):
    now = time.time()
    dumped = parse_dump(tool(servers, kind, "dump"))
    assert set(dumped) == set(ITEMS), (kind, sorted(set(dumped) ^ set(ITEMS)))
    for key, (flags, exptime, value) in dumped.items():
        want_flags, ttl, want_value = ITEMS[key]
        assert (flags, value) == (want_flags, want_value), (kind, key)
        if ttl:
            assert abs(exptime - (now + ttl)) < 120, (kind, key, exptime)
        else:
            assert exptime == 0, (kind, key, exptime)


def test_memcdump(spawn, kind):
    # memcdump lists the keys through `stats items` and `stats cachedump`. memcached's
    # cachedump walks only the COLD LRU: with its segmented LRU on, the newest items of
    # each class wait in HOT for the maintainer thread and are not listed. Without the
    # maintainer every item is linked into COLD at once, so both servers get that flag.
    memcdump = require_tool("memcdump")
    port = spawn(kind, "-o", "no_lru_maintainer")
    store(port)
    keys = run([memcdump, f"--servers=127.0.0.1:{port}"]).split()
    assert sorted(keys) == sorted(ITEMS), (kind, sorted(set(keys) ^ set(ITEMS)))
