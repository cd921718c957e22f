"""The console's settings: tokens that would open it to anyone are refused."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from rollstream.consumers.console import ConsoleSettings


def test_an_empty_token_is_refused() -> None:
    blank = SecretStr("  ")
    with pytest.raises(ValidationError, match="empty token"):
        ConsoleSettings(token=blank)
    with pytest.raises(ValidationError, match="empty token"):
        ConsoleSettings(control_token=blank)
    with pytest.raises(ValidationError, match="empty token"):
        ConsoleSettings(admin_token=blank)


def test_the_control_token_must_not_be_the_read_token() -> None:
    with pytest.raises(ValidationError, match="every reader could act"):
        ConsoleSettings(token=SecretStr("same-1234"), control_token=SecretStr("same-1234"))
    ConsoleSettings(token=SecretStr("read-1234"), control_token=SecretStr("act-1234"))


def test_interceptors_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_CONSOLE_INTERCEPTORS", "http://a:1, http://b:2,")
    assert ConsoleSettings().interceptors == ("http://a:1", "http://b:2")
