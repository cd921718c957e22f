"""``rollstream kafka run``: one broker in the foreground, as a container's main process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from tests.conftest import JAR_CACHE

pytestmark = pytest.mark.integration


def _env(state: Path) -> dict[str, str]:
    return os.environ | {
        "ROLLSTREAM_STATE_DIR": str(state),
        "ROLLSTREAM_CACHE_DIR": str(JAR_CACHE),
        "ROLLSTREAM_KAFKA_PORT": "0",
        "ROLLSTREAM_KAFKA_HEAP": "512m",
        "ROLLSTREAM_LOG_LEVEL": "WARNING",
    }


def _status(state: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "rollstream", "kafka", "status", "--json"],
        env=_env(state),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``rollstream kafka run`` started, once it said the broker is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollstream", "kafka", "run"],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    with proc, proc.stdout:
        line = proc.stdout.readline()
        assert "ready in" in line, line + proc.stdout.read()
        yield proc
        if proc.poll() is None:
            proc.kill()


def test_it_serves_until_sigterm_then_stops_the_broker(
    running: subprocess.Popen[str], tmp_path: Path
) -> None:
    code, status = _status(tmp_path)
    assert (code, status["healthy"]) == (0, True)  # what a Compose healthcheck asks
    running.send_signal(signal.SIGTERM)
    assert running.wait(60) == 0
    assert running.stdout is not None and "stopped" in running.stdout.read()
    assert not _pid_alive(int(status["pid"]))  # type: ignore[call-overload]
    assert _status(tmp_path)[0] == 1


def test_a_broker_that_dies_ends_the_command_with_an_error(
    running: subprocess.Popen[str], tmp_path: Path
) -> None:
    _, status = _status(tmp_path)
    os.kill(int(status["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert running.wait(60) == 1  # the container exits, so its restart policy applies
    assert running.stdout is not None and "the broker exited" in running.stdout.read()


def test_it_runs_one_node_only() -> None:
    result = CliRunner().invoke(cli, ["kafka", "run", "--nodes", "3"])
    assert result.exit_code == 2 and "kafka start --nodes N" in result.output


def test_a_secure_broker_run_makes_the_acls_of_the_topic_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its ACLs name ROLLSTREAM_TOPIC_PREFIX's topics (they named the default's before)."""
    made: list[str] = []

    class Stop(Exception):
        pass

    def broker(*args: object, topic_prefix: str = "rollstream", **kwargs: object) -> None:
        made.append(topic_prefix)
        raise Stop  # no JVM: which prefix the broker is made for is the point

    monkeypatch.setattr("rollstream.cli.kafka.LocalBroker", broker)
    env = {"ROLLSTREAM_TOPIC_PREFIX": "team-b", "ROLLSTREAM_STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(cli, ["kafka", "run", "--secure"], env=env)
    assert isinstance(result.exception, Stop), result.output
    assert made == ["team-b"]


def _pid_alive(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True
