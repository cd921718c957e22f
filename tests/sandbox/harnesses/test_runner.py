"""Running a harness process: isolated environment, HOME files, timeouts that kill the group."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import harness_env, run_harness


def test_environment_is_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer")
    monkeypatch.setenv("HTTPS_PROXY", "http://corp:3128")
    env = harness_env(HarnessLaunch(["x"], {"OPENAI_API_KEY": "sess-1"}), tmp_path)
    assert env["OPENAI_API_KEY"] == "sess-1"  # the preset's, never the caller's
    assert "HTTPS_PROXY" not in env
    assert env["HOME"] == str(tmp_path) and env["PATH"] == os.environ["PATH"]


async def test_home_files_workdir_exit_code_and_output(tmp_path: Path) -> None:
    script = (
        "import os, pathlib, sys; print(pathlib.Path(os.environ['HOME'], 'cfg/a.json')"
        ".read_text()); pathlib.Path('out.txt').write_text('x'); sys.exit(3)"
    )
    launch = HarnessLaunch([sys.executable, "-c", script], {}, {"cfg/a.json": "{}"})
    result = await run_harness(launch, tmp_path / "home", tmp_path / "w", tmp_path / "logs", 30)
    assert (result.exit_code, result.timed_out) == (3, False)
    assert result.stdout_tail.strip() == "{}"
    assert (tmp_path / "w/out.txt").read_text() == "x"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
async def test_a_link_the_process_puts_in_place_of_its_output_is_not_followed(
    tmp_path: Path, link: str
) -> None:
    # What policy code can do: its output file replaced by a link to a secret of the same user.
    secret = tmp_path / "token"
    secret.write_text("s3cret-token")
    stdout = tmp_path / "logs" / "stdout"
    command = "ln -s" if link == "symlink" else "ln"
    launch = HarnessLaunch(["bash", "-c", f"rm {stdout}; {command} {secret} {stdout}"], {})
    result = await run_harness(launch, tmp_path / "home", tmp_path / "w", tmp_path / "logs", 30)
    assert result.exit_code == 0
    assert "s3cret" not in result.stdout_tail
    assert result.stdout_tail.startswith("[output not read: stdout ")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def _wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return not _alive(pid)


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A harness's own children (tool calls) die with it."""
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen(['sleep', '300']); open({str(pidfile)!r}, 'w').write(str(p.pid)); "
        "time.sleep(300)"
    )
    launch = HarnessLaunch([sys.executable, "-c", script], {})
    started = time.monotonic()
    result = await run_harness(launch, tmp_path / "h", tmp_path / "w", tmp_path / "l", 1.5)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 20
    assert await _wait_dead(int(pidfile.read_text()))


async def test_children_left_behind_after_a_normal_exit_are_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess; "
        f"p = subprocess.Popen(['sleep', '300']); open({str(pidfile)!r}, 'w').write(str(p.pid))"
    )
    launch = HarnessLaunch([sys.executable, "-c", script], {})
    result = await run_harness(launch, tmp_path / "h", tmp_path / "w", tmp_path / "l", 30)
    assert result.exit_code == 0
    assert await _wait_dead(int(pidfile.read_text()))


async def test_a_harness_dies_with_its_node(tmp_path: Path) -> None:
    pidfile = tmp_path / "harness.pid"
    node = (
        "import asyncio\n"
        "from pathlib import Path\n"
        "from rollstream.sandbox.harnesses.presets import HarnessLaunch\n"
        "from rollstream.sandbox.harnesses.runner import run_harness\n"
        f"command = 'echo $$ > {pidfile}; sleep 60; echo never'\n"
        "launch = HarnessLaunch(['bash', '-c', command], {})\n"
        f"base = Path({str(tmp_path)!r})\n"
        "asyncio.run(run_harness(launch, base / 'home', base / 'work', base / 'logs', 120))\n"
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", node)
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    harness = int(pidfile.read_text())
    assert _alive(harness)
    proc.kill()  # SIGKILL: none of the node's clean-up runs
    await proc.wait()
    assert await _wait_dead(harness)
