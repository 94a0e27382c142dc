"""A real Prometheus server (Debian's `prometheus`) scrapes ferrocache's
`--metrics-listen` endpoint, and its HTTP query API returns what the traffic sent
here implies: memcached_exporter's counters under their names and labels, and the
request latency histograms, through `histogram_quantile` as a dashboard asks.

Twice: a plain Prometheus, which reads the text format and the histograms' classic
buckets, and one with native histograms on, which asks for the protobuf format and
stores the same histograms as native ones.

Run by scripts/test-prometheus. Every process started here is stopped by PID.
"""

import json
import math
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
import harness  # noqa: E402

# Prometheus starts, scrapes every second and answers: generous on a loaded machine.
DEADLINE_S = 90

SETS, HITS, MISSES, DELETES = 300, 200, 50, 10


def prometheus_bin():
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed: run scripts/test-prometheus")
    return path


def send(sock, data, until):
    sock.sendall(data)
    buf = b""
    while not buf.endswith(until):
        chunk = sock.recv(65536)
        assert chunk, "server closed the connection"
        buf += chunk
    return buf


def traffic(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for i in range(SETS):
            assert send(s, b"set key%d 0 0 5\r\nvalue\r\n" % i, b"\r\n") == b"STORED\r\n"
        for i in range(HITS):
            assert send(s, b"get key%d\r\n" % i, b"END\r\n").startswith(b"VALUE ")
        for i in range(MISSES):
            assert send(s, b"get absent%d\r\n" % i, b"END\r\n") == b"END\r\n"
        for i in range(DELETES):
            assert send(s, b"delete key%d\r\n" % (SETS - 1 - i), b"\r\n") == b"DELETED\r\n"
        # One multi-get of three present keys.
        assert send(s, b"get key0 key1 key2\r\n", b"END\r\n").count(b"VALUE ") == 3


def start_ferrocache():
    """ferrocache with its metrics on a free port: (process, port, metrics port)."""
    for _ in range(10):
        metrics = harness.probably_free_port()
        try:
            proc, port = harness.start_server("ferrocache", ["--metrics-listen", f"127.0.0.1:{metrics}"])
        except RuntimeError:
            continue
        return proc, port, metrics
    raise RuntimeError("could not start ferrocache with a free metrics port")


def query(api, expr):
    url = f"http://127.0.0.1:{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def value(api, expr):
    result = query(api, expr)
    assert len(result) == 1, f"{expr}: {result}"
    return float(result[0]["value"][1])


@pytest.fixture(params=["classic", "native"])
def scraped(request, tmp_path):
    """ferrocache after the traffic above, and a Prometheus that has scraped it: (the
    query API's port, whether native histograms are on)."""
    native = request.param == "native"
    proc, port, metrics = start_ferrocache()
    prom = None
    try:
        traffic(port)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: ferrocache\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{metrics}']\n"
        )
        api = harness.probably_free_port()
        log = open(tmp_path / "prometheus.log", "wb")
        prom = subprocess.Popen(
            [
                prometheus_bin(),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{api}",
            ]
            + (["--enable-feature=native-histograms"] if native else []),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=harness._die_with_parent,
        )
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                # A scrape that succeeded and holds the last family of the page.
                if query(api, 'up{job="ferrocache"} == 1') and query(
                    api, "ferrocache_store_budget_bytes"
                ):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no successful scrape in time"
            time.sleep(0.5)
        yield api, native
    finally:
        if prom is not None:
            prom.kill()
            prom.wait(timeout=10)
        harness.stop_server(proc)


def test_prometheus_scrapes_exporter_names_and_latency(scraped):
    api, native = scraped
    commands = 'memcached_commands_total{job="ferrocache",command="%s",status="%s"}'
    assert value(api, commands % ("get", "hit")) == HITS + 3
    assert value(api, commands % ("get", "miss")) == MISSES
    assert value(api, commands % ("delete", "hit")) == DELETES
    assert value(api, commands % ("set", "hit")) == SETS
    assert value(api, "memcached_current_items") == SETS - DELETES
    assert value(api, "memcached_items_evicted_total") == 0
    assert value(api, "memcached_limit_bytes") == 64 * 1024 * 1024
    assert value(api, "memcached_current_connections") >= 0
    assert value(api, 'memcached_slab_current_items{slab="1"}') == SETS - DELETES

    assert value(api, 'ferrocache_memory_bytes{area="items"}') > 0

    counts = {"get": HITS + MISSES, "multiget": 1, "set": SETS, "delete": DELETES}
    if native:
        # One native histogram per command: its count, and a quantile of it.
        for command, n in counts.items():
            series = 'ferrocache_request_duration_seconds{command="%s"}' % command
            assert value(api, f"histogram_count({series})") == n
        p99 = value(
            api,
            'histogram_quantile(0.99, ferrocache_request_duration_seconds{command="get"})',
        )
        assert not query(api, "ferrocache_request_duration_seconds_bucket")
    else:
        for command, n in counts.items():
            series = 'ferrocache_request_duration_seconds_count{command="%s"}' % command
            assert value(api, series) == n
        # As a latency dashboard asks: a quantile from the buckets.
        p99 = value(
            api,
            'histogram_quantile(0.99, sum by (le) '
            '(ferrocache_request_duration_seconds_bucket{command="get"}))',
        )
        # Every bucket series of a command is there, +Inf equal to the count.
        buckets = query(api, 'ferrocache_request_duration_seconds_bucket{command="set"}')
        assert len(buckets) == 26
        inf = [b for b in buckets if b["metric"]["le"] == "+Inf"]
        assert float(inf[0]["value"][1]) == SETS
    assert math.isfinite(p99) and 0 < p99 < 17.2, p99
