"""python-binary-memcached (`bmemcached`), a binary-protocol client, against ferrocache
and memcached. The SASL test runs on ferrocache only: Debian's memcached takes SASL
passwords from Cyrus SASL, not from the MEMCACHED_SASL_PWDB file that ferrocache reads.
"""

import pytest

from harness import require

bmemcached = require("bmemcached")
from bmemcached.exceptions import MemcachedException  # noqa: E402


@pytest.fixture
def mc(kind, spawn):
    client = bmemcached.Client([f"127.0.0.1:{spawn(kind)}"], socket_timeout=5)
    try:
        yield client
    finally:
        client.disconnect_all()


def test_set_get(mc):
    assert mc.set("a", b"hello") is True
    assert mc.get("a") == b"hello"
    assert mc.get("missing") is None
    assert mc.get("missing", default="d") == "d"
    # bmemcached keeps the type in the flags: str, int and pickled objects round-trip.
    assert mc.set("s", "text") is True
    assert mc.get("s") == "text"
    assert mc.set("i", 42) is True
    assert mc.get("i") == 42
    assert mc.set("o", {"x": [1, 2]}) is True
    assert mc.get("o") == {"x": [1, 2]}
    assert mc.set("empty", b"") is True
    assert mc.get("empty") == b""


def test_large_value_compressed_and_not(mc):
    big = bytes(range(256)) * 2000
    assert mc.set("big", big, compress_level=0) is True
    assert mc.get("big") == big
    # zlib-compressed on the wire (bmemcached's own flag bit); the server stores bytes.
    assert mc.set("z", b"z" * 200_000) is True
    assert mc.get("z") == b"z" * 200_000


def test_multi_get_set_delete(mc):
    values = {f"k{i}": f"v{i}".encode() for i in range(40)}
    assert mc.set_multi(values) == []  # the keys that failed
    # One GETKQ per key then a NOOP: a quiet pipeline.
    assert mc.get_multi(list(values) + ["missing"]) == values
    got = mc.get_multi(["k1", "k2"], get_cas=True)
    assert got["k1"][0] == b"v1" and got["k1"][1] > 0
    assert mc.delete_multi(["k1", "k2"]) is True
    assert mc.get_multi(["k1", "k2", "k3"]) == {"k3": b"v3"}


def test_add_replace(mc):
    assert mc.add("a", b"1") is True
    assert mc.add("a", b"2") is False
    assert mc.replace("a", b"3") is True
    assert mc.replace("missing", b"4") is False
    assert mc.get("a") == b"3"


def test_delete(mc):
    mc.set("a", b"1")
    assert mc.delete("a") is True
    assert mc.get("a") is None
    # bmemcached reports a miss as success too: False means only "CAS mismatch".
    assert mc.delete("a") is True


def test_incr_decr(mc):
    # A miss stores the initial value (`default`) and returns it.
    assert mc.incr("n", 5, default=10) == 10
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 3) == 12
    assert mc.decr("n", 100) == 0
    # Stored with flags 0, which bmemcached reads back as text; memcached pads a
    # shorter result with spaces, in place.
    assert mc.get("n") == "0 "
    mc.set("big", b"18446744073709551615")
    assert mc.incr("big", 1) == 0
    mc.set("s", b"abc")
    with pytest.raises(MemcachedException) as err:
        mc.incr("s", 1)
    assert err.value.code == 6  # non-numeric value


def test_gets_cas(mc):
    assert mc.gets("missing") == (None, None)
    mc.set("a", b"1")
    value, cas = mc.gets("a")
    assert value == b"1" and cas > 0
    assert mc.cas("a", b"2", cas) is True
    assert mc.get("a") == b"2"
    # The token is spent.
    assert mc.cas("a", b"3", cas) is False
    assert mc.get("a") == b"2"
    # A CAS on a missing key is refused too.
    assert mc.cas("missing", b"x", cas) is False
    assert mc.get("missing") is None
    # set(get_cas=True) returns the new token.
    ok, cas2 = mc.set("a", b"4", get_cas=True)
    assert ok is True and cas2 > 0
    assert mc.gets("a") == (b"4", cas2)
    # A delete with a stale CAS is refused.
    assert mc.delete("a", cas=cas) is False
    assert mc.delete("a", cas=cas2) is True


def test_flush_and_stats(mc):
    mc.set_multi({"a": b"1", "b": b"2"})
    stats = next(iter(mc.stats().values()))
    assert int(stats["curr_items"]) == 2
    assert int(stats["threads"]) == 2
    assert stats["version"].startswith(b"1.6.18")
    assert mc.flush_all() is True
    assert mc.get_multi(["a", "b"]) == {}


def test_sasl_plain(spawn, tmp_path):
    pwdb = tmp_path / "pwdb"
    pwdb.write_text("alice:s3cret\n")
    port = spawn("ferrocache", "-S", env={"MEMCACHED_SASL_PWDB": str(pwdb)})
    good = bmemcached.Client([f"127.0.0.1:{port}"], "alice", "s3cret", socket_timeout=5)
    try:
        assert good.set("a", b"1") is True
        assert good.get("a") == b"1"
        assert good.incr("n", 1, default=7) == 7
    finally:
        good.disconnect_all()
    bad = bmemcached.Client([f"127.0.0.1:{port}"], "alice", "wrong", socket_timeout=5)
    try:
        with pytest.raises(MemcachedException, match="Auth failure"):
            bad.get("a")
    finally:
        bad.disconnect_all()
