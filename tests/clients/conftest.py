"""Fixtures shared by the real-client tests (harness.py does the work).

- `kind`: "ferrocache" or "memcached"; a test that takes it runs on both servers, so an
  expectation that memcached does not meet is a bug in the test, not in ferrocache.
- `spawn(kind, *flags, env=None)`: starts a server on a free port, returns the port;
  every server it started is killed when the test ends.
"""

import pytest

import harness


@pytest.fixture(params=harness.KINDS)
def kind(request):
    return request.param


@pytest.fixture
def spawn():
    procs = []

    def start(kind, *flags, env=None):
        proc, port = harness.start_server(kind, flags, env)
        procs.append(proc)
        return port

    try:
        yield start
    finally:
        for proc in procs:
            harness.stop_server(proc)
