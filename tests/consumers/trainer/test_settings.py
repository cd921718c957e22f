"""Trainer settings come from ROLLSTREAM_TRAINER_* and refuse values that cannot work."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from rollstream.consumers.trainer import TrainerSettings
from rollstream.schemas import SessionStatus, TrajectoryStatus


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_TRAINER_MAX_STALENESS", "3")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_GROUP_TIMEOUT_S", "30")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_INCOMPLETE", "yield")
    settings = TrainerSettings()
    assert (settings.max_staleness, settings.group_timeout_s, settings.incomplete) == (
        3,
        30,
        "yield",
    )
    assert (settings.topic, settings.mode, settings.group_size) == ("scored", "groups", None)
    assert settings.taskless == "skip"  # a trajectory without its task never stops a trainer


@pytest.mark.parametrize(
    "field, value",
    [
        ("mode", "rows"),
        ("incomplete", "keep"),
        ("group_size", 0),
        ("max_staleness", -1),
        ("taskless", "error"),
    ],
)
def test_bad_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        TrainerSettings(**{field: value})  # type: ignore[arg-type]


def test_consumer_and_filter_settings_keep_todays_behaviour_by_default() -> None:
    settings = TrainerSettings()
    assert (settings.start, settings.max_poll_interval_ms) == ("earliest", 300_000)
    assert (settings.statuses, settings.session_statuses) == (None, None)
    assert not settings.drop_uniform_rewards and not settings.filters
    assert (settings.min_trainable_tokens, settings.min_group_trainable_tokens) == (0, 0)


def test_consumer_and_filter_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROLLSTREAM_TRAINER_START", "2026-03-01T12:00:00+01:00")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_MAX_POLL_INTERVAL_MS", "900000")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_STATUSES", "complete, incomplete")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_SESSION_STATUSES", "completed")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_DROP_UNIFORM_REWARDS", "true")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_MIN_TRAINABLE_TOKENS", "8")
    settings = TrainerSettings()
    assert settings.start == datetime(2026, 3, 1, 11, tzinfo=UTC)
    assert settings.max_poll_interval_ms == 900_000
    assert settings.statuses == frozenset({TrajectoryStatus.COMPLETE, TrajectoryStatus.INCOMPLETE})
    assert settings.session_statuses == frozenset({SessionStatus.COMPLETED})
    assert settings.drop_uniform_rewards and settings.min_trainable_tokens == 8
    assert settings.filters
    monkeypatch.setenv("ROLLSTREAM_TRAINER_START", "latest")
    monkeypatch.setenv("ROLLSTREAM_TRAINER_STATUSES", "")  # set but empty: every status
    assert (TrainerSettings().start, TrainerSettings().statuses) == ("latest", None)


@pytest.mark.parametrize(
    "field, value",
    [
        ("start", "newest"),
        ("start", "2026-03-01T12:00:00"),  # a time without its zone is ambiguous
        ("statuses", "complete,finished"),
        ("statuses", []),  # keeping no status would train on nothing
        ("session_statuses", "done"),
        ("min_trainable_tokens", -1),
        ("max_poll_interval_ms", 0),
    ],
)
def test_bad_consumer_and_filter_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        TrainerSettings(**{field: value})  # type: ignore[arg-type]
