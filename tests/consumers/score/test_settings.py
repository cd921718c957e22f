"""Scorer settings and what the service derives from them before it connects."""

from __future__ import annotations

import pytest
from aiokafka.structs import TopicPartition
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.errors import ConfigurationError
from rollstream.settings import KafkaSettings

KAFKA = KafkaSettings(bootstrap_servers="127.0.0.1:1", topic_prefix="p")


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ScoreSettings()
    assert (settings.group_id, settings.concurrency, settings.default_evaluator) == (
        "scorer",
        2,
        "session_completed",
    )
    monkeypatch.setenv("ROLLSTREAM_SCORE_GROUP_ID", "judges")
    monkeypatch.setenv("ROLLSTREAM_SCORE_CONCURRENCY", "8")
    settings = ScoreSettings()
    assert (settings.group_id, settings.concurrency) == ("judges", 8)
    # The group names each input partition's transactional id, the same on every replica.
    tp = TopicPartition("p.trajectories", 4)
    assert Scorer(settings, KAFKA).processor.transactional_id(tp) == "judges-p.trajectories-4"


def test_the_poll_interval_covers_a_whole_batch() -> None:
    settings = ScoreSettings(max_batch_records=10, concurrency=3, evaluator_timeout_s=100)
    assert settings.max_poll_interval_ms >= 4 * 100 * 1000  # ceil(10 / 3) rounds of 100 s


def test_topics_are_resolved_under_the_prefix() -> None:
    scorer = Scorer(ScoreSettings(input="trajectories.tree", output="scored.tree"), KAFKA)
    assert (scorer.input, scorer.output) == ("p.trajectories.tree", "p.scored.tree")
    scorer = Scorer(ScoreSettings(input="elsewhere.in"), KAFKA)
    assert (scorer.input, scorer.output) == ("elsewhere.in", "p.scored")


def test_an_unknown_default_evaluator_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="unknown default evaluator 'judge'"):
        Scorer(ScoreSettings(default_evaluator="judge"), KAFKA)


def test_the_command_is_registered_with_its_settings() -> None:
    result = CliRunner().invoke(cli, ["score", "--help"])
    assert result.exit_code == 0
    assert "ROLLSTREAM_SCORE_EVALUATOR_TIMEOUT_S" in result.output
    assert "--default-evaluator" in result.output


def test_the_instance_of_earlier_versions_is_accepted_and_said_to_be_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING"):
        Scorer(ScoreSettings(instance="old-host"), KAFKA)
    assert "--instance (old-host) is ignored" in caplog.text
    result = CliRunner().invoke(cli, ["score", "--instance", "x", "--help"])
    assert result.exit_code == 0, result.output
