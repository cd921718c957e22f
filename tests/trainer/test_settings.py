"""Trainer settings come from ROLLSTREAM_TRAINER_* and refuse values that cannot work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollstream.trainer import TrainerSettings


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
