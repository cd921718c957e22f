"""Least privilege on the secure broker: one principal per service, and only what it does.

``plan(prefix)`` is the whole table, pure, so that tests read it and the docs print it; its
bindings are created in one Admin API request as the ``admin`` super user, once per table (a
marker holds the table's digest).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rollstream.dev.broker.secure import ADMIN, MECHANISM, SecureFiles
from rollstream.errors import BrokerError
from rollstream.schemas.topics import TopicNames

if TYPE_CHECKING:
    from kafka.admin import ACL

# kafka-python is imported where it is used: it takes a sixth of `rollstream`'s start-up, and
# every command imports this module (the broker's settings) but only a secure start needs it.

_MARKER = "acls.applied"
#: "DescribeConfigs" -> "Describe_Configs": the Admin API's enum names are upper snake case.
_SNAKE = re.compile(r"(?<=[a-z])(?=[A-Z])")


@dataclass(frozen=True)
class Rule:
    """``operations`` allowed to ``principal`` on each of ``resources`` (kind, name, pattern)."""

    principal: str
    operations: tuple[str, ...]
    resources: tuple[tuple[str, str, str], ...]


def _topics(*names: str) -> tuple[tuple[str, str, str], ...]:
    return tuple(("topic", name, "literal") for name in names)


def plan(prefix: str) -> list[Rule]:
    """Every principal's ACLs for the topics under ``prefix`` (least privilege per service).

    - interceptor: writes calls to events and its schemas; follows the control topic.
    - node: reads tasks in its group, writes sessions' lifecycle to events, submitted tasks to
      tasks and undecodable tasks to dead letters; follows the control topic.
    - reconstructor and scorer: read their input in their group, write their output, dead
      letters (and the reconstructor its state) in transactions under their own
      transactional-id prefix.
    - trainer: reads scored in a trainer's group, follows and publishes policy versions.
    - topics: creates and describes the topics (``rollstream topics create``).

    Every service reads the schemas topic. No service may create topics (a mistyped topic
    setting must fail, not make one), and group ids are not under the topic prefix, so each
    principal's groups are named by their own prefixes.
    """
    t = TopicNames(prefix)
    read = ("Read", "Describe")
    write = ("Write", "Describe")

    def group(principal: str, *names: str) -> Rule:
        return Rule(principal, ("Read",), tuple(("group", n, "prefixed") for n in names))

    def transactions(principal: str, name: str) -> Rule:
        return Rule(principal, write, (("transactional-id", name, "prefixed"),))

    return [
        Rule("interceptor", write, _topics(t.events, t.schemas)),
        Rule("interceptor", read, _topics(t.control, t.schemas)),
        Rule("node", read, _topics(t.tasks, t.control, t.schemas)),
        Rule("node", write, _topics(t.events, t.tasks, t.deadletters)),
        group("node", "rollstream-node"),
        Rule("reconstructor", read, _topics(t.events, t.schemas, t.state)),
        Rule("reconstructor", write, _topics(t.trajectories, t.deadletters, t.state)),
        group("reconstructor", "rollstream-reconstruct"),
        transactions("reconstructor", "rollstream-reconstruct"),
        Rule("scorer", read, _topics(t.trajectories, t.schemas)),
        Rule("scorer", write, _topics(t.scored, t.deadletters)),
        group("scorer", "scorer"),
        transactions("scorer", "scorer"),
        Rule("trainer", read, _topics(t.scored, t.control, t.schemas)),
        Rule("trainer", write, _topics(t.control)),
        group("trainer", "trainer", "example-trainer", "demo-trainer"),
        Rule("topics", ("Create", "Describe", "DescribeConfigs"), (("topic", prefix, "prefixed"),)),
    ]


def principals(rules: list[Rule]) -> list[str]:
    """The principals ``rules`` name, in order."""
    return list(dict.fromkeys(rule.principal for rule in rules))


def service_principals() -> list[str]:
    """Every service's principal (the same whatever the topic prefix)."""
    return principals(plan("rollstream"))


def bindings(rules: list[Rule]) -> list[ACL]:
    """``rules`` as the Admin API's ACL bindings: one per principal, operation and resource."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    return [
        ACL(
            principal=f"User:{rule.principal}",
            host="*",
            operation=getattr(ACLOperation, _SNAKE.sub("_", operation).upper()),
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(
                getattr(ResourceType, kind.replace("-", "_").upper()),
                name,
                getattr(ACLResourcePatternType, pattern.upper()),
            ),
        )
        for rule in rules
        for operation in rule.operations
        for kind, name, pattern in rule.resources
    ]


def apply(files: SecureFiles, bootstrap: str, rules: list[Rule], timeout_s: float = 30.0) -> bool:
    """Create ``rules`` on the broker as ``admin``, unless this very table was applied already.

    One CreateAcls request through the Admin API (kafka-python's client: aiokafka has no ACL
    API). Returns whether it ran; a refusal or an unreachable broker raises a BrokerError.
    """
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    digest = hashlib.sha256(json.dumps([asdict(r) for r in rules]).encode()).hexdigest()
    marker = marker_path(files)
    if marker.exists() and marker.read_text().strip() == digest:
        return False
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="rollstream-acls",
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_plain_username=ADMIN,
            sasl_plain_password=files.password(ADMIN).get_secret_value(),
            ssl_cafile=str(files.ca_cert),
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except KafkaError as exc:
        raise BrokerError(
            f"creating the ACLs: the broker at {bootstrap} did not answer: {exc}"
        ) from exc
    try:
        result = admin.create_acls(bindings(rules))
    except KafkaError as exc:
        raise BrokerError(f"creating the ACLs failed: {exc}") from exc
    finally:
        admin.close()
    if result["failed"]:
        failed = "; ".join(
            f"{acl.principal} {acl.operation.name}: {err}" for acl, err in result["failed"][:5]
        )
        raise BrokerError(f"creating {len(result['failed'])} ACLs failed: {failed}")
    marker.write_text(digest + "\n")
    return True


def marker_path(files: SecureFiles) -> Path:
    """Where the digest of the applied table is kept."""
    return files.work_dir / _MARKER
