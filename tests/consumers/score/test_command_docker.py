"""The command evaluator in real containers: a fresh one per evaluation, no network, bounded.

The Debian base image (python3, git) stands in for a task's image; the workspace, the session's
diff and the check are those of ``test_command.py``, run in the run's private Docker daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rollstream.consumers.score.evaluators import EvalResult, evaluate
from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.dev.containers import DockerEngine, ImageResult
from rollstream.errors import ConfigurationError
from rollstream.sandbox.docker import LABEL, DockerRuntime
from rollstream.sandbox.runtime import LocalRuntime
from rollstream.settings import KafkaSettings
from tests.consumers.score.test_command import BROKEN, FIXED, _session_diff, _task, _trajectory

pytestmark = pytest.mark.integration

CHECK = "python3 test_calc.py"
MEMORY = "256m"
Score = Callable[..., Any]
#: The container's memory limit and CPU quota and period, from cgroup v2 or v1 (these machines).
CGROUP_PROBE = """\
from pathlib import Path
def read(*paths):
    return next((Path(p).read_text().split() for p in paths if Path(p).exists()), [])
print("memory", *read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"))
v1 = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") + read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
print("cpu", *(read("/sys/fs/cgroup/cpu.max") or v1))
"""


@pytest.fixture
def client(docker_engine: DockerEngine) -> Any:
    """A docker SDK client of the run's daemon."""
    docker = pytest.importorskip("docker")
    made = docker.DockerClient(base_url=docker_engine.docker_host)
    yield made
    made.close()


@pytest.fixture
async def score(
    client: Any, docker_base: ImageResult, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """``await score(command, calc, ...)``: the evaluation of a session that wrote ``calc``."""
    runtimes: list[DockerRuntime] = []

    async def run(
        command: str,
        calc: str,
        timeout_s: float = 120,
        image: str | None = None,
        task_image: str | None = None,
        more_setup: tuple[str, ...] = (),
        **config: str,
    ) -> EvalResult:
        runtime = DockerRuntime(
            image or docker_base.tag,
            tmp_path / "scratch",
            network="none",
            cpus=1.0,
            memory=MEMORY,
            client=client,
        )
        runtimes.append(runtime)
        # The task's image, when it names one, is the container's; the runtime's otherwise.
        task = _task(command, **config).model_copy(update={"image": task_image})
        session_dir = tmp_path / f"session-{len(runtimes)}"
        session_dir.mkdir()
        patch = await _session_diff(session_dir, task, calc)
        task = task.model_copy(update={"setup": [*task.setup, *more_setup]})
        spec = task.evaluator
        assert spec is not None
        return await evaluate(
            _trajectory(task, [patch]), spec, timeout_s=timeout_s, runtime=runtime
        )

    yield run
    for runtime in runtimes:
        await runtime.close()


def _ours(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": LABEL}))


async def test_the_check_runs_in_a_fresh_container_with_the_diff_applied(
    score: Score, client: Any, tmp_path: Path
) -> None:
    fixed = await score(CHECK, FIXED)
    assert (fixed.reward, fixed.error) == (1.0, None), fixed
    assert "all tests passed" in fixed.details["output"]
    broken = await score(CHECK, BROKEN)
    assert broken.reward == 0.0 and "add is wrong" in broken.details["output"]
    assert _ours(client) == []  # each container removed after its evaluation
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_the_container_has_no_network_and_its_cpu_and_memory_bounds(score: Score) -> None:
    # A server of this process on the host's loopback: a host-network container would reach it.
    async def reached(_: web.Request) -> web.Response:
        return web.Response(text="reached")

    app = web.Application()
    app.router.add_get("/", reached)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        probe = f"python3 - <<'EOF'\n{CGROUP_PROBE}EOF\n" + (
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
        )
        result = await score(probe, FIXED)
    finally:
        await runner.cleanup()
    output = result.details["output"]
    assert result.reward == 0.0, output  # the connection failed, so the check did
    assert "ConnectionRefusedError" in output or "OSError" in output, output
    memory, cpu = output.splitlines()[:2]
    assert memory.split() == ["memory", str(256 * 1024 * 1024)]
    assert cpu.split() == ["cpu", "100000", "100000"]  # one CPU: a 100 ms quota per 100 ms


async def test_a_command_over_its_timeout_is_killed_and_gets_no_reward(
    score: Score, client: Any
) -> None:
    result = await score("sleep 300", FIXED, timeout="2")
    assert result.reward is None and result.error is not None
    assert result.error.startswith("timeout: the command ran longer than 2s")
    assert _ours(client) == []


async def test_a_diff_that_does_not_apply_in_the_container_gets_no_reward(
    score: Score, client: Any
) -> None:
    # A setup that is not what the session saw: calc.py differs, the diff's context is gone.
    rewrite = "printf 'def add(a, b):\\n    return 0\\n' > calc.py"
    result = await score(CHECK, FIXED, more_setup=(rewrite,))
    if result.error is None or "diff does not apply" not in result.error:
        pytest.fail(f"expected a diff that does not apply: {result}")
    assert result.reward is None


@pytest.mark.parametrize("whose", ["image", "task_image"])
async def test_a_missing_image_is_an_error_without_a_reward(
    score: Score, client: Any, whose: str
) -> None:
    # The runtime's own image (ROLLSTREAM_SCORE_DOCKER_IMAGE) or the one the task names.
    result = await score(CHECK, FIXED, **{whose: "rollstream-nosuch:1"})
    assert result.reward is None and result.error is not None
    assert "'rollstream-nosuch:1' is not in the Docker engine" in result.error
    assert _ours(client) == []


def test_the_scorer_makes_its_runtime_from_its_settings(
    docker_engine: DockerEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_engine.docker_host)
    settings = ScoreSettings(runtime="docker", docker_image="img:1", docker_memory="1g")
    scorer = Scorer(settings, KafkaSettings())
    runtime = scorer.runtime
    assert isinstance(runtime, DockerRuntime)
    assert (runtime.image, runtime.network, runtime.cpus, runtime.memory) == (
        "img:1",
        "none",
        1.0,
        "1g",
    )
    asyncio.run(runtime.close())
    local = Scorer(ScoreSettings(), KafkaSettings()).runtime
    assert isinstance(local, LocalRuntime) and local.walls  # the policy's checks walled


def test_a_scorer_without_an_engine_names_its_own_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ConfigurationError) as missing:
        Scorer(ScoreSettings(runtime="docker"), KafkaSettings())
    assert "needs a Docker engine, none reachable" in str(missing.value)
    assert "set ROLLSTREAM_SCORE_RUNTIME=local otherwise" in str(missing.value)
