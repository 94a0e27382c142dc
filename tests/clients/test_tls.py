"""TLS (`-Z`) with real clients, against ferrocache and memcached: pymemcache with an
`ssl.SSLContext`, including a client certificate under `ssl_verify_mode=2`, and
`openssl s_client` as an operator would use it."""

import os
import shutil
import ssl
import subprocess

import pytest

from harness import require

require("pymemcache")
from pymemcache.client.base import Client  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "server", "tests", "tls")


def fixture(name):
    return os.path.abspath(os.path.join(FIXTURES, name))


def tls_flags(extra=""):
    opts = f"ssl_chain_cert={fixture('server.pem')},ssl_key={fixture('server.key')}"
    if extra:
        opts += "," + extra
    return ["-Z", "-o", opts]


def context(client_cert=None):
    ctx = ssl.create_default_context(cafile=fixture("ca.pem"))
    if client_cert:
        ctx.load_cert_chain(fixture(client_cert + ".pem"), fixture(client_cert + ".key"))
    return ctx


def client(port, ctx):
    return Client(("127.0.0.1", port), tls_context=ctx, connect_timeout=5, timeout=5,
                  default_noreply=False)


def test_pymemcache_over_tls(kind, spawn):
    port = spawn(kind, *tls_flags())
    mc = client(port, context())
    try:
        assert mc.set("greeting", b"hello", expire=0) is True
        assert mc.get("greeting") == b"hello"
        big = bytes(range(256)) * 4000  # about 1 MB: many records
        assert mc.set("big", big) is True
        assert mc.get("big") == big
        many = {f"k{i}": str(i).encode() for i in range(200)}
        assert mc.set_many(many) == []
        assert mc.get_many(list(many)) == many
        value, cas = mc.gets("greeting")
        assert mc.cas("greeting", b"again", cas) is True
        assert mc.incr("k7", 5) == 12
        stats = mc.stats()
        assert int(stats[b"ssl_handshake_errors"]) >= 0
        assert stats[b"curr_connections"] >= 1
    finally:
        mc.close()


def test_client_certificate_required(kind, spawn):
    port = spawn(kind, *tls_flags(f"ssl_ca_cert={fixture('ca.pem')},ssl_verify_mode=2"))
    mc = client(port, context("client"))
    try:
        assert mc.set("mtls", b"yes") is True
        assert mc.get("mtls") == b"yes"
    finally:
        mc.close()
    anonymous = client(port, context())
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        anonymous.set("mtls", b"no")
        anonymous.get("mtls")
    anonymous.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")
def test_openssl_s_client(kind, spawn):
    port = spawn(kind, *tls_flags())
    # -ign_eof: keep reading after stdin ends, until the server closes (quit).
    out = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", fixture("ca.pem"),
         "-verify_return_error", "-quiet", "-ign_eof"],
        input=b"set k 0 0 5\r\nhello\r\nget k\r\nversion\r\nquit\r\n",
        capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\nVERSION "), out.stdout
