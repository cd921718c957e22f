"""``rollstream demo`` as a newcomer runs it (what ``make demo`` runs), in exact-context mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollstream.settings import KafkaSettings

pytestmark = pytest.mark.integration


def test_the_demo_trains_and_exact_context_keeps_each_trajectory_whole(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    report = tmp_path / "demo.html"
    # The session's broker (the demo starts one only when none is configured).
    env = os.environ | {"ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers}
    args = ["--harness", "python", "--samples", "2", "--context", "exact", "--report", report]
    demo = subprocess.run(
        [sys.executable, "-m", "rollstream", "demo", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert "sessions 6 (6 completed)" in out, out
    # Every session's calls continue one thread: one segment each, nothing broken by drift.
    assert "reconstruction (prefix_merge): 1.00 segments per trajectory" in out, out
    assert ", 0 breaks," in out, out
    assert out.count("trainer: step ") == 3
    assert "stamped with policy v3" in out
    assert report.stat().st_size > 10_000
    # The console watched the run: its URL, with a token, was printed while the demo ran.
    assert "console: http://127.0.0.1:" in demo.stderr and "/#token=" in demo.stderr, demo.stderr
