"""The docker runtime against the run's private Docker daemon: sessions in real containers.

The busybox image (a shell in 2 MB) stands in for a task's image; the harness-level tests use
the Debian base. ``tests/producers/node/test_docker_runtime.py`` covers the same runtime against a
fake client, where the engine's failures can be staged one by one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.containers import DockerEngine, ImageResult, busybox_image
from rollstream.sandbox.docker import LABEL, DockerRuntime
from rollstream.sandbox.docker_engine import ContainerError
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.netns import Endpoint, Wall
from tests.network_probe import REPO_ROOT
from tests.waiting import until

pytestmark = pytest.mark.integration

RuntimeFactory = Callable[..., DockerRuntime]


@pytest.fixture
def client(docker_engine: DockerEngine) -> Any:
    """A docker SDK client of the run's daemon."""
    docker = pytest.importorskip("docker")
    made = docker.DockerClient(base_url=docker_engine.docker_host)
    yield made
    made.close()


@pytest.fixture
async def runtime_factory(
    client: Any, docker_busybox: ImageResult, tmp_path: Path
) -> AsyncIterator[RuntimeFactory]:
    """``runtime_factory(prewarm=1, image=...)``: runtimes on the daemon, closed after the test."""
    made: list[DockerRuntime] = []

    def create(*, prewarm: int = 0, image: str | None = None, walls: bool = False) -> DockerRuntime:
        runtime = DockerRuntime(
            image or docker_busybox.tag,
            tmp_path / "sessions",
            prewarm=prewarm,
            client=client,
            walls=walls,
        )
        made.append(runtime)
        return runtime

    yield create
    for runtime in made:
        await runtime.close()


def _status(client: Any, container_id: str) -> str:
    docker = pytest.importorskip("docker")
    try:
        return str(client.containers.get(container_id).status)
    except docker.errors.NotFound:
        return "removed"


def _ours(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": LABEL}))


async def test_a_prewarmed_container_runs_the_session_and_the_timeout_kills_it(
    runtime_factory: RuntimeFactory, client: Any
) -> None:
    runtime = runtime_factory(prewarm=1)
    first = await runtime.start("s-0")  # made on demand; the pool fills behind it
    await until(lambda: runtime.idle == 1, 60, "a container pre-warmed")
    made_for_first = runtime._containers[first.root].id
    [warm] = [c for c in _ours(client) if c.id != made_for_first]
    assert warm.status == "running"  # started before its session, not merely created

    sandbox = await runtime.start("s-1")
    container = runtime._containers[sandbox.root]
    assert container.id == warm.id  # the session took the pre-warmed one
    launch = HarnessLaunch(["sh", "-c", 'pwd; echo "$HOME"; echo hi > f.txt; exit 4'], {})
    result = await runtime.execute(sandbox, launch, 60, sandbox.logs / "harness")
    assert result.exit_code == 4 and not result.timed_out
    assert result.stdout_tail.split() == [str(sandbox.work), str(sandbox.home)]
    assert (sandbox.work / "f.txt").read_text() == "hi\n"  # the workspace is the host's

    hang = HarnessLaunch(["sh", "-c", "sleep 300 & wait"], {})
    result = await runtime.execute(sandbox, hang, 1, sandbox.logs / "hang")
    assert result.timed_out and result.exit_code is None
    assert _status(client, container.id) == "exited"  # the timeout killed the container

    await runtime.stop(sandbox)
    assert _status(client, container.id) == "removed" and not sandbox.root.exists()
    await until(lambda: runtime.idle == 1, 60, "the pool refilled")
    await runtime.stop(first)


async def test_a_cancelled_session_kills_its_container(
    runtime_factory: RuntimeFactory, client: Any
) -> None:
    runtime = runtime_factory()
    sandbox = await runtime.start("s-2")
    container = runtime._containers[sandbox.root]
    launch = HarnessLaunch(["sh", "-c", "echo started; sleep 300"], {})
    run = asyncio.create_task(runtime.execute(sandbox, launch, 600, sandbox.logs / "harness"))
    await until(
        lambda: (
            (sandbox.logs / "harness" / "stdout").exists()
            and b"started" in (sandbox.logs / "harness" / "stdout").read_bytes()
        ),
        60,
        "the harness started",
    )
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert _status(client, container.id) == "exited"
    await runtime.stop(sandbox)
    assert _status(client, container.id) == "removed"


async def test_a_missing_image_is_a_clear_error_and_leaves_nothing(
    runtime_factory: RuntimeFactory, client: Any, tmp_path: Path
) -> None:
    runtime = runtime_factory(image="rollstream-nosuch:1")
    with pytest.raises(ContainerError, match="'rollstream-nosuch:1' is not in the Docker engine"):
        await runtime.start("s-3")
    assert _ours(client) == []
    sessions = tmp_path / "sessions"
    assert not sessions.exists() or list(sessions.iterdir()) == []  # no sandbox made or left


async def test_an_image_without_the_harness_says_so_in_the_exit_code_and_output(
    runtime_factory: RuntimeFactory,
) -> None:
    runtime = runtime_factory()
    sandbox = await runtime.start("s-4")
    launch = HarnessLaunch(["claude", "--print", "hi"], {})
    result = await runtime.execute(sandbox, launch, 60, sandbox.logs / "harness")
    assert result.exit_code in (126, 127)  # the OCI runtime's "not found" codes
    assert "claude" in result.stdout_tail + result.stderr_tail
    # The engine does not always write its "not found" into the stream (seen: nothing, on a
    # busy machine): an exec that ends 126/127 with no output is named by rollstream.
    silent = HarnessLaunch(["sh", "-c", "exit 127"], {})
    result = await runtime.execute(sandbox, silent, 60, sandbox.logs / "silent")
    assert result.exit_code == 127 and "'sh' ended with exit 127" in result.stderr_tail
    await runtime.stop(sandbox)


async def test_a_runtime_closed_with_a_session_open_leaves_no_container(
    runtime_factory: RuntimeFactory, client: Any
) -> None:
    """A node stopping mid-run (or a test failing before its session's stop)."""
    runtime = runtime_factory()
    await runtime.start("s-open")
    assert len(_ours(client)) == 1
    await runtime.close()
    assert _ours(client) == []


async def test_an_engine_killed_mid_session_fails_the_run_with_a_retriable_error(
    own_engine: DockerEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docker = pytest.importorskip("docker")
    unixconn = pytest.importorskip("docker.transport.unixconn")
    if os.geteuid() != 0:
        pytest.skip("dockerd runs as root only")
    info = own_engine.start()
    image = busybox_image(own_engine)
    client = docker.DockerClient(base_url=own_engine.docker_host)
    runtime = DockerRuntime(image.tag, tmp_path / "sessions", client=client)
    try:
        sandbox = await runtime.start("s-5")
        logs = sandbox.logs / "harness"
        launch = HarnessLaunch(["sh", "-c", "echo started; sleep 300"], {})
        run = asyncio.create_task(runtime.execute(sandbox, launch, 120, logs))
        await until(
            lambda: (logs / "stdout").exists() and b"started" in (logs / "stdout").read_bytes(),
            60,
            "the harness started",
        )
        # The SDK leaves the socket of a failed connect open (a ResourceWarning wherever it is
        # collected: once in an unrelated test), so the runtime must not call a dead engine.
        connects: list[object] = []
        connect = unixconn.UnixHTTPConnection.connect

        def counted(conn: object) -> None:
            connects.append(conn)
            connect(conn)

        monkeypatch.setattr(unixconn.UnixHTTPConnection, "connect", counted)
        os.kill(info.pid, signal.SIGKILL)
        with pytest.raises(ContainerError, match="engine failed while the harness ran") as failed:
            await asyncio.wait_for(run, 60)
        assert failed.value.retriable  # another try may find the engine back
        await runtime.stop(sandbox)  # the container cannot be removed (logged); the rest is
        assert not sandbox.root.exists()
        assert connects == []  # the exit code and the removal were never asked of it
    finally:
        await runtime.close()
        client.close()


#: busybox's view of a port: ``open`` when a TCP connect there succeeds, else ``closed``.
_NC = (
    "nc -w 3 127.0.0.1 {port} </dev/null >/dev/null 2>&1 && echo {name}=open || echo {name}=closed"
)


@pytest.mark.parametrize("walls", [True, False])
async def test_a_walled_container_reaches_only_its_endpoint(
    runtime_factory: RuntimeFactory, client: Any, walls: bool
) -> None:
    async def interceptor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nthrough")
        await writer.drain()
        writer.close()

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # nc ends when the other side does

    server = await asyncio.start_server(interceptor, "127.0.0.1", 0)
    kafka = await asyncio.start_server(broker, "127.0.0.1", 0)
    async with server, kafka:
        port = server.sockets[0].getsockname()[1]
        runtime = runtime_factory(walls=walls)
        sandbox = await runtime.start("walled")
        container = runtime._containers[sandbox.root]
        script = "; ".join(
            [
                f"wget -q -O - http://127.0.0.1:{port}/ ; echo",
                _NC.format(port=kafka.sockets[0].getsockname()[1], name="broker"),
            ]
        )
        launch = HarnessLaunch(["sh", "-c", script], {})
        wall = Wall(Endpoint("127.0.0.1", port))
        result = await runtime.execute(sandbox, launch, 60, sandbox.logs / "h", wall)
        mode = client.api.inspect_container(container.id)["HostConfig"]["NetworkMode"]
        await runtime.stop(sandbox)
    assert result.exit_code == 0, result.stderr_tail
    lines = result.stdout_tail.split()
    assert lines[0] == "through"  # the endpoint, relayed into the container's namespace
    assert lines[1] == ("broker=closed" if walls else "broker=open")
    assert mode == ("none" if walls else "host")


@pytest.mark.parametrize(("caps", "allowed"), [([], False), (["SYS_ADMIN"], True)])
def test_walls_are_refused_in_a_container_without_the_capability(
    client: Any, docker_base: ImageResult, caps: list[str], allowed: bool
) -> None:
    # Where a node runs in a container (Compose): the engine's default profile forbids new
    # namespaces unless the container has CAP_SYS_ADMIN. The probe says so, in its own words.
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from rollstream.sandbox.netns import wall_problem; print(wall_problem())"
    )
    output = client.containers.run(
        docker_base.tag,
        ["python3", "-c", probe, str(REPO_ROOT)],
        volumes={str(REPO_ROOT): {"bind": str(REPO_ROOT), "mode": "ro"}},
        network_mode="host",
        cap_add=caps,
        remove=True,
    ).decode()
    if allowed:
        assert output.strip() == "None"
    else:
        assert "cannot get user and network namespaces" in output
        assert "CAP_SYS_ADMIN" in output
