"""The docker runtime against a fake docker client (tests/sandbox/test_docker.py: a real engine)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox import docker as docker_module
from rollstream.sandbox.docker import DockerRuntime
from rollstream.sandbox.docker_engine import ContainerError
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.netns import Endpoint, Wall
from rollstream.sandbox.runtime import SetupError, run_setup
from rollstream.sandbox.runtimes import make_runtime
from tests.producers.node.fake_docker import FakeContainer, FakeDocker
from tests.waiting import until


def _runtime(
    tmp_path: Path, *, keep: bool = False, network: str = "host", prewarm: int = 0
) -> tuple[DockerRuntime, FakeDocker]:
    fake = FakeDocker()
    runtime = DockerRuntime("img:1", tmp_path, keep, network=network, prewarm=prewarm, client=fake)
    return runtime, fake


async def test_the_container_gets_the_image_the_sandbox_bind_mounts_and_the_network(
    tmp_path: Path,
) -> None:
    runtime, fake = _runtime(tmp_path, network="bridge")
    sandbox = await runtime.start("t-0-abc")
    assert sandbox.root.parent == tmp_path and sandbox.root.name.startswith("rollstream-t-0-abc-")
    [container] = fake.containers.made
    assert container.image == "img:1" and container.command == ["sleep", "infinity"]
    options = container.kwargs
    assert options["detach"] is True and options["network_mode"] == "bridge"
    assert options["volumes"] == {
        str(p): {"bind": str(p), "mode": "rw"} for p in (sandbox.home, sandbox.work, sandbox.logs)
    }
    assert options["user"] == f"{os.getuid()}:{os.getgid()}"
    assert options["working_dir"] == str(sandbox.work)


async def test_a_task_image_gets_a_container_of_its_own_and_leaves_the_pool(
    tmp_path: Path,
) -> None:
    runtime, fake = _runtime(tmp_path, prewarm=1)
    await runtime.start("first")  # takes no pre-warmed one yet; the pool fills behind it
    await until(lambda: runtime.idle == 1, 10, "the pool filled")
    sandbox = await runtime.start("t-swe", image="task:7")
    assert runtime.idle == 1  # the pool's container is of the runtime's image: not for this task
    assert [c.image for c in fake.containers.made] == ["img:1", "img:1", "task:7"]
    assert fake.containers.made[-1].kwargs["volumes"][str(sandbox.work)]["mode"] == "rw"
    taken = await runtime.start("next", image="img:1")  # the runtime's own image: the pool's
    assert len(fake.containers.made) == 3 and taken.session_id == "next"
    await runtime.close()


def test_host_networking_is_the_default(tmp_path: Path) -> None:
    assert NodeSettings().docker_network == "host"
    runtime, _ = _runtime(tmp_path)
    assert runtime.network == "host"


async def test_execute_passes_argv_env_and_workdir_and_maps_the_exit_code(
    tmp_path: Path,
) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    fake.api.output = [(b"out\n", None), (None, b"err\n"), (b"more\n", None)]
    fake.api.exit_code = 3
    launch = HarnessLaunch(["agent", "-p", "hi"], {"X": "y"}, {".agent/config.json": "{}"})
    result = await runtime.execute(sandbox, launch, 10, sandbox.logs / "harness")
    assert (result.exit_code, result.timed_out) == (3, False)
    [run] = fake.api.runs
    assert run.container_id == fake.containers.made[0].id
    assert run.cmd == ["agent", "-p", "hi"]
    assert run.kwargs["workdir"] == str(sandbox.work)
    env = run.kwargs["environment"]
    assert env["X"] == "y" and env["HOME"] == str(sandbox.home)
    assert env["TMPDIR"] == str(sandbox.home / "tmp")
    assert "PATH" not in env  # the host's PATH means nothing in the image: the image's applies
    assert (sandbox.logs / "harness" / "stdout").read_text() == "out\nmore\n"
    assert (sandbox.logs / "harness" / "stderr").read_text() == "err\n"
    assert result.stdout_tail == "out\nmore\n" and result.stderr_tail == "err\n"
    assert (sandbox.home / ".agent" / "config.json").read_text() == "{}"
    # What the run left in the background is killed, the container stays up for the next run.
    cleanup = list(fake.api.execs.values())[-1]
    assert cleanup.cmd[:2] == ["sh", "-c"] and "kill -KILL -1" in cleanup.cmd[2]
    assert not fake.containers.made[0].killed.is_set()


async def test_an_engine_gone_mid_run_is_a_retriable_container_error(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    fake.api.output = [(b"working\n", None)]
    # What the SDK's stream raises when the daemon's socket closes mid-response.
    fake.api.broken = ConnectionResetError("Connection broken: the engine went away")
    with pytest.raises(ContainerError, match="engine failed while the harness ran") as failed:
        await runtime.execute(sandbox, HarnessLaunch(["agent"], {}), 10, sandbox.logs / "h")
    assert failed.value.retriable
    assert (sandbox.logs / "h" / "stdout").read_text() == "working\n"  # kept up to the break


async def test_an_engine_gone_before_a_walled_run_is_a_retriable_container_error(
    tmp_path: Path,
) -> None:
    fake = FakeDocker()
    runtime = DockerRuntime("img:1", tmp_path, client=fake, walls=True)
    sandbox = await runtime.start("s")
    [container] = fake.containers.made
    assert container.kwargs["network_mode"] == "none"
    container.broken = ConnectionResetError("Connection broken: the engine went away")
    wall = Wall(Endpoint("127.0.0.1", 8100))
    with pytest.raises(ContainerError, match="engine failed while the harness started") as failed:
        await runtime.execute(sandbox, HarnessLaunch(["agent"], {}), 10, sandbox.logs / "h", wall)
    assert failed.value.retriable
    assert fake.api.runs == []  # nothing ran without its relay


async def test_a_preset_may_set_path_itself(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    await runtime.execute(sandbox, HarnessLaunch(["a"], {"PATH": "/opt/x"}), 10, sandbox.logs)
    assert fake.api.runs[0].kwargs["environment"]["PATH"] == "/opt/x"


async def test_the_timeout_kills_the_container_and_reports_timed_out(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    fake.api.output = [(b"working\n", None)]
    fake.api.hang = True
    started = time.monotonic()
    result = await runtime.execute(sandbox, HarnessLaunch(["hang"], {}), 0.3, sandbox.logs / "h")
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    assert fake.containers.made[0].killed.is_set()
    assert result.stdout_tail == "working\n"


async def test_cancelling_the_run_kills_the_container(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    fake.api.hang = True
    run = asyncio.create_task(
        runtime.execute(sandbox, HarnessLaunch(["hang"], {}), 60, sandbox.logs)
    )
    await until(lambda: fake.api.runs)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert fake.containers.made[0].killed.is_set()


async def test_setup_runs_through_the_container_and_failures_name_themselves(
    tmp_path: Path,
) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    fake.api.output = [(None, b"broken\n")]
    fake.api.exit_code = 1
    deadline = asyncio.get_running_loop().time() + 10
    with pytest.raises(SetupError, match=r"setup command 1 exited with 1: false\nbroken"):
        await run_setup(runtime, sandbox, ["false"], {"G": "h"}, deadline)
    [run] = fake.api.runs
    assert run.cmd[-1] == "false" and run.cmd[0] == "bash"
    assert run.kwargs["environment"]["G"] == "h"
    assert (sandbox.logs / "setup-0" / "stderr").read_text() == "broken\n"


async def test_stop_removes_the_container_then_the_directory(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path)
    sandbox = await runtime.start("s")
    await runtime.stop(sandbox)
    assert fake.containers.made[0].removed
    assert not sandbox.root.exists()


async def test_keep_removes_the_container_but_keeps_the_directory(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path, keep=True)
    sandbox = await runtime.start("s")
    await runtime.stop(sandbox)
    assert fake.containers.made[0].removed and sandbox.work.is_dir()


async def test_the_prewarmed_pool_hands_out_ready_containers_and_refills(
    tmp_path: Path,
) -> None:
    runtime, fake = _runtime(tmp_path, prewarm=2)
    first = await runtime.start("a")  # nothing warm yet: made on demand, the pool fills behind
    await until(lambda: runtime.idle == 2)
    made: list[FakeContainer] = fake.containers.made
    assert len(made) == 3
    pooled = made[1]
    second = await runtime.start("b")
    assert second.session_id == "b"
    assert pooled.kwargs["volumes"][str(second.work)]["bind"] == str(second.work)
    assert runtime.idle == 1  # handed out at once, no container made for it
    await until(lambda: runtime.idle == 2)
    assert len(made) == 4
    # The pooled container is the session's: execs go to it, stop removes it.
    await runtime.execute(second, HarnessLaunch(["x"], {}), 10, second.logs)
    assert fake.api.runs[0].container_id == pooled.id
    await runtime.stop(second)
    assert pooled.removed and not second.root.exists()
    await runtime.stop(first)
    await runtime.close()
    assert all(c.removed for c in made) and runtime.idle == 0
    assert await asyncio.to_thread(os.listdir, tmp_path) == []


async def test_without_prewarm_no_container_waits(tmp_path: Path) -> None:
    runtime, fake = _runtime(tmp_path, prewarm=0)
    await runtime.start("a")
    await asyncio.sleep(0.05)
    assert len(fake.containers.made) == 1 and runtime.idle == 0


@pytest.mark.parametrize(("isolation", "network"), [("namespace", "none"), ("none", "bridge")])
async def test_make_runtime_passes_image_network_and_prewarm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str, network: str
) -> None:
    fake = FakeDocker()
    monkeypatch.setattr(docker_module, "docker_client", lambda chosen_by: fake)
    settings = NodeSettings(
        runtime="docker",
        docker_image="i:2",
        docker_network="bridge",
        prewarm=3,
        work_root=tmp_path,
        isolation=isolation,
    )
    runtime = make_runtime(settings)
    assert isinstance(runtime, DockerRuntime)
    # Walled, a container has no network but the relayed interceptor; else the configured one.
    assert (runtime.image, runtime.network, runtime.prewarm) == ("i:2", network, 3)
    assert runtime.walls == (isolation == "namespace")
    assert runtime.client is fake and runtime.root == tmp_path
    assert runtime.mounts == ()
