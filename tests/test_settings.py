"""Settings: env prefix, validation, client arguments, broker discovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

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
