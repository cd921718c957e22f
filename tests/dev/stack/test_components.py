"""What the local stack runs: command lines, health checks, the saved state, stopping."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rollstream.cli import cli
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.stack import components
from rollstream.dev.stack.components import Component, plan
from rollstream.dev.stack.processes import Running, StackState, healthy, spawn, terminate
from rollstream.dev.stack.settings import StackSettings
from rollstream.errors import ConfigurationError


def _command_of(argv: list[str]) -> list[str]:
    """The rollstream subcommand and options of a ``python -m rollstream ...`` line."""
    assert argv[:3] == [sys.executable, "-m", "rollstream"]
    return argv[3:]


def test_every_service_is_a_real_command_with_real_options() -> None:
    for component in plan(StackSettings(backend_port=0, interceptor_port=0, node_port=0)):
        args = _command_of(component.argv)
        command = cli.commands[args[0]]
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        flags = [a for a in args[1:] if a.startswith("--")]
        assert set(flags) <= options, (component.name, set(flags) - options)


def test_the_interceptor_points_at_the_backend_and_the_node_at_the_interceptor() -> None:
    settings = StackSettings(backend_port=8500, interceptor_port=8600, admin_port=8601)
    by_name = {c.name: c for c in plan(settings)}
    assert list(by_name) == ["backend", "interceptor", "reconstructor", "scorer", "node"]
    proxy = _command_of(by_name["interceptor"].argv)
    assert proxy[proxy.index("--upstream") + 1] == "http://127.0.0.1:8500"
    node = _command_of(by_name["node"].argv)
    assert node[node.index("--base-url") + 1] == "http://127.0.0.1:8600"
    assert node[node.index("--interceptor-admin") + 1] == "http://127.0.0.1:8601"
    assert by_name["interceptor"].health == "http://127.0.0.1:8601/health"
    assert by_name["reconstructor"].marker and by_name["scorer"].marker


def test_services_asked_for_port_0_bind_it_themselves_and_the_next_ones_get_what_they_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No port is picked for them: a port picked now and bound later can be taken meanwhile."""

    def no_guess(*args: object, **kwargs: object) -> int:
        raise AssertionError("a port was picked for a service that binds port 0 itself")

    monkeypatch.setattr(components, "free_port", no_guess)
    planned = plan(StackSettings(backend_port=0, interceptor_port=0, admin_port=0, node_port=0))
    by_name = {c.name: c for c in planned}
    assert {n: c.listens for n, c in by_name.items() if c.listens} == {
        "backend": ("backend",),
        "interceptor": ("interceptor", "admin"),
        "node": ("node",),
    }
    backend, proxy, node = (
        _command_of(by_name[n].argv) for n in ("backend", "interceptor", "node")
    )
    assert backend[backend.index("--port") + 1] == "0"
    assert proxy[proxy.index("--port") + 1] == proxy[proxy.index("--admin-port") + 1] == "0"
    assert proxy[proxy.index("--upstream") + 1] == components.ref("backend")
    assert node[node.index("--interceptor-admin") + 1] == components.ref("admin")
    urls = {
        "backend": "http://127.0.0.1:41001",
        "interceptor": "http://127.0.0.1:41002",
        "admin": "http://127.0.0.1:41003",
    }
    resolved = by_name["node"].resolved(urls)
    node = _command_of(resolved.argv)
    assert node[node.index("--base-url") + 1] == "http://127.0.0.1:41002"
    assert node[node.index("--interceptor-admin") + 1] == "http://127.0.0.1:41003"
    assert by_name["interceptor"].resolved(urls).health == "http://127.0.0.1:41003/health"
    assert by_name["node"].health == components.ref("node") + "/health"  # its own, once said


def test_exact_context_passes_the_served_model_s_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interceptor_args(**overrides: Any) -> list[str]:
        settings = StackSettings(backend_port=0, interceptor_port=0, node_port=0, **overrides)
        by_name = {c.name: c for c in plan(settings)}
        return _command_of(by_name["interceptor"].argv)

    ordinary = interceptor_args()
    assert "--context" not in ordinary  # but sessions may choose: the tokenizer is there
    assert ordinary[ordinary.index("--tokenizer") + 1] == str(default_tokenizer_dir())
    exact = interceptor_args(context="exact")
    assert exact[exact.index("--context") + 1] == "exact"
    assert exact[exact.index("--tokenizer") + 1] == str(default_tokenizer_dir())
    # A remote upstream: the tokenizer comes from the environment (or calls fall back).
    remote = interceptor_args(context="exact", upstream="http://gpu:8000")
    assert "--context" in remote and "--tokenizer" not in remote
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    local = interceptor_args(context="exact", vllm=str(model))
    assert local[local.index("--tokenizer") + 1] == str(model)
    with pytest.raises(ConfigurationError, match="hermes"):
        interceptor_args(context="exact", vllm=str(model), tool_parser="qwen3_coder")


def test_a_given_upstream_starts_no_backend_and_vllm_needs_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [c.name for c in plan(StackSettings(upstream="http://gpu:8000", node=False))]
    assert names == ["interceptor", "reconstructor", "scorer"]
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigurationError, match="vllm"):
        plan(StackSettings(vllm="Qwen/Qwen3-8B"))


def test_vllm_is_launched_with_what_capture_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    [vllm, *_] = plan(StackSettings(vllm="Qwen/Qwen3-8B", tool_parser="qwen3_coder"))
    assert vllm.name == "vllm"
    assert vllm.argv[:3] == [str(fake), "serve", "Qwen/Qwen3-8B"]
    assert "--enable-auto-tool-choice" in vllm.argv
    assert vllm.argv[vllm.argv.index("--tool-call-parser") + 1] == "qwen3_coder"
    assert vllm.argv[vllm.argv.index("--served-model-name") + 1] == "rollstream-tiny"


def test_the_engine_is_a_real_vllm_serving_the_family_it_names_to_the_interceptor() -> None:
    settings = StackSettings(engine="vllm", family="qwen3", backend_port=0, context="exact")
    by_name = {c.name: c for c in plan(settings)}
    assert list(by_name)[:2] == ["engine", "interceptor"]
    engine = _command_of(by_name["engine"].argv)
    assert engine[:2] == ["engine", "serve"]
    assert engine[engine.index("--family") + 1] == "qwen3"
    assert engine[engine.index("--served-name") + 1] == settings.model
    options = {o for p in cli.commands["engine"].commands["serve"].params for o in p.opts}  # type: ignore[attr-defined]
    assert {a for a in engine if a.startswith("--")} <= options
    assert by_name["engine"].listens == ("engine",)  # it binds its port, then says which
    proxy = _command_of(by_name["interceptor"].argv)
    assert proxy[proxy.index("--upstream") + 1] == components.ref("engine")
    assert proxy[proxy.index("--family") + 1] == "qwen3"
    assert "--tokenizer" not in proxy  # the family's vocabulary, checked against vLLM's
    with pytest.raises(ConfigurationError, match="name one with --family"):
        plan(StackSettings(engine="vllm"))


def test_the_state_round_trips_and_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    state = StackState("127.0.0.1:9092", "rs", True)
    state.components.append(Running("x", 1, ["not", "init"], str(tmp_path / "x.log")))
    path = tmp_path / "stack" / "stack.json"
    state.save(path)
    loaded = StackState.load(path)
    assert loaded == state
    assert not loaded.components[0].alive()  # pid 1 runs, but not this command line
    assert StackState.load(tmp_path / "none.json") is None
    path.write_text("{")
    with pytest.raises(ConfigurationError):
        StackState.load(path)


def test_spawned_services_log_and_stop_on_sigterm_or_are_killed(tmp_path: Path) -> None:
    polite = spawn(Component("polite", ["sleep", "30"]), tmp_path, {})
    stubborn = spawn(
        Component("stubborn", ["bash", "-c", "trap '' TERM; echo started; sleep 30; echo never"]),
        tmp_path,
        {},
    )
    assert polite.alive() and stubborn.alive()
    assert terminate(polite, timeout=5) == "stopped" and not polite.alive()
    for _ in range(50):  # wait until the trap is set (its echo comes after)
        if "started" in Path(stubborn.log).read_text():
            break
        subprocess.run(["sleep", "0.1"], check=True)
    assert terminate(stubborn, timeout=0.5).startswith("killed")
    assert terminate(stubborn, timeout=0.5) == "not running"


async def test_a_marker_an_earlier_run_left_in_the_log_is_not_taken_for_ready(
    tmp_path: Path,
) -> None:
    """`up` after `down` in one state directory: the log holds the last run's "ready" already."""
    (tmp_path / "consumer.log").write_text("consuming\n")  # what the earlier run wrote
    script = "sleep 1; echo consuming; sleep 30"
    running = spawn(Component("consumer", ["sh", "-c", script], marker="consuming"), tmp_path, {})
    try:
        async with aiohttp.ClientSession() as http:
            assert not await healthy(running, http)  # the old line does not count
            for _ in range(100):
                if await healthy(running, http):
                    break
                await asyncio.sleep(0.05)
            assert await healthy(running, http)
    finally:
        terminate(running, timeout=5)
