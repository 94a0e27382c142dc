"""Fixtures of the cluster tests (cluster.py does the work).

- `nodes`: three ferrocache nodes on free ports, named node0..node2;
- `proxy`: nutcracker over `nodes`.

Each is stopped by PID when the test ends, failures included; the processes also die with
pytest should it be killed (PR_SET_PDEATHSIG).
"""

import pytest

import cluster

NODE_COUNT = 3


@pytest.fixture
def nodes():
    started = []
    try:
        for i in range(NODE_COUNT):
            node = cluster.Node(f"node{i}")
            started.append(node)
            node.start()
        yield started
    finally:
        for node in started:
            node.stop()


@pytest.fixture
def proxy(nodes, tmp_path):
    twemproxy = cluster.Twemproxy(tmp_path, nodes)
    try:
        yield twemproxy.start()
    finally:
        twemproxy.stop()
        # Shown by pytest only when the test failed.
        print(f"nutcracker.log:\n{twemproxy.log_tail()}")
