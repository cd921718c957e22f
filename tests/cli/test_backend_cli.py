"""``rollstream backend`` as a process: serves, stops on SIGTERM, refuses bad configuration."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rollstream", "backend", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"ROLLSTREAM_LOG_LEVEL": "WARNING"},
    )


def test_serves_the_default_tokenizer_and_tiny_policy_then_stops_on_sigterm() -> None:
    proc = _start("--port", "0")
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(
        r"serving rollstream-tiny \(tiny policy, (\d+) tokens\) on (http://\S+)", line
    )
    assert match, line
    base = match.group(2)
    try:
        with urllib.request.urlopen(f"{base}/models", timeout=10) as response:
            assert json.load(response)["data"][0]["id"] == "rollstream-tiny"
        request = urllib.request.Request(
            f"{base}/chat/completions",
            data=json.dumps(
                {
                    "model": "rollstream-tiny",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 4,
                    "return_token_ids": True,
                }
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
        assert 1 <= len(body["choices"][0]["token_ids"]) <= 4
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert proc.returncode == 0


def test_a_bad_scenario_file_is_a_clear_startup_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("scenarios: [{name: a, turns: []}]")
    proc = _start("--policy", "scripted", "--scenarios", str(path), "--port", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"Error: invalid scenario file {path}" in err
    assert "Traceback" not in err
