"""The front end's own logic (SSE parsing, routes, paging, timeline, tokens): its Node tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rollstream.consumers.console.assets import web_dir

NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="Node.js not installed (the front end's tests run on it)")
def test_the_front_ends_unit_tests_pass() -> None:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--test", "test/"],
        cwd=web_dir(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # Node's runner ends with a summary: every test ran and passed.
    summary = dict(
        line[2:].split(" ", 1) for line in done.stdout.splitlines() if line.startswith("# ")
    )
    assert int(summary["pass"]) >= 40 and summary["fail"] == "0", done.stdout[-2000:]
