"""The local stack on a secure broker: each service as its own principal, end to end.

``rollstream up`` with ``ROLLSTREAM_KAFKA_SECURE=true`` starts its own broker over SASL_SSL with
the ACL table, creates the topics as ``topics`` and gives each service its own principal and
nothing else; a task then runs through node, interceptor, reconstructor and scorer, and a
trainer's principal reads its scored records.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollstream.dev.stack.processes import StackState, state_path
from rollstream.schemas import Scored, TopicNames
from tests.conftest import JAR_CACHE
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records

# A row of the fault table too (``make chaos``): issue 36's point 2, a pool on password files.
pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def _rollstream(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollstream", *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        check=False,
    )


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def test_a_task_runs_through_a_stack_whose_services_each_have_their_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chaos_report: ChaosReport
) -> None:
    monkeypatch.delenv("ROLLSTREAM_BOOTSTRAP_SERVERS", raising=False)
    env = os.environ | {
        "ROLLSTREAM_KAFKA_SECURE": "true",
        "ROLLSTREAM_KAFKA_PORT": "0",
        "ROLLSTREAM_KAFKA_DATA_DIR": str(tmp_path / "kafka"),
        "ROLLSTREAM_STATE_DIR": str(tmp_path / "state"),
        "ROLLSTREAM_CACHE_DIR": str(JAR_CACHE),
        # a pool: its workers reach the broker as the interceptor, by the same password file
        "ROLLSTREAM_STACK_WORKERS": "2",
    }
    env.pop("ROLLSTREAM_BOOTSTRAP_SERVERS", None)
    ports = ["--backend-port", "0", "--interceptor-port", "0", "--admin-port", "0"]
    up = _rollstream("up", "--detach", *ports, "--node-port", "0", env=env)
    state = StackState.load(state_path(tmp_path / "state"))
    try:
        assert up.returncode == 0, up.stderr
        assert state is not None and state.kafka_secure is not None
        assert "(secure)" in up.stderr
        environments = {c.name: _environment(c.pid) for c in state.components}
        pool = next(c.pid for c in state.components if c.name == "interceptor")
        workers = _children(pool)
        assert len(workers) == 2, workers
        for worker in workers:
            assert "ROLLSTREAM_SASL_PASSWORD" not in _environment(worker)
            assert (
                _environment(worker)["ROLLSTREAM_SASL_PASSWORD_FILE"]
                == (environments["interceptor"]["ROLLSTREAM_SASL_PASSWORD_FILE"])
            )
        held = {name: env.get("ROLLSTREAM_SASL_USERNAME") for name, env in environments.items()}
        # Each password by its file, none by value.
        assert not any("ROLLSTREAM_SASL_PASSWORD" in env for env in environments.values())
        files = {
            name: env.get("ROLLSTREAM_SASL_PASSWORD_FILE") for name, env in environments.items()
        }
        assert files == {
            name: None if user is None else f"{state.kafka_secure}/users/{user}"
            for name, user in held.items()
        }
        assert held == {
            "backend": None,
            "interceptor": "interceptor",
            "reconstructor": "reconstructor",
            "scorer": "scorer",
            "node": "node",
        }
        task = tmp_path / "task.yaml"
        task.write_text(
            yaml.safe_dump(
                {
                    "task_id": "secure-t",
                    "instruction": "Create hello.txt containing polar.",
                    "samples": 2,
                    "harness": "python",
                    "metadata": {"harness.function": "rollstream.dev.demo.agent:run"},
                    "evaluator": {"kind": "command", "config": {"command": "test -f hello.txt"}},
                    "agent_timeout_s": 120,
                }
            )
        )
        run = _rollstream("run", "--task", str(task), env=env)
        assert run.returncode == 0, run.stderr + run.stdout
        assert "sessions 2 completed" in run.stdout
        trainer = state.kafka("trainer")
        records = asyncio.run(
            read_records(trainer, TopicNames(state.topic_prefix).scored, Scored, 2, settle_s=1.0)
        )
        assert sorted(r.trajectory.sample_index for r in records) == [0, 1]
        chaos_report(
            fault="an interceptor pool of 2 workers on a password file, secure broker "
            "(issue 36, point 2)",
            load="1 task of 2 sessions through the local stack, each service its principal",
            lost=2 - len({r.trajectory.sample_index for r in records}),
            duplicated=len(records) - len({r.trajectory.sample_index for r in records}),
            errors="0; no process holds a password in its environment",
        )
        assert all(r.reward is not None for r in records)
        status = _rollstream("status", env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"{state.topic_prefix}.scored" in status.stdout
    finally:
        down = _rollstream("down", env=env)
    assert down.returncode == 0, down.stderr
    assert state is not None and not any(c.alive() for c in state.components)
