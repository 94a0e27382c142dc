"""memccapable, libmemcached's protocol conformance test (Debian's name for memcapable),
against ferrocache. It runs against memcached 1.6.18 first: every test that passes
there must pass against ferrocache. (All of them pass there today: 27 ascii, 27 binary.)
"""

import re
import subprocess

import pytest

from harness import require_tool

# memccapable's own I/O timeout (-t) and ours for the whole run: a server that stops
# answering fails the run instead of hanging it.
IO_TIMEOUT_S = 5
RUN_TIMEOUT_S = 120
RESULT = re.compile(r"^(?P<name>(?:ascii|binary) [\w ]+?)\s+\[(?P<result>\w+)\]\s*$")


def memccapable(port, protocol):
    """Runs one protocol's tests; returns ({name: "pass"|"FAIL"|"skip"}, output)."""
    argv = [require_tool("memccapable"), "-h", "127.0.0.1", "-p", str(port)]
    argv += ["-t", str(IO_TIMEOUT_S), "-v", "-a" if protocol == "ascii" else "-b"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        output = f"{e.stdout or ''}{e.stderr or ''}\n(timed out after {RUN_TIMEOUT_S} s)"
    results = {}
    for line in output.splitlines():
        match = RESULT.match(line)
        if match:
            results[match["name"]] = match["result"]
    return results, output


@pytest.mark.parametrize("protocol", ["ascii", "binary"])
def test_memccapable(spawn, protocol):
    reference, reference_output = memccapable(spawn("memcached"), protocol)
    expected = {name for name, result in reference.items() if result == "pass"}
    assert len(expected) >= 20, f"memccapable barely ran against memcached:\n{reference_output}"

    results, output = memccapable(spawn("ferrocache"), protocol)
    failing = sorted(name for name in expected if results.get(name) != "pass")
    assert not failing, (
        f"pass against memcached 1.6.18, not against ferrocache: {failing}\n{output}"
    )
