"""pymemcache, a real memcached client (text protocol), against ferrocache and
memcached."""

import pytest

from harness import require

require("pymemcache")
from pymemcache.client.base import Client  # noqa: E402
from pymemcache.exceptions import MemcacheClientError  # noqa: E402


@pytest.fixture
def mc(kind, spawn):
    client = Client(
        ("127.0.0.1", spawn(kind)),
        connect_timeout=5,
        timeout=5,
        default_noreply=False,
    )
    try:
        yield client
    finally:
        client.close()


def test_set_get(mc):
    assert mc.set("a", b"hello") is True
    assert mc.get("a") == b"hello"
    assert mc.get("missing") is None
    assert mc.get("missing", default=b"d") == b"d"
    assert mc.set("a", "text") is True
    assert mc.get("a") == b"text"
    assert mc.set("empty", b"") is True
    assert mc.get("empty") == b""


def test_set_many_get_many(mc):
    values = {f"k{i}": f"v{i}".encode() for i in range(40)}
    assert mc.set_many(values) == []
    # 41 keys: more than memcached's 24 tokens per pass.
    got = mc.get_many(list(values) + ["missing"])
    assert got == values


def test_flags_round_trip(mc):
    assert mc.set("f", b"x", flags=4294967295) is True
    # With no deserializer, get returns the raw bytes whatever the flags.
    assert mc.get("f") == b"x"
    # raw_command strips the END line.
    assert mc.raw_command(b"get f", b"END\r\n") == b"VALUE f 4294967295 1\r\nx\r\n"


def test_add_replace(mc):
    assert mc.add("a", b"1") is True
    assert mc.add("a", b"2") is False
    assert mc.get("a") == b"1"
    assert mc.replace("a", b"3") is True
    assert mc.replace("missing", b"4") is False
    assert mc.get("a") == b"3"
    assert mc.get("missing") is None


def test_append_prepend(mc):
    assert mc.append("missing", b"x") is False
    assert mc.prepend("missing", b"x") is False
    mc.set("a", b"mid")
    assert mc.append("a", b"-end") is True
    assert mc.prepend("a", b"start-") is True
    assert mc.get("a") == b"start-mid-end"


def test_gets_cas(mc):
    assert mc.gets("missing") == (None, None)
    mc.set("a", b"1")
    value, cas = mc.gets("a")
    assert value == b"1"
    assert cas is not None and int(cas) > 0
    assert mc.cas("a", b"2", cas) is True
    assert mc.get("a") == b"2"
    # The token is spent.
    assert mc.cas("a", b"3", cas) is False
    assert mc.get("a") == b"2"
    assert mc.cas("missing", b"x", cas) is None
    _, cas2 = mc.gets("a")
    assert cas2 != cas
    many = mc.gets_many(["a", "missing"])
    assert list(many) == ["a"] and many["a"] == (b"2", cas2)


def test_incr_decr(mc):
    assert mc.incr("n", 1) is None
    assert mc.decr("n", 1) is None
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 3) == 12
    assert mc.decr("n", 100) == 0
    # memcached pads a shorter result with spaces, in place.
    assert mc.get("n") == b"0 "
    mc.set("n", b"18446744073709551615")
    assert mc.incr("n", 1) == 0
    mc.set("s", b"abc")
    with pytest.raises(MemcacheClientError, match="non-numeric"):
        mc.incr("s", 1)


def test_delete(mc):
    mc.set("a", b"1")
    assert mc.delete("a") is True
    assert mc.delete("a") is False
    assert mc.get("a") is None
    mc.set_many({"x": b"1", "y": b"2"})
    assert mc.delete_many(["x", "y", "z"]) is True
    assert mc.get_many(["x", "y"]) == {}


def test_touch_and_expiry(mc):
    assert mc.touch("missing", 100) is False
    mc.set("a", b"1")
    assert mc.touch("a", 1000) is True
    assert mc.get("a") == b"1"
    # A negative expiry expires at once.
    assert mc.touch("a", -1) is True
    assert mc.get("a") is None
    assert mc.set("b", b"1", expire=-1) is True
    assert mc.get("b") is None
    # pymemcache has no gat; send it raw.
    assert mc.raw_command(b"gat 10 missing", b"END\r\n") == b""
    mc.set("c", b"3")
    assert mc.raw_command(b"gat 1000 c", b"END\r\n") == b"VALUE c 0 1\r\n3\r\n"


def test_large_values(mc):
    big = bytes(range(256)) * 2000  # 512000 bytes, every byte value
    assert mc.set("big", big) is True
    assert mc.get("big") == big
    too_big = b"x" * (1024 * 1024 + 1)
    with pytest.raises(Exception, match="too large"):
        mc.set("big", too_big)
    # The failed set removed the old value, and the connection is still in sync.
    assert mc.get("big") is None
    assert mc.set("after", b"ok") is True
    assert mc.get("after") == b"ok"


def test_flush_all(mc):
    mc.set_many({"a": b"1", "b": b"2"})
    assert mc.flush_all() is True
    assert mc.get_many(["a", "b"]) == {}
    assert mc.set("a", b"3") is True
    assert mc.get("a") == b"3"


def test_stats_and_version(mc):
    before = mc.stats()
    mc.set("a", b"1")
    mc.get_many(["a", "b"])
    after = mc.stats()
    assert after[b"cmd_get"] - before[b"cmd_get"] == 2
    assert after[b"get_hits"] - before[b"get_hits"] == 1
    assert after[b"get_misses"] - before[b"get_misses"] == 1
    assert after[b"curr_items"] == 1
    assert after[b"limit_maxbytes"] == 64 * 1024 * 1024
    assert after[b"threads"] == 2
    assert mc.version()


def test_noreply(mc):
    noreply = Client(mc.server, default_noreply=True)
    try:
        assert noreply.set("a", b"1") is True
        assert noreply.add("a", b"2") is True  # no reply asked for: always True
        assert noreply.delete("missing") is True
        # A round trip on the same connection: the server has run the
        # noreply commands before it answers, whichever worker serves `mc`.
        assert noreply.get("a") == b"1"
    finally:
        noreply.close()
    assert mc.get("a") == b"1"
