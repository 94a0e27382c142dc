"""The workspace's test executables as `cargo test --workspace` builds them (shared by
scripts/server-test-binaries and scripts/test-one).

Running them directly, rather than `cargo test -p <package>`, matters: cargo resolves
features for the packages a command selects, and the workspace's members turn on
features of shared dependencies (bitflags' std through ferrobench's rustix, syn's full,
...), so `-p ferrocache-server` alone would build the server and its tests again (about
7 minutes on a 2-core machine) for binaries that behave the same.
"""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_executables(cargo_args=("--release",)):
    """(executable, package directory, target name) of every test target the workspace
    builds, building what is missing: unit tests of each library and binary, every
    integration test binary. Doc tests are not executables and are not listed."""
    proc = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json", *cargo_args],
        cwd=ROOT, stdout=subprocess.PIPE, check=True, text=True,
    )
    found = {}
    for line in proc.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if (m.get("reason") == "compiler-artifact" and m.get("executable")
                and m["profile"]["test"]):
            package = os.path.dirname(m["manifest_path"])
            found[m["executable"]] = (m["executable"], package, m["target"]["name"])
    return sorted(found.values())
