"""Runtimes: the local sandbox's directories, setup commands, teardown; docker's availability."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rollstream.dev.containers import DockerEngine
from rollstream.errors import ConfigurationError
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.docker import DockerRuntime
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.runtime import (
    LocalRuntime,
    SetupError,
    run_setup,
)
from rollstream.sandbox.runtimes import make_runtime
from tests.producers.node.helpers import wait_dead


def _deadline(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_local_sandbox_has_home_work_and_logs_and_is_removed(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "root")
    sandbox = await runtime.start("t-0-abc")
    assert sandbox.root.parent == tmp_path / "root"
    assert sandbox.root.name.startswith("rollstream-t-0-abc-")
    assert all(p.is_dir() for p in (sandbox.home, sandbox.work, sandbox.logs))
    await runtime.stop(sandbox)
    assert not sandbox.root.exists()


async def test_keep_leaves_the_sandbox_for_debugging(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path, keep=True)
    sandbox = await runtime.start("s")
    await runtime.stop(sandbox)
    assert sandbox.work.is_dir()


async def test_execute_runs_in_work_with_the_sessions_home(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    sandbox = await runtime.start("s")
    launch = HarnessLaunch(["bash", "-c", 'pwd; echo "$HOME"; echo "$X"'], {"X": "y"})
    result = await runtime.execute(sandbox, launch, 10, sandbox.logs / "h")
    assert result.exit_code == 0
    assert result.stdout_tail.split() == [str(sandbox.work), str(sandbox.home), "y"]


async def test_setup_commands_run_in_order_in_work_with_home_and_task_env(
    tmp_path: Path,
) -> None:
    runtime = LocalRuntime(tmp_path)
    sandbox = await runtime.start("s")
    commands = ['echo "$GREETING" > a.txt', 'cat a.txt > b.txt; echo "$HOME" >> b.txt']
    await run_setup(runtime, sandbox, commands, {"GREETING": "hello"}, _deadline(10))
    assert (sandbox.work / "b.txt").read_text().split() == ["hello", str(sandbox.home)]
    assert (sandbox.logs / "setup-1").is_dir()


async def test_a_failing_setup_command_names_itself_and_its_stderr(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    sandbox = await runtime.start("s")
    commands = ["true", "echo broken >&2; false; echo never > never.txt", "touch x"]
    with pytest.raises(SetupError, match=r"setup command 2 exited with 1: .*\nbroken"):
        await run_setup(runtime, sandbox, commands, {}, _deadline(10))
    # -e: the command stops at its first failure; the next command never runs.
    assert not (sandbox.work / "never.txt").exists() and not (sandbox.work / "x").exists()


async def test_setup_shares_one_init_deadline_and_is_killed_at_it(tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path)
    sandbox = await runtime.start("s")
    pidfile = tmp_path / "sleep.pid"
    commands = ["sleep 0.3", f"sleep 300 & echo $! > {pidfile}; wait"]
    started = time.monotonic()
    with pytest.raises(SetupError, match="setup command 2 did not finish within the init"):
        await run_setup(runtime, sandbox, commands, {}, _deadline(1.0))
    assert time.monotonic() - started < 8
    assert await wait_dead(int(pidfile.read_text()))


def test_docker_runtime_explains_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ConfigurationError) as missing:
        make_runtime(NodeSettings(runtime="docker", work_root=tmp_path))
    assert "needs a Docker engine, none reachable" in str(missing.value)
    assert "/nonexistent/docker.sock" in str(missing.value)
    assert "set ROLLSTREAM_NODE_RUNTIME=local otherwise" in str(missing.value)


def test_the_settings_make_a_docker_runtime_of_the_engine_docker_host_names(
    docker_engine: DockerEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_engine.docker_host)
    settings = NodeSettings(runtime="docker", work_root=tmp_path, docker_mounts=(tmp_path,))
    runtime = make_runtime(settings)
    assert isinstance(runtime, DockerRuntime) and isinstance(runtime, LocalRuntime)
    assert runtime.name == "docker" and runtime.mounts == (tmp_path.resolve(),)
    assert runtime.client.ping()
    asyncio.run(runtime.close())  # it made its client: closing the runtime closes it


def test_the_settings_choose_the_runtime(tmp_path: Path) -> None:
    runtime = make_runtime(NodeSettings(work_root=tmp_path, keep_workdirs=True))
    assert isinstance(runtime, LocalRuntime) and runtime.name == "local"
    assert (runtime.root, runtime.keep) == (tmp_path, True)
