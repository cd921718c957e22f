"""secure-kafka.yml, read statically: each service its own principal and its own password alone.

test_live.py runs the stack with it for real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.broker import BrokerSettings
from rollstream.dev.broker.acls import plan, principals
from rollstream.settings import KafkaSettings
from tests.compose.stack import (
    COMMAND_SETTINGS,
    LOCAL_KAFKA_FILE,
    SECURE_KAFKA_FILE,
    Stack,
    build_settings,
    host_doc,
)
from tests.compose.test_compose import validator

PASSWORD_FILE = "/run/secrets/kafka-password"


def _stack(variables: dict[str, str] | None = None) -> Stack:
    return Stack(host_doc(LOCAL_KAFKA_FILE, SECURE_KAFKA_FILE), variables)


def _kafka_clients(stack: Stack) -> list[str]:
    """The rollstream services whose command reads Kafka's settings."""
    return [
        name
        for name in stack.rollstream_services()
        if KafkaSettings in COMMAND_SETTINGS[stack.cli_path(name)]
    ]


def test_the_merged_files_match_the_compose_specification() -> None:
    doc = host_doc(LOCAL_KAFKA_FILE, SECURE_KAFKA_FILE)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(doc)]
    assert errors == []


def test_each_kafka_client_is_its_own_principal_with_its_own_password_alone() -> None:
    stack = _stack()
    declared: dict[str, Any] = stack.doc["secrets"]
    users = {}
    for name in _kafka_clients(stack):
        env = stack.environment(name)
        user = env["ROLLSTREAM_SASL_USERNAME"]
        users[name] = user
        assert env["ROLLSTREAM_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["ROLLSTREAM_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        assert env["ROLLSTREAM_SASL_PASSWORD_FILE"] == PASSWORD_FILE, name
        assert "ROLLSTREAM_SASL_PASSWORD" not in env, name
        mounted = stack.services[name]["secrets"]
        assert mounted == ["kafka-ca", {"source": f"kafka-{user}", "target": "kafka-password"}]
        assert declared[f"kafka-{user}"]["file"] == f"./secrets/users/{user}"
    # One principal per service, every principal of the ACL table but the super user used.
    assert len(set(users.values())) == len(users)
    assert set(users.values()) == set(principals(plan("rollstream")))
    assert users["example-trainer"] == "trainer"
    assert declared["kafka-ca"]["file"] == "./secrets/ca.pem"
    assert not any("admin" in secret for secret in declared)
    assert "secrets" not in stack.services["backend"]


def test_the_services_build_their_client_settings_from_the_secret(tmp_path: Path) -> None:
    """Each process as it starts: its password from the file, never from a variable."""
    stack = _stack()
    for name in _kafka_clients(stack):
        secret = tmp_path / name
        secret.write_text(f"password-of-{name}\n")
        env = stack.environment(name) | {"ROLLSTREAM_SASL_PASSWORD_FILE": str(secret)}
        kafka = build_settings(KafkaSettings, env)
        assert kafka.security_protocol == "SASL_SSL"
        assert kafka.sasl_username == env["ROLLSTREAM_SASL_USERNAME"]
        assert kafka.sasl_password is not None
        assert kafka.sasl_password.get_secret_value() == f"password-of-{name}"
        assert kafka.bootstrap_servers == "127.0.0.1:19092"


@pytest.mark.parametrize("secrets", [None, "/srv/rollstream/kafka"])
def test_the_broker_reads_the_same_directory_read_only(secrets: str | None) -> None:
    stack = _stack({"KAFKA_SECRETS": secrets} if secrets else {})
    source = secrets or "./secrets"
    broker = stack.settings("kafka", BrokerSettings)
    assert broker.secure
    assert broker.secure_dir == Path("/run/secrets/kafka")
    assert f"{source}:/run/secrets/kafka:ro" in stack.services["kafka"]["volumes"]
    assert stack.doc["secrets"]["kafka-scorer"]["file"] == f"{source}/users/scorer"
