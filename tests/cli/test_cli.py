"""The ``rollstream`` command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.dev.broker import BrokerInfo
from tests.conftest import JAR_CACHE


def test_help_names_the_environment_variables() -> None:
    runner = CliRunner()
    for args, names in [
        (["kafka", "start", "--help"], ["ROLLSTREAM_KAFKA_PORT", "ROLLSTREAM_STATE_DIR"]),
        (
            ["topics", "create", "--help"],
            ["ROLLSTREAM_BOOTSTRAP_SERVERS", "ROLLSTREAM_TOPICS_PARTITIONS"],
        ),
        (["tail", "--help"], ["ROLLSTREAM_SASL_PASSWORD", "ROLLSTREAM_TOPIC_PREFIX"]),
    ]:
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
        flat = " ".join(result.output.split())
        for name in names:
            assert f"[env: {name}]" in flat


def test_invalid_setting_is_a_usage_error_naming_option_and_variable() -> None:
    result = CliRunner().invoke(cli, ["topics", "create", "--partitions", "0"])
    assert result.exit_code == 2
    assert "--partitions / ROLLSTREAM_TOPICS_PARTITIONS" in result.output


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["kafka", "start", "--java", "no-such-java", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: 'no-such-java' not found on PATH: install a Java 17+ runtime "
        "(e.g. `apt-get install openjdk-17-jre-headless`)"
    ]


def test_status_without_a_broker_exits_1() -> None:
    result = CliRunner().invoke(cli, ["kafka", "status"])
    assert result.exit_code == 1
    assert "not running" in result.output


def test_unreachable_broker_is_an_error_not_a_hang() -> None:
    result = CliRunner().invoke(
        cli, ["topics", "list", "--bootstrap-servers", "127.0.0.1:1"], catch_exceptions=True
    )
    assert result.exit_code != 0


def _rollstream(state: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "ROLLSTREAM_STATE_DIR": str(state),
        "ROLLSTREAM_CACHE_DIR": str(JAR_CACHE),
        "ROLLSTREAM_KAFKA_PORT": "0",
        "ROLLSTREAM_KAFKA_HEAP": "512m",
        "ROLLSTREAM_LOG_LEVEL": "WARNING",
    }
    return subprocess.run(
        [sys.executable, "-m", "rollstream", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.integration
def test_readme_flow_by_hand(tmp_path: Path, kafka_broker: BrokerInfo) -> None:
    """kafka start -> topics create -> smoke -> tail -> status -> stop, as the README shows."""
    state = tmp_path / "state"
    started = _rollstream(state, "kafka", "start")
    assert started.returncode == 0, started.stderr
    assert "export ROLLSTREAM_BOOTSTRAP_SERVERS=127.0.0.1:" in started.stdout
    try:
        status = _rollstream(state, "kafka", "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        info = json.loads(status.stdout)
        assert info["healthy"] is True
        assert info["bootstrap_servers"] != kafka_broker.bootstrap_servers  # its own broker

        created = _rollstream(state, "topics", "create")
        assert created.returncode == 0, created.stderr
        assert created.stdout.count("created") == 8
        again = _rollstream(state, "topics", "create")
        assert again.stdout.count("exists") == 8

        smoke = _rollstream(state, "smoke", "--turns", "4")
        assert smoke.returncode == 0, smoke.stderr
        assert "smoke ok" in smoke.stdout and "6 records (4 calls)" in smoke.stdout

        tailed = _rollstream(state, "tail", "events", "--format", "json")
        assert tailed.returncode == 0, tailed.stderr
        types = [json.loads(line)["type"] for line in tailed.stdout.splitlines()]
        assert types == ["SessionStarted"] + ["CallRecord"] * 4 + ["SessionEnded"]
        assert "-- 6 records, 0 undecodable" in tailed.stderr

        described = _rollstream(state, "topics", "describe", "events")
        assert "rollstream.events: 6 partitions" in described.stdout
    finally:
        stopped = _rollstream(state, "kafka", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert _rollstream(state, "kafka", "status").returncode == 1
