"""pylibmc (libmemcached underneath) against ferrocache and memcached, in text and in
binary mode, on one server, on two with ketama consistent hashing, and over a UNIX
socket. The SASL test runs on ferrocache only (see test_bmemcached.py for why).

Two bugs of the libmemcached 1.0.16 bundled in pylibmc's wheel show against memcached
as against ferrocache, so those cases are tested in text mode only:
- binary `incr` on a non-numeric value: the error reply makes it mark the server dead;
- binary `touch` of a key that exists: it returns True only after its 5 s timeout.
"""

import glob
import os

import pytest

from harness import require, start_unix_server, stop_server


def _sasl_plugin_dir():
    for pattern in ("/usr/lib/*/sasl2", "/usr/lib/sasl2", "/usr/lib64/sasl2"):
        for path in sorted(glob.glob(pattern)):
            if glob.glob(os.path.join(path, "libplain.so*")):
                return path
    return None


# The pylibmc wheel bundles its own libsasl2, which looks for its mechanism plugins
# where it was built, and initialises SASL when imported: point it at the system's
# plugins (libsasl2-modules) first.
SASL_PLUGINS = os.environ.get("SASL_PATH") or _sasl_plugin_dir()
if SASL_PLUGINS:
    os.environ["SASL_PATH"] = SASL_PLUGINS

pylibmc = require("pylibmc")

MODES = ["text", "binary"]


@pytest.fixture(params=MODES)
def binary(request):
    return request.param == "binary"


def connect(servers, binary, **behaviors):
    return pylibmc.Client(servers, binary=binary, behaviors={"cas": True, **behaviors})


@pytest.fixture
def mc(kind, spawn, binary):
    client = connect([f"127.0.0.1:{spawn(kind)}"], binary)
    try:
        yield client
    finally:
        client.disconnect_all()


def test_set_get(mc):
    assert mc.set("a", b"hello") is True
    assert mc.get("a") == b"hello"
    assert mc.get("missing") is None
    # pylibmc keeps the type in the flags.
    assert mc.set("s", "text") is True
    assert mc.get("s") == "text"
    assert mc.set("i", 5) is True
    assert mc.get("i") == 5
    assert mc.set("o", {"x": [1, 2]}) is True
    assert mc.get("o") == {"x": [1, 2]}
    big = bytes(range(256)) * 2000
    assert mc.set("big", big) is True
    assert mc.get("big") == big
    with pytest.raises(pylibmc.TooBig):
        mc.set("big", b"x" * (1024 * 1024 + 1))


def test_multi(mc):
    values = {f"k{i}": f"v{i}".encode() for i in range(100)}
    assert mc.set_multi(values) == []  # the keys that failed
    assert mc.get_multi(list(values) + ["missing"]) == values
    assert mc.get_multi(["k1", "k1", "k2"]) == {"k1": b"v1", "k2": b"v2"}
    assert mc.delete_multi(["k1", "k2"]) is True
    assert mc.delete_multi(["k3", "missing"]) is False  # one was not there
    assert mc.get_multi(["k1", "k2", "k3", "k4"]) == {"k4": b"v4"}


def test_add_replace_append_prepend(mc, binary):
    assert mc.add("a", b"1") is True
    assert mc.add("a", b"2") is False
    if binary:
        with pytest.raises(pylibmc.NotFound):
            mc.replace("missing", b"x")
    else:
        assert mc.replace("missing", b"x") is False
    assert mc.replace("a", b"3") is True
    assert mc.append("a", b"+") is True
    assert mc.prepend("a", b"-") is True
    assert mc.append("missing", b"+") is False
    assert mc.get("a") == b"-3+"
    assert mc.get("missing") is None


def test_delete(mc):
    mc.set("a", b"1")
    assert mc.delete("a") is True
    assert mc.delete("a") is False
    assert mc.get("a") is None


def test_incr_decr(mc, binary):
    with pytest.raises(pylibmc.NotFound):
        mc.incr("n", 1)
    with pytest.raises(pylibmc.NotFound):
        mc.decr("n", 1)
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 3) == 12
    assert mc.decr("n", 100) == 0
    # memcached pads a shorter result with spaces, in place.
    assert mc.get("n") == b"0 "
    mc.set("n", b"18446744073709551615")
    assert mc.incr("n", 1) == 0
    mc.set_multi({"x": b"1", "y": b"5"})
    assert mc.incr_multi(["x", "y"], delta=2) is None
    assert mc.get_multi(["x", "y"]) == {"x": b"3", "y": b"7"}
    if not binary:
        mc.set("s", b"abc")
        with pytest.raises(pylibmc.Error):
            mc.incr("s", 1)
        assert mc.get("s") == b"abc"


def test_gets_cas(mc):
    assert mc.gets("missing") == (None, None)
    with pytest.raises(pylibmc.NotFound):
        mc.cas("missing", b"x", 5)
    mc.set("a", b"1")
    value, cas = mc.gets("a")
    assert value == b"1" and cas > 0
    assert mc.cas("a", b"2", cas) is True
    # The token is spent.
    assert mc.cas("a", b"3", cas) is False
    assert mc.get("a") == b"2"
    assert mc.gets("a")[1] != cas


def test_touch_flush_stats(mc, binary):
    mc.set("a", b"1")
    if not binary:
        assert mc.touch("a", 100) is True
    assert mc.touch("missing", 100) is False
    assert mc.get("a") == b"1"
    ((_, stats),) = mc.get_stats()
    assert int(stats["curr_items"]) == 1
    assert int(stats["threads"]) == 2
    assert stats["version"].startswith(b"1.6.18")
    assert mc.flush_all() is True
    assert mc.get("a") is None


def test_ketama_two_servers(kind, spawn, binary):
    servers = [f"127.0.0.1:{spawn(kind)}", f"127.0.0.1:{spawn(kind)}"]
    ring = connect(servers, binary, ketama=True)
    singles = [connect([server], binary) for server in servers]
    try:
        values = {f"key:{i}": f"value {i}".encode() for i in range(200)}
        assert ring.set_multi(values) == []
        assert ring.get_multi(list(values)) == values
        # Each key lives on exactly one server, and both servers got a share.
        held = [set(single.get_multi(list(values))) for single in singles]
        assert held[0].isdisjoint(held[1])
        assert held[0] | held[1] == set(values)
        assert min(len(h) for h in held) >= 40, [len(h) for h in held]
        # Each single-key operation goes to the key's server.
        for key in list(values)[:20]:
            owner = singles[0] if key in held[0] else singles[1]
            assert ring.delete(key) is True
            assert owner.get(key) is None
        ring.set("counter", b"1")
        assert ring.incr("counter", 41) == 42
        value, cas = ring.gets("counter")
        assert ring.cas("counter", b"0", cas) is True
        assert sum(single.get("counter") == b"0" for single in singles) == 1
    finally:
        for client in singles + [ring]:
            client.disconnect_all()


def test_unix_socket(kind, binary, tmp_path):
    path = tmp_path / "mc.sock"
    proc = start_unix_server(kind, path)
    try:
        client = connect([str(path)], binary)
        assert client.set("a", b"1") is True
        assert client.set_multi({"b": b"2", "c": b"3"}) == []
        assert client.get_multi(["a", "b", "c", "d"]) == {"a": b"1", "b": b"2", "c": b"3"}
        assert client.incr("a", 1) == 2
        assert client.delete("b") is True
        client.disconnect_all()
    finally:
        stop_server(proc)


def test_sasl_plain(spawn, tmp_path):
    if not pylibmc.support_sasl:
        pytest.skip("this pylibmc was built without SASL")
    if not SASL_PLUGINS:
        pytest.skip("no SASL PLAIN plugin: install libsasl2-modules")
    pwdb = tmp_path / "pwdb"
    pwdb.write_text("alice:s3cret\n")
    server = f"127.0.0.1:{spawn('ferrocache', '-S', env={'MEMCACHED_SASL_PWDB': str(pwdb)})}"
    good = pylibmc.Client([server], binary=True, username="alice", password="s3cret")
    try:
        assert good.set("a", b"1") is True
        assert good.get_multi(["a", "b"]) == {"a": b"1"}
    finally:
        good.disconnect_all()
    bad = pylibmc.Client([server], binary=True, username="alice", password="wrong")
    try:
        with pytest.raises(pylibmc.Error):
            bad.set("a", b"2")
    finally:
        bad.disconnect_all()
