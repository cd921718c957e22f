"""The local stack end to end: ``up`` -> ``run`` -> ``status`` -> ``down`` as a user types them."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollstream.dev.stack.processes import StackState, state_path
from rollstream.dev.stack.tokens import tokens_dir
from rollstream.schemas import Scored, TopicNames
from rollstream.settings import KafkaSettings
from tests.http_probe import status_of
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration


def rollstream(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m rollstream ARGS`` with this test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "rollstream", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def test_up_run_status_down(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's broker (up starts one only when none is configured); topics of our own.
    monkeypatch.setenv("ROLLSTREAM_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers)
    monkeypatch.setenv("ROLLSTREAM_TOPIC_PREFIX", kafka_settings.topic_prefix)
    ports = ["--backend-port", "0", "--interceptor-port", "0", "--admin-port", "0"]
    up = rollstream("up", "--detach", *ports, "--node-port", "0")
    state = StackState.load(state_path(tmp_path / "state"))
    try:
        assert up.returncode == 0, up.stderr
        assert state is not None
        assert [c.name for c in state.components] == [
            "backend",
            "interceptor",
            "reconstructor",
            "scorer",
            "node",
        ]
        again = rollstream("up", "--detach", *ports, "--node-port", "0")
        assert again.returncode == 1 and "already up" in again.stderr

        task = tmp_path / "task.yaml"
        task.write_text(
            yaml.safe_dump(
                {
                    "task_id": "stack-t",
                    "group_id": "stack-g",
                    "instruction": "Create hello.txt containing polar.",
                    "samples": 2,
                    "harness": "python",
                    "metadata": {"harness.function": "rollstream.dev.demo.agent:run"},
                    "evaluator": {"kind": "command", "config": {"command": "test -f hello.txt"}},
                    "agent_timeout_s": 120,
                }
            )
        )
        run = rollstream("run", "--task", str(task))  # finds the stack's node by itself
        assert run.returncode == 0, run.stderr + run.stdout
        assert "sessions 2 completed" in run.stdout

        records = asyncio.run(
            read_records(kafka_settings, TopicNames(kafka_settings.topic_prefix).scored, Scored, 2)
        )
        assert sorted(r.trajectory.sample_index for r in records) == [0, 1]
        assert all(r.evaluator == "command" and r.reward is not None for r in records)

        _control_planes_need_their_tokens(state, tmp_path / "state")

        status = rollstream("status")
        assert status.returncode == 0, status.stdout + status.stderr
        for name in ("backend", "interceptor", "reconstructor", "scorer", "node"):
            assert f"{name}" in status.stdout
        assert status.stdout.count("healthy") == 5
        assert "rollstream-reconstruct-prefix_merge" in status.stdout  # its lag is listed
        assert f"{kafka_settings.topic_prefix}.scored" in status.stdout
    finally:
        down = rollstream("down")
    assert down.returncode == 0, down.stderr
    assert down.stderr.count("stopped") == 5, down.stderr
    assert state is not None and not any(c.alive() for c in state.components)
    assert rollstream("status").returncode == 1  # nothing is up


def _control_planes_need_their_tokens(state: StackState, state_dir: Path) -> None:
    """``up`` made a token per control plane (mode 0600); each plane takes its own alone."""
    folder = tokens_dir(state_dir)
    tokens = {p.name: p.read_text().strip() for p in folder.iterdir()}
    assert set(tokens) == {"interceptor-admin", "node-api", "backend-admin"}
    assert all(stat.S_IMODE((folder / name).stat().st_mode) == 0o600 for name in tokens)
    assert len(set(tokens.values())) == 3
    admin, node, backend = state.admin_url(), state.url("node"), state.url("backend")
    cases = [
        (f"{admin}/sessions/probe", "interceptor-admin", 200),
        (f"{node}/tasks/probe", "node-api", 404),  # let in: no such task
        (f"{backend}/admin/weights", "backend-admin", 200),
    ]
    for url, name, served in cases:
        assert status_of(url) == 401, url
        others = [t for n, t in tokens.items() if n != name]
        assert [status_of(url, t) for t in others] == [401, 401], url
        assert status_of(url, tokens[name]) == served, url
    logs = "".join(Path(c.log).read_text() for c in state.components)
    assert "refused GET /sessions/probe" in logs
    assert not any(token in logs for token in tokens.values())
