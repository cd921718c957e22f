"""Settings shared by every rollstream service: where state lives and how to reach Kafka.

Each service has one frozen pydantic-settings class with the ``ROLLSTREAM_`` prefix; the classes
here are the pieces several services share, so each setting has exactly one source of truth.
"""

from __future__ import annotations

import json
import os
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def env_name(cls: type[BaseSettings], field: str) -> str:
    """The environment variable that sets ``field`` of ``cls``."""
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def _bearer_token(token: SecretStr | None) -> SecretStr | None:
    # An empty token is not "no token": set from an unset shell variable it would otherwise
    # guard the port with a secret every caller knows (``Authorization: Bearer``).
    if token is not None and not token.get_secret_value().strip():
        raise ValueError(
            "an empty bearer token would let any caller in: set a token, or unset the variable"
        )
    return token


#: A bearer token a service requires (or, for a client, sends); None: the port is open.
BearerToken = Annotated[SecretStr | None, AfterValidator(_bearer_token)]


def _xdg(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


class StatePaths(BaseSettings):
    """Where rollstream keeps its state (broker data, logs) and its download cache."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    state_dir: Path = Field(
        default_factory=lambda: _xdg("XDG_STATE_HOME", ".local/state") / "rollstream",
        description="State directory: broker data and logs, pid files.",
    )
    cache_dir: Path = Field(
        default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "rollstream",
        description="Download cache: Kafka jars, npm harnesses.",
    )

    @property
    def broker_state_file(self) -> Path:
        """The file in which ``rollstream kafka start`` records the running broker."""
        return self.state_dir / "kafka" / "broker.json"


def discover_bootstrap() -> str:
    """Bootstrap address of the local broker started by ``rollstream kafka start``, if any.

    Lets every command find the local broker without the user exporting its (possibly
    re-picked) port; an explicit ``ROLLSTREAM_BOOTSTRAP_SERVERS`` always wins.
    """
    try:
        state = json.loads(StatePaths().broker_state_file.read_text())
        return str(state["bootstrap_servers"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_BOOTSTRAP


SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSettings(BaseSettings):
    """How every rollstream client reaches Kafka, and the names of its topics."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    bootstrap_servers: str = Field(
        default_factory=discover_bootstrap,
        description="Kafka bootstrap servers, host:port[,host:port]. Default: the broker of "
        "`rollstream kafka start`, else 127.0.0.1:9092.",
    )
    topic_prefix: str = Field(
        default="rollstream", description="Prefix of every rollstream topic name."
    )
    client_id: str = Field(default="rollstream", description="Kafka client id.")
    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."
    )
    sasl_mechanism: SaslMechanism = Field(
        default="PLAIN", description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(
        default=None,
        description="SASL password.",
        # A child process is given the file, not what was read from it (pool_worker.settings_env).
        json_schema_extra={"read_from": "sasl_password_file"},
    )
    sasl_password_file: Path | None = Field(
        default=None,
        description="A file holding the SASL password, instead of SASL_PASSWORD (a Docker or "
        "Compose secret: /run/secrets/...). Read at start; one trailing newline is dropped.",
    )
    ssl_cafile: Path | None = Field(default=None, description="CA bundle to verify the broker.")
    ssl_certfile: Path | None = Field(default=None, description="Client certificate (mTLS).")
    ssl_keyfile: Path | None = Field(default=None, description="Client private key (mTLS).")

    @model_validator(mode="before")
    @classmethod
    def _password_from_file(cls, data: Any) -> Any:
        # Before validation, so that the password is a field like any other once read: one
        # value, whichever of the two variables gave it.
        if not isinstance(data, dict) or not data.get("sasl_password_file"):
            return data
        if data.get("sasl_password"):
            raise ValueError(
                "set ROLLSTREAM_SASL_PASSWORD or ROLLSTREAM_SASL_PASSWORD_FILE, not both"
            )
        path = Path(data["sasl_password_file"])
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"ROLLSTREAM_SASL_PASSWORD_FILE={path}: cannot read it ({exc.__class__.__name__}: "
                f"{exc.strerror if isinstance(exc, OSError) else exc.reason})"
            ) from None
        password = text[:-1] if text.endswith("\n") else text
        if not password:
            raise ValueError(f"ROLLSTREAM_SASL_PASSWORD_FILE={path} is empty")
        return {**data, "sasl_password": password}

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"security_protocol={self.security_protocol} needs "
                "ROLLSTREAM_SASL_USERNAME and ROLLSTREAM_SASL_PASSWORD"
            )
        return self

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments common to every aiokafka client built from these settings."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None
            )
            if self.ssl_certfile:
                context.load_cert_chain(
                    str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None
                )
            kwargs["ssl_context"] = context
        if self.security_protocol.startswith("SASL"):
            assert self.sasl_password is not None  # checked by the validator
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return kwargs
