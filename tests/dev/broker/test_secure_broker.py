"""``rollstream kafka start --secure``: TLS, SCRAM users and least-privilege ACLs, for real.

One secure broker for the module (its own data directory and port). Clients connect as the
principals of the ACL table; each is served what its service does and refused what it must not
do (the interceptor reading scored, a trainer writing events); a PLAINTEXT client, a client that
does not trust the CA, and a wrong password get nothing.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from pydantic import SecretStr

from rollstream.dev.broker import BrokerSettings, LocalBroker
from rollstream.dev.broker.acls import plan, principals
from rollstream.dev.broker.secure import SecureFiles, make_material, secure_client
from rollstream.errors import BrokerError
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_producer
from rollstream.schemas import Topic, TopicNames, topic_specs
from rollstream.settings import KafkaSettings, StatePaths
from tests import run_tables
from tests.conftest import JAR_CACHE
from tests.fault_table import TABLE as FAULTS
from tests.kafka_access import read_in_group, write_one

#: aiokafka leaves a refused TLS connection's transport to the garbage collector (the tests
#: refuse on purpose, and so does the broker's start-up probe before SCRAM users are loaded):
#: its ResourceWarning is ignored in this module, and each refusing test collects it at once.
pytestmark = [
    pytest.mark.integration,
    # One worker runs the module: its broker (and its ACLs, ~30 s) is started once, not per worker.
    pytest.mark.xdist_group("secure-kafka"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PREFIX = f"sec{uuid.uuid4().hex[:6]}"
TOPICS = TopicNames(PREFIX)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A secure broker whose ACLs name this module's topic prefix, its topics made."""
    root = tmp_path_factory.mktemp("secure-kafka")
    # Made apart, as `rollstream kafka secrets` makes it for Compose: the broker only reads it.
    material = SecureFiles(root / "material")
    make_material(material, principals(plan(PREFIX)))
    before = _snapshot(material.root)
    broker = LocalBroker(
        BrokerSettings(secure=True, port=0, data_dir=root / "kafka", secure_dir=material.root),
        StatePaths(state_dir=root, cache_dir=JAR_CACHE),
        record_state=False,
        outlive_parent=False,
        topic_prefix=PREFIX,
    )
    info = broker.start()
    assert broker.secure is not None
    topics = secure_client(broker.secure, "topics", info.bootstrap_servers)

    async def create() -> None:
        async with TopicAdmin(topics) as admin:
            await admin.create(topic_specs(TOPICS))

    asyncio.run(create())
    assert _snapshot(material.root) == before, "the broker wrote into its material"
    yield broker
    broker.stop()


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _as(broker: LocalBroker, principal: str) -> KafkaSettings:
    assert broker.secure is not None and broker.info is not None
    return secure_client(broker.secure, principal, broker.info.bootstrap_servers)


def test_each_principal_has_a_password_file_only_its_owner_reads(
    secure_broker: LocalBroker,
) -> None:
    files = secure_broker.secure
    assert isinstance(files, SecureFiles)
    for principal in ["admin", *principals(plan(PREFIX))]:
        assert files.password_file(principal).stat().st_mode & 0o077 == 0
    assert files.broker_pem.stat().st_mode & 0o077 == 0
    properties = secure_broker.data_dir / "server.properties"
    assert "SASL_SSL://" in properties.read_text()
    assert properties.stat().st_mode & 0o077 == 0  # it holds the admin's password
    # The users' passwords, gone once used; the broker's own files in its data directory.
    assert not (secure_broker.data_dir / "format.args").exists()
    assert files.work_dir == secure_broker.data_dir


def test_a_secure_data_directory_is_not_started_plaintext(secure_broker: LocalBroker) -> None:
    plain = LocalBroker(
        BrokerSettings(secure=False, port=0, data_dir=secure_broker.data_dir),
        secure_broker.paths,
        record_state=False,
        outlive_parent=False,
    )
    with pytest.raises(
        BrokerError, match="formatted secure: start it with ROLLSTREAM_KAFKA_SECURE"
    ):
        plain.start()


async def test_the_interceptor_writes_events_and_nothing_else(
    secure_broker: LocalBroker,
) -> None:
    interceptor = _as(secure_broker, "interceptor")
    await write_one(interceptor, TOPICS.events)
    with pytest.raises(TopicAuthorizationFailedError):
        await write_one(interceptor, TOPICS.scored)
    with pytest.raises(KafkaError):
        await read_in_group(interceptor, TOPICS.scored, "trainer-x")
    gc.collect()


async def test_a_trainer_reads_scored_and_cannot_write_events(
    secure_broker: LocalBroker,
) -> None:
    trainer = _as(secure_broker, "trainer")
    await read_in_group(trainer, TOPICS.scored, "trainer-1")
    with pytest.raises(TopicAuthorizationFailedError):
        await write_one(trainer, TOPICS.events)
    gc.collect()


def test_the_acl_table_gives_each_service_only_its_own_topics() -> None:
    rules = plan("p")
    writes = {
        (r.principal, name)
        for r in rules
        if "Write" in r.operations
        for kind, name, _ in r.resources
        if kind == "topic"
    }
    assert {t for p, t in writes if p == "interceptor"} == {"p.events", "p.schemas"}
    assert ("trainer", "p.events") not in writes and ("trainer", "p.scored") not in writes
    assert {p for p, t in writes if t == "p.scored"} == {"scorer"}
    assert {p for p, t in writes if t == "p.trajectories"} == {"reconstructor"}


def test_the_docs_table_names_every_principal_and_what_it_writes() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line.split("|")[3]
        for line in text.splitlines()
        if line.startswith("| `") and line.count("|") == 6
    }
    rules = plan("rollstream")
    assert set(rows) == set(principals(rules))
    for rule in rules:
        if "Write" in rule.operations:
            for kind, name, _ in rule.resources:
                if kind == "topic":
                    assert name.removeprefix("rollstream.") in rows[rule.principal], rule


async def test_every_principal_writes_exactly_the_topics_its_acls_name(
    secure_broker: LocalBroker, request: pytest.FixtureRequest
) -> None:
    """Each service's principal writing each topic: served where the table says, refused elsewhere.

    Its row goes in the fault table with the bad clients of the test above.
    """
    rules = plan(PREFIX)
    allowed = {
        (rule.principal, name)
        for rule in rules
        if "Write" in rule.operations
        for kind, name, _ in rule.resources
        if kind == "topic"
    }
    served, refused, wrong = 0, 0, []
    for principal in principals(rules):
        for topic in Topic:
            name = TOPICS[topic]
            try:
                await write_one(_as(secure_broker, principal), name)
            # A principal that writes nowhere is refused even a producer id (cluster-level).
            except (TopicAuthorizationFailedError, ClusterAuthorizationFailedError):
                refused += 1
                if (principal, name) in allowed:
                    wrong.append(f"{principal} refused {topic.value}")
            else:
                served += 1
                if (principal, name) not in allowed:
                    wrong.append(f"{principal} wrote {topic.value}")
    # Clients without the right credentials get nothing, not even a connection.
    info = secure_broker.info
    assert info is not None
    good = _as(secure_broker, "interceptor")
    bad = [
        good.model_copy(update={"sasl_password": SecretStr("x" * 20)}),  # wrong password
        KafkaSettings(bootstrap_servers=info.bootstrap_servers),  # plaintext
        good.model_copy(update={"ssl_cafile": None}),  # does not trust the broker's CA
    ]
    for kafka in bad:
        with pytest.raises((KafkaError, ssl.SSLError, OSError)):
            async with asyncio.timeout(30):
                await write_one(kafka, TOPICS.events)
        refused += 1
    gc.collect()
    assert wrong == []
    assert served == len(allowed) and refused > len(bad)
    run_tables.add_row(
        request.node,
        FAULTS,
        (
            "Kafka principals writing every topic, and clients without the right credentials "
            "(secure broker, `tests/dev/broker/test_secure_broker.py`)",
            f"{served + refused} writes: each principal to each topic ({served} the ACLs allow), "
            "a plaintext client, a wrong password, a client not trusting the CA",
            0,
            0,
            f"{refused} refused as the table says (expected); 0 written outside it",
        ),
    )


async def test_a_service_cannot_take_another_services_transactional_ids(
    secure_broker: LocalBroker,
) -> None:
    # The scorer posing as the reconstructor's producer of a partition (fencing it off).
    producer = make_producer(
        _as(secure_broker, "scorer"),
        transactional_id=f"rollstream-reconstruct-x-{TOPICS.events}-0",
        request_timeout_ms=10_000,
    )
    try:
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await producer.start()
    finally:
        await producer.stop()
    own = make_producer(
        _as(secure_broker, "scorer"), transactional_id=f"scorer-{TOPICS.trajectories}-0"
    )
    await own.start()  # its own prefix is served
    await own.stop()
    gc.collect()
