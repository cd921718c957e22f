"""Settings: env prefix, validation, client arguments, broker discovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rollstream.cli.docs_config import settings_classes
from rollstream.settings import DEFAULT_BOOTSTRAP, KafkaSettings, StatePaths, discover_bootstrap


def test_env_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_BOOTSTRAP_SERVERS", "kafka-1:9092,kafka-2:9092")
    monkeypatch.setenv("ROLLSTREAM_TOPIC_PREFIX", "lab")
    settings = KafkaSettings()
    assert settings.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert settings.topic_prefix == "lab"


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        KafkaSettings().topic_prefix = "x"  # type: ignore[misc]


def test_sasl_needs_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    with pytest.raises(ValidationError, match="ROLLSTREAM_SASL_USERNAME"):
        KafkaSettings()


def test_sasl_password_is_secret_and_reaches_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ROLLSTREAM_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("ROLLSTREAM_SASL_USERNAME", "trainer")
    monkeypatch.setenv("ROLLSTREAM_SASL_PASSWORD", "hunter2")
    settings = KafkaSettings()
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    kwargs = settings.client_kwargs()
    assert kwargs["sasl_plain_password"] == "hunter2"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["ssl_context"] is not None


def test_sasl_password_file_gives_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Compose secret: the file's content, its one trailing newline dropped, never echoed."""
    secret = tmp_path / "kafka-password"
    secret.write_text("hunter2\n")
    monkeypatch.setenv("ROLLSTREAM_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ROLLSTREAM_SASL_USERNAME", "scorer")
    monkeypatch.setenv("ROLLSTREAM_SASL_PASSWORD_FILE", str(secret))
    settings = KafkaSettings()
    assert settings.sasl_password is not None
    assert settings.sasl_password.get_secret_value() == "hunter2"
    assert settings.client_kwargs()["sasl_plain_password"] == "hunter2"
    assert "hunter2" not in repr(settings)


@pytest.mark.parametrize(
    ("content", "also_password", "error"),
    [
        (None, False, "cannot read it"),
        ("", False, "is empty"),
        ("\n", False, "is empty"),
        ("hunter2", True, "not both"),
    ],
)
def test_a_sasl_password_file_that_gives_no_one_password_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: str | None,
    also_password: bool,
    error: str,
) -> None:
    secret = tmp_path / "kafka-password"
    if content is not None:
        secret.write_text(content)
    monkeypatch.setenv("ROLLSTREAM_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ROLLSTREAM_SASL_USERNAME", "scorer")
    monkeypatch.setenv("ROLLSTREAM_SASL_PASSWORD_FILE", str(secret))
    if also_password:
        monkeypatch.setenv("ROLLSTREAM_SASL_PASSWORD", "other")
    with pytest.raises(ValidationError, match=error) as raised:
        KafkaSettings()
    assert "hunter2" not in str(raised.value)


def test_a_settings_error_never_shows_the_values_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """pydantic quotes a model's input in its errors: with it, a password reached the log."""
    monkeypatch.setenv("ROLLSTREAM_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("ROLLSTREAM_SASL_PASSWORD", "hunter2")
    with pytest.raises(ValidationError, match="ROLLSTREAM_SASL_USERNAME") as raised:
        KafkaSettings()
    assert "hunter2" not in str(raised.value)


def test_every_settings_class_hides_its_input_in_errors() -> None:
    classes = settings_classes()
    assert KafkaSettings in classes
    hiding = {cls.__name__: cls.model_config.get("hide_input_in_errors") for cls in classes}
    assert hiding == dict.fromkeys(hiding, True)


def test_plaintext_has_no_tls_or_sasl() -> None:
    kwargs = KafkaSettings(bootstrap_servers="h:1").client_kwargs()
    assert kwargs == {
        "bootstrap_servers": "h:1",
        "client_id": "rollstream",
        "security_protocol": "PLAINTEXT",
    }


def test_bootstrap_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_STATE_DIR", str(tmp_path))
    assert discover_bootstrap() == DEFAULT_BOOTSTRAP
    state = StatePaths().broker_state_file
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:40001"}))
    assert KafkaSettings().bootstrap_servers == "127.0.0.1:40001"
    monkeypatch.setenv("ROLLSTREAM_BOOTSTRAP_SERVERS", "elsewhere:9092")
    assert KafkaSettings().bootstrap_servers == "elsewhere:9092"  # explicit setting wins
    state.write_text("{broken")
    assert discover_bootstrap() == DEFAULT_BOOTSTRAP


def test_state_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLSTREAM_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert StatePaths().state_dir == tmp_path / "rollstream"
