"""The Compose stack up for real: ``docker compose up`` -> a task -> its Scored records -> down.

What runs: docker-compose.yml with host-network.yml (no bridge networks here), local-kafka.yml
(the broker from the rollstream image: apache/kafka cannot be pulled) and secure-kafka.yml (TLS,
SCRAM users and ACLs, each service its own principal: as real clusters run), the cpu
profile (the reference backend and the example trainer), the images built from compose/Dockerfile
on the local Debian base. What does not: the node's own image (target ``node``, the npm
harnesses; the test's file gives the node the ``rollstream`` image and the task uses the python
harness), vLLM (profile gpu), apache/kafka and the bridge network of the default file.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from rollstream.dev.broker import BrokerSettings
from rollstream.dev.broker.jars import ensure_jars
from rollstream.dev.broker.secure import SecureFiles, secure_client
from rollstream.dev.containers import DockerEngine
from rollstream.dev.containers.compose_cli import compose_path
from rollstream.dev.containers.project_image import load_project_image
from rollstream.host import free_port
from rollstream.schemas import AvroRecord, SessionEnded, TopicNames
from rollstream.schemas.trajectories import Scored
from rollstream.settings import KafkaSettings, StatePaths
from tests.compose.live import ComposeProject
from tests.compose.stack import (
    BASE_FILE,
    COMPOSE_DIR,
    HOST_FILE,
    LOCAL_KAFKA_FILE,
    REQUIRED,
    SECURE_KAFKA_FILE,
)
from tests.conftest import JAR_CACHE
from tests.docker_fixtures import IMAGE_CACHE
from tests.http_probe import status_of
from tests.kafka_access import read_in_group, write_one
from tests.kafka_reading import read_records

# Docker Compose and the project image are the set-up's, waited for before the first test.
pytestmark = [pytest.mark.integration, pytest.mark.prebuilt("compose", "project-image")]

#: Services that keep running, each with a healthcheck (the others have none, or exit).
HEALTHY = {"kafka", "backend", "interceptor", "node"}
RUNNING = {"reconstructor", "scorer", "example-trainer"}
#: The user of the rollstream image (compose/Dockerfile's useradd).
IMAGE_UID = 10001
#: Each Kafka client service's principal (secure-kafka.yml).
PRINCIPALS = {
    "topics": "topics",
    "interceptor": "interceptor",
    "reconstructor": "reconstructor",
    "scorer": "scorer",
    "node": "node",
    "example-trainer": "trainer",
}
#: Who waits for whom (docker-compose.yml's depends_on) and for what.
ORDER = [
    ("topics", "kafka", "healthy"),
    ("interceptor", "topics", "completed"),
    ("interceptor", "backend", "healthy"),
    ("node", "interceptor", "healthy"),
    ("scorer", "topics", "completed"),
]


#: The test's own file. The node gets the rollstream image: the node target's npm harnesses are
#: not built here. Debian's engine (20.10) predates healthcheck.start_interval (Engine 25+), so
#: it is dropped, and a 2 s interval stands in for it.
_CHECK = "    healthcheck:\n      start_interval: !reset null\n      interval: 2s\n"
OVERRIDES = "services:\n" + "".join(
    f"  {name}:\n{_CHECK}" + ("    image: rollstream:${IMAGE_TAG}\n" if name == "node" else "")
    for name in sorted(HEALTHY)
)


@pytest.fixture(scope="module")
def stack(
    docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    """The stack up (``up --wait``), taken down with its volumes after the module."""
    binary = compose_path(IMAGE_CACHE)
    tag = load_project_image(docker_engine, StatePaths(cache_dir=IMAGE_CACHE)).tag
    scratch = tmp_path_factory.mktemp("compose")
    version = BrokerSettings().version
    ensure_jars(JAR_CACHE, version)
    own = scratch / "test-overrides.yml"
    own.write_text(OVERRIDES)
    # As compose/README.md says to: the material made on the host, given to the image's user.
    secrets_dir = scratch / "secrets"
    made = subprocess.run(
        [
            *(sys.executable, "-m", "rollstream", "kafka", "secrets", str(secrets_dir)),
            *("--owner", f"{IMAGE_UID}:{IMAGE_UID}"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    ports = {
        name: str(free_port())
        for name in (
            "KAFKA_HOST_PORT",
            "KAFKA_CONTROLLER_HOST_PORT",
            "INFERENCE_HOST_PORT",
            "INTERCEPTOR_HOST_PORT",
            "INTERCEPTOR_ADMIN_HOST_PORT",
            "NODE_HOST_PORT",
        )
    }
    project = ComposeProject(
        binary,
        docker_engine,
        f"rollstream-test-{uuid.uuid4().hex[:8]}",
        [BASE_FILE, HOST_FILE, LOCAL_KAFKA_FILE, SECURE_KAFKA_FILE, own],
        {
            "IMAGE_TAG": tag,
            "KAFKA_SECRETS": str(secrets_dir),
            "BIND_ADDRESS": "127.0.0.1",
            "KAFKA_JARS": str(JAR_CACHE / "kafka"),
            **ports,
            **{name: secrets.token_urlsafe(24) for name in REQUIRED},
        },
    )
    began = time.time()
    try:  # down even when up fails or is cut short: what it started must not outlive the run
        up = project(
            "up", "--detach", "--wait", "--wait-timeout", "240", "--no-build", "--pull", "never"
        )
        assert up.returncode == 0, "\n".join(project.log) + _logs(project)
        project.events = _events(project, began)
        yield project
    finally:
        down = project("down", "--volumes", "--timeout", "30")
        assert down.returncode == 0, down.stderr


def _as(project: ComposeProject, principal: str) -> KafkaSettings:
    """A client of the stack's broker as ``principal``, from the material on the host."""
    files = SecureFiles(Path(project.variables["KAFKA_SECRETS"]))
    bootstrap = f"127.0.0.1:{project.variables['KAFKA_HOST_PORT']}"
    return secure_client(files, principal, bootstrap)


def _logs(project: ComposeProject) -> str:
    return "\n--- logs ---\n" + project("logs", "--no-color", "--tail", "40").stdout


def _containers(project: ComposeProject) -> dict[str, dict[str, object]]:
    """Each service's container, as ``docker inspect`` shows it."""
    listed = project("ps", "--all", "--quiet")
    ids = listed.stdout.split()
    inspected = subprocess.run(
        [project.engine.settings.docker, "inspect", *ids],
        env=project.engine.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        c["Config"]["Labels"]["com.docker.compose.service"]: c for c in json.loads(inspected.stdout)
    }


def _events(project: ComposeProject, since: float) -> list[tuple[float, str, str]]:
    """(time, service, action) of the project's containers from the engine, oldest first."""
    listed = subprocess.run(
        [
            *(project.engine.settings.docker, "events", "--format", "{{json .}}"),
            *("--since", f"{since:.3f}", "--until", f"{time.time():.3f}"),
            *("--filter", "type=container"),
            *("--filter", f"label=com.docker.compose.project={project.name}"),
        ],
        env=project.engine.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    events = []
    for line in listed.stdout.splitlines():
        event = json.loads(line)
        service = event["Actor"]["Attributes"]["com.docker.compose.service"]
        events.append((event["timeNano"] / 1e9, service, event["Action"]))
    return sorted(events)


def test_every_service_is_up_healthy_and_started_after_what_it_depends_on(
    stack: ComposeProject,
) -> None:
    containers = _containers(stack)
    assert set(containers) == HEALTHY | RUNNING | {"topics"}, sorted(containers)
    for name in HEALTHY:
        assert containers[name]["State"]["Health"]["Status"] == "healthy", name  # type: ignore[index]
    for name in HEALTHY | RUNNING:
        assert containers[name]["State"]["Running"], name  # type: ignore[index]
        assert containers[name]["HostConfig"]["NetworkMode"] == "host", name  # type: ignore[index]
    topics = containers["topics"]["State"]
    assert (topics["Running"], topics["ExitCode"]) == (False, 0)  # type: ignore[index]
    # The engine's events: each container's start, first healthy report and exit.
    first: dict[tuple[str, str], float] = {}
    for at, service, action in stack.events:
        first.setdefault((service, action), at)
    assert {s for s, a in first if a == "start"} == HEALTHY | RUNNING | {"topics"}
    for later, earlier, condition in ORDER:
        ready = first[(earlier, "health_status: healthy" if condition == "healthy" else "die")]
        assert ready <= first[(later, "start")], (later, earlier, condition, stack.events)


def test_a_task_submitted_from_the_host_is_scored(stack: ComposeProject) -> None:
    node = f"http://127.0.0.1:{stack.variables['NODE_HOST_PORT']}"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "rollstream", "run"),
            *("--task", str(COMPOSE_DIR / "tasks" / "hello.yaml"), "--node", node),
            *("--timeout", "300"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=os.environ | {"ROLLSTREAM_NODE_API_TOKEN": stack.variables["NODE_API_TOKEN"]},
    )
    assert run.returncode == 0, run.stdout + run.stderr + _logs(stack)
    kafka = _as(stack, "trainer")
    scored = asyncio.run(
        read_records(
            kafka,
            TopicNames(kafka.topic_prefix).scored,
            Scored,
            4,
            where=lambda s: s.trajectory.task is not None and s.trajectory.task.task_id == "hello",
            timeout=180,
            settle_s=2.0,
        )
    )
    # One group of four samples, each scored once by the regex evaluator.
    assert len(scored) == 4
    assert len({s.trajectory.session_id for s in scored}) == 4
    assert len({s.trajectory.group_id for s in scored}) == 1
    assert {s.evaluator for s in scored} == {"regex"}
    assert all(s.reward in (0.0, 1.0) and s.error is None for s in scored)


def test_a_harness_in_the_stack_reaches_the_interceptor_and_nothing_else(
    stack: ComposeProject, tmp_path: Path
) -> None:
    """The node's container walls its harnesses: CAP_SYS_ADMIN makes the namespaces."""
    v = stack.variables
    ports = {
        name: v[variable]
        for name, variable in (
            ("interceptor", "INTERCEPTOR_HOST_PORT"),
            ("broker", "KAFKA_HOST_PORT"),
            ("admin", "INTERCEPTOR_ADMIN_HOST_PORT"),
            ("node", "NODE_HOST_PORT"),
            ("backend", "INFERENCE_HOST_PORT"),
        )
    }
    probe = "".join(
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo {name}=open "
        f"|| echo {name}=closed\n"
        for name, port in ports.items()
    )
    task = tmp_path / "probe.yaml"
    task.write_text(
        json.dumps(
            {
                "task_id": "wall-probe",
                "instruction": "probe",
                "harness": "command",
                "metadata": {"harness.command": f"{{ {probe}}} > probe.txt"},
                "agent_timeout_s": 60,
            }
        )
    )
    run = subprocess.run(
        [
            *(sys.executable, "-m", "rollstream", "run", "--task", str(task)),
            *("--node", f"http://127.0.0.1:{v['NODE_HOST_PORT']}", "--timeout", "120"),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        env=os.environ | {"ROLLSTREAM_NODE_API_TOKEN": v["NODE_API_TOKEN"]},
    )
    assert run.returncode == 0, run.stdout + run.stderr + _logs(stack)
    kafka = _as(stack, "reconstructor")
    [ended] = asyncio.run(
        read_records(
            kafka,
            TopicNames("rollstream").events,
            AvroRecord,
            1,
            where=lambda r: isinstance(r, SessionEnded) and r.task_id == "wall-probe",
            timeout=60,
        )
    )
    assert isinstance(ended, SessionEnded)
    [diff] = [a.content.decode() for a in ended.artifacts if a.name == "workspace.diff"]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+")]
    reached = dict(line.split("=", 1) for line in added if line.split("=")[0] in ports)
    assert reached == {
        "interceptor": "open",
        "broker": "closed",
        "admin": "closed",
        "node": "closed",
        "backend": "closed",
    }, diff


def test_the_control_planes_take_only_their_tokens(stack: ComposeProject) -> None:
    """Each control plane of the stack answers 401 without its token, and serves with it."""
    v = stack.variables
    admin = f"http://127.0.0.1:{v['INTERCEPTOR_ADMIN_HOST_PORT']}"
    node = f"http://127.0.0.1:{v['NODE_HOST_PORT']}"
    backend = f"http://127.0.0.1:{v['INFERENCE_HOST_PORT']}"
    cases = [
        (f"{admin}/sessions/probe", v["INTERCEPTOR_ADMIN_TOKEN"], 200),
        (f"{admin}/metrics", v["INTERCEPTOR_ADMIN_TOKEN"], 200),
        (f"{node}/tasks/probe", v["NODE_API_TOKEN"], 404),  # authorized: no such task
        (f"{backend}/admin/weights", v["BACKEND_ADMIN_TOKEN"], 200),
    ]
    for url, token, served in cases:
        assert status_of(url) == 401, url
        assert status_of(url, "not-" + token) == 401, url
        assert status_of(url, token) == served, url
    for url in (f"{admin}/health", f"{node}/health", f"{backend}/v1/models"):
        assert status_of(url) == 200, url


def test_each_service_holds_its_own_kafka_password_alone(stack: ComposeProject) -> None:
    """What each container mounts and is given: one password, its own; the broker all of them."""
    users = Path(stack.variables["KAFKA_SECRETS"]) / "users"
    for name, container in _containers(stack).items():
        mounts = {m["Destination"]: m["Source"] for m in container["Mounts"]}  # type: ignore[attr-defined]
        env = dict(e.split("=", 1) for e in container["Config"]["Env"])  # type: ignore[index]
        held = {d: src for d, src in mounts.items() if Path(src).parent == users}
        assert "ROLLSTREAM_SASL_PASSWORD" not in env, name
        if name in PRINCIPALS:
            assert held == {"/run/secrets/kafka-password": str(users / PRINCIPALS[name])}, name
            assert env["ROLLSTREAM_SASL_USERNAME"] == PRINCIPALS[name]
        elif name == "kafka":
            assert mounts["/run/secrets/kafka"] == stack.variables["KAFKA_SECRETS"]
        else:
            assert held == {} and "ROLLSTREAM_SASL_USERNAME" not in env, name


async def test_the_stack_broker_refuses_what_a_principal_must_not_do(
    stack: ComposeProject,
) -> None:
    """Plaintext gets nothing; the interceptor cannot read scored, a trainer cannot write events."""
    topics = TopicNames("rollstream")
    plaintext = KafkaSettings(bootstrap_servers=_as(stack, "admin").bootstrap_servers)
    with pytest.raises((KafkaError, OSError)):
        async with asyncio.timeout(30):
            await write_one(plaintext, topics.events)
    with pytest.raises(TopicAuthorizationFailedError):
        await write_one(_as(stack, "trainer"), topics.events)
    with pytest.raises(KafkaError):
        await read_in_group(_as(stack, "interceptor"), topics.scored, "trainer-x")
