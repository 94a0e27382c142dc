"""meta-memcache (`meta_memcache`), a meta-protocol client (`mg ms md ma mn`), against
ferrocache and memcached: the plain cache API, then the herd-control features built on
the meta flags: miss leases (`N`, `W`/`Z`), stale-on-delete (`md I`, `X`) and recache
(`R`)."""

import pytest

from harness import require

meta_memcache = require("meta_memcache")
from meta_memcache import (  # noqa: E402
    CacheClient,
    Key,
    LeasePolicy,
    RecachePolicy,
    RequestFlags,
    ServerAddress,
    SetMode,
    StalePolicy,
    connection_pool_factory_builder,
)


@pytest.fixture
def port(kind, spawn):
    return spawn(kind)


def client(port):
    return CacheClient.cache_client_from_servers(
        servers=[ServerAddress(host="127.0.0.1", port=port)],
        connection_pool_factory_fn=connection_pool_factory_builder(
            connection_timeout=5, recv_timeout=5
        ),
    )


@pytest.fixture
def mc(port):
    return client(port)


def test_set_get(mc):
    assert mc.set("a", b"hello", ttl=100) is True
    assert mc.get("a") == b"hello"
    assert mc.get("missing") is None
    # The serializer keeps the type in the client flags.
    assert mc.set("s", "text", ttl=0) is True
    assert mc.get("s") == "text"
    assert mc.set("i", 5, ttl=0) is True
    assert mc.get("i") == 5
    assert mc.set("o", {"x": [1, 2]}, ttl=0) is True
    assert mc.get("o") == {"x": [1, 2]}
    big = bytes(range(256)) * 2000
    assert mc.set(Key("big", disabled_compression=True), big, ttl=0) is True
    assert mc.get("big") == big
    # Non-ASCII keys go as base64 (the `b` flag).
    assert mc.set(Key("ключ"), b"u", ttl=0) is True
    assert mc.get(Key("ключ")) == b"u"


def test_multi_get(mc):
    values = {f"k{i}": f"v{i}".encode() for i in range(40)}
    for key, value in values.items():
        assert mc.set(key, value, ttl=0) is True
    got = mc.multi_get(list(values) + ["missing"])
    assert {k.key: v for k, v in got.items()} == {**values, "missing": None}
    with_cas = mc.multi_get_cas(["k1", "missing"])
    value, cas = with_cas[Key("k1")]
    assert value == b"v1" and cas > 0
    assert with_cas[Key("missing")] == (None, None)


def test_set_modes(mc):
    assert mc.set("a", b"1", ttl=0, set_mode=SetMode.ADD) is True
    assert mc.set("a", b"2", ttl=0, set_mode=SetMode.ADD) is False
    assert mc.set("a", b"x", ttl=0, set_mode=SetMode.APPEND) is True
    assert mc.set("a", b"<", ttl=0, set_mode=SetMode.PREPEND) is True
    assert mc.get("a") == b"<1x"
    assert mc.set("a", b"3", ttl=0, set_mode=SetMode.REPLACE) is True
    assert mc.set("missing", b"3", ttl=0, set_mode=SetMode.REPLACE) is False
    assert mc.set("missing", b"3", ttl=0, set_mode=SetMode.APPEND) is False
    assert mc.get("a") == b"3"
    assert mc.get("missing") is None


def test_delete_invalidate_touch(mc):
    mc.set("a", b"1", ttl=0)
    assert mc.delete("a") is True
    assert mc.delete("a") is False
    assert mc.invalidate("a") is True  # "gone", whether or not it was there
    assert mc.get("a") is None
    mc.set("t", b"1", ttl=0)
    assert mc.touch("t", 100) is True
    assert mc.touch("missing", 100) is False
    got = mc.meta_get(Key("t"), flags=RequestFlags(return_value=False, return_ttl=True))
    assert 98 <= got.flags.ttl <= 100


def test_delta(mc):
    assert mc.delta("n", 1) is False  # a miss
    assert mc.delta_initialize_and_get("n", 1, initial_value=10, initial_ttl=100) == 10
    assert mc.delta_and_get("n", 5) == 15
    assert mc.delta_and_get("n", -3) == 12
    assert mc.delta("n", 1) is True
    assert mc.delta_and_get("n", -100) == 0
    assert mc.delta_and_get("missing", 1) is None


def test_cas(mc):
    assert mc.get_cas("missing") == (None, None)
    mc.set("a", b"1", ttl=0)
    value, cas = mc.get_cas("a")
    assert value == b"1" and cas > 0
    assert mc.set("a", b"2", ttl=0, cas_token=cas) is True
    # The token is spent.
    assert mc.set("a", b"3", ttl=0, cas_token=cas) is False
    assert mc.get("a") == b"2"
    new_cas = mc.set_cas("a", b"4", ttl=0)
    assert new_cas is not None and new_cas != cas
    assert mc.get_cas("a") == (b"4", new_cas)
    assert mc.delete("a", cas_token=cas) is False
    assert mc.delete("a", cas_token=new_cas) is True


def test_miss_lease(port):
    winner, loser = client(port), client(port)
    policy = LeasePolicy(ttl=30, miss_retries=3, miss_retry_wait=0.01)
    waits = []
    # The first miss wins the lease (`mg N`: EN then a `W` placeholder) ...
    value, cas = winner.get_or_lease_cas("k", policy, lease_wait_fn=waits.append)
    assert value is None and cas is not None and waits == []
    # ... the others see the placeholder (`Z`), retry, and give up as a miss.
    assert loser.get_or_lease("k", policy, lease_wait_fn=waits.append) is None
    assert len(waits) == policy.miss_retries - 1
    # The winner fills it with the lease's CAS; now everybody hits.
    assert winner.set("k", b"filled", ttl=100, cas_token=cas) is True
    assert loser.get_or_lease("k", policy, lease_wait_fn=waits.append) == b"filled"


def test_stale_on_delete(port):
    first, second = client(port), client(port)
    first.set("k", b"old", ttl=100)
    assert first.delete("k", stale_policy=StalePolicy(mark_stale_on_deletion_ttl=30)) is True
    # `md I`: the item stays, marked stale. The first reader wins the recache (`W`) and
    # sees a miss; the others get the stale value (`X`, `Z`) until it is refilled.
    assert first.get("k") is None
    assert second.get("k") == b"old"
    raw = second.meta_get(Key("k"), flags=RequestFlags(return_value=True, return_ttl=True))
    assert raw.flags.stale is True and raw.flags.win is False
    assert first.set("k", b"new", ttl=100) is True
    assert second.get("k") == b"new"


def test_recache(port):
    first, second = client(port), client(port)
    first.set("k", b"v", ttl=10)
    policy = RecachePolicy(ttl=30)
    # `mg R30`: the TTL left (10 s) is under 30 s, so one client wins the recache and is
    # told to miss, the next still gets the value.
    assert first.get("k", recache_policy=policy) is None
    assert second.get("k", recache_policy=policy) == b"v"
