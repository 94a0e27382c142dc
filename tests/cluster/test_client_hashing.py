"""The same three nodes without a proxy: the client hashes each key to a node. pylibmc
(libmemcached's ketama, with auto-eject) and pymemcache's HashClient (rendezvous hashing)
spread keys over the nodes, drop a killed node, write its keys to the survivors, and take
the node back, empty, when it returns on its port.
"""

import cluster
from cluster import harness, owners, wait_for

KEY_COUNT = 1000
MIN_SHARE = 0.15


class Cluster:
    """What the scenario needs of a client: multi-get, and multi-set returning the keys
    not stored; `tolerated`, the errors it may raise while a node is down."""

    def __init__(self, get_many, set_many, tolerated):
        self.get_many = get_many
        self.set_many = set_many
        self.tolerated = tolerated

    def get_all(self, keys):
        return cluster.retried("multi-get", lambda: self.get_many(keys), self.tolerated)

    def store_all(self, values):
        """Sets every value, again for those the client reports unstored, bounded."""
        left = dict(values)

        def attempt():
            try:
                failed = self.set_many(left)
            except self.tolerated:
                return False
            for key in set(left) - set(failed):
                del left[key]
            return not left

        wait_for(f"{len(left)} keys stored", attempt)


def fail_over_and_return(nodes, client):
    keys = [f"key:{i}" for i in range(KEY_COUNT)]
    original = {k: f"v1-{k}".encode() for k in keys}
    client.store_all(original)
    assert client.get_all(keys) == original

    where = owners(nodes, keys)
    assert len(where) == KEY_COUNT
    shares = {n.name: sum(1 for k in keys if where[k] is n) / KEY_COUNT for n in nodes}
    assert all(share > MIN_SHARE for share in shares.values()), shares

    # node0 dies: the others' keys still hit; node0's keys, written again, go to the
    # survivors once the client has dropped node0.
    victim, survivors = nodes[0], nodes[1:]
    lost = [k for k in keys if where[k] is victim]
    kept = [k for k in keys if where[k] is not victim]
    victim.kill()
    assert client.get_all(kept) == {k: original[k] for k in kept}
    client.store_all({k: f"v2-{k}".encode() for k in lost})
    assert set(owners(survivors, lost)) == set(lost)

    # node0 returns on its port, empty: once the client tries it again, its keys go back
    # to it, cold.
    victim.start()
    probe = lost[0]

    def rejoined():
        client.store_all({probe: b"probe"})
        return victim.get_many([probe]) == {probe: b"probe"}

    wait_for("node0 rejoins", rejoined)
    assert client.get_all(lost[1:]) == {}
    client.store_all({k: original[k] for k in lost})
    assert victim.get_many(lost) == {k: original[k] for k in lost}
    assert client.get_all(keys) == original


def test_pylibmc_ketama(nodes):
    pylibmc = harness.require("pylibmc")
    mc = pylibmc.Client(
        [f"127.0.0.1:{n.port}" for n in nodes],
        behaviors={
            "ketama": True,
            # Drop a server after a failure; try it again after retry_timeout (s).
            "remove_failed": 1,
            "retry_timeout": 1,
            "dead_timeout": 1,
            "connect_timeout": 1000,
        },
    )
    try:
        fail_over_and_return(nodes, Cluster(mc.get_multi, mc.set_multi, pylibmc.Error))
    finally:
        mc.disconnect_all()


def test_pymemcache_hash_client(nodes):
    from pymemcache.client.hash import HashClient
    from pymemcache.exceptions import MemcacheError

    hc = HashClient(
        [("127.0.0.1", n.port) for n in nodes],
        # A server that fails to connect is dropped at once and tried again after
        # dead_timeout (s). Not ignore_exc=True: with it, pymemcache 4.0.0's set_many
        # reports the keys of a dead server as stored, and never drops the server.
        retry_attempts=0,
        dead_timeout=1,
        connect_timeout=2,
        timeout=10,
        default_noreply=False,
    )
    try:
        fail_over_and_return(nodes, Cluster(hc.get_many, hc.set_many, (MemcacheError, OSError)))
    finally:
        hc.close()
