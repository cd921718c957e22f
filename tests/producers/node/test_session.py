"""One session through init, run, post-run and teardown, with real processes."""

from __future__ import annotations

import time
from pathlib import Path

from rollstream.producers.node.session import harness_options, new_session_id
from rollstream.sandbox.harnesses.launch import SESSION_ENV
from rollstream.sandbox.runtime import Sandbox
from rollstream.sandbox.workspace import DIFF_ARTIFACT
from rollstream.schemas.sessions import SessionEnded, SessionStarted, SessionStatus
from rollstream.schemas.tasks import Workspace, WorkspaceKind
from tests.producers.node.helpers import REPO_ROOT, Sink, command_task, make_runner, wait_dead


def _artifact(ended: SessionEnded, name: str) -> bytes:
    return next(a.content for a in ended.artifacts if a.name == name)


def test_session_ids_name_task_and_sample_and_are_unique() -> None:
    a, b = new_session_id("task-7", 2), new_session_id("task-7", 2)
    assert a.startswith("task-7-2-") and len(a) == len("task-7-2-") + 8 and a != b


def test_harness_options_come_from_harness_metadata() -> None:
    task = command_task("true", metadata={"owner": "me", "harness.model": "m2"})
    assert harness_options(task) == {"command": "true", "model": "m2"}


async def test_command_that_writes_a_file_completes_with_the_diff(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, base_url="http://127.0.0.1:9", model="m")
    command = (
        'echo "$ROLLSTREAM_SESSION $ROLLSTREAM_BASE_URL $ROLLSTREAM_MODEL" > result.txt; '
        "echo {instruction} >> result.txt; echo out; echo err >&2"
    )
    task = command_task(
        command,
        instruction="Fix it; don't $break",
        workspace=Workspace(kind=WorkspaceKind.INLINE, files={"old.txt": "old\n"}),
        setup=["echo from-setup > setup.txt"],
    )
    ended = await runner.run_one(task, 0)
    assert ended.status is SessionStatus.COMPLETED and ended.exit_code == 0
    assert ended.error is None and ended.call_count == 3
    diff = _artifact(ended, DIFF_ARTIFACT).decode()
    session = ended.session_id
    assert "b/result.txt" in diff
    assert f"+{session} http://127.0.0.1:9 m" in diff
    assert "+Fix it; don't $break" in diff  # substituted shell-quoted, verbatim
    assert "setup.txt" not in diff and "old.txt" not in diff  # only the harness's work
    assert _artifact(ended, "stdout") == b"out\n" and _artifact(ended, "stderr") == b"err\n"
    assert not list((tmp_path / "sessions").iterdir())  # torn down


async def test_records_are_started_then_ended_with_the_callers_call_count(
    tmp_path: Path,
) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink)
    task = command_task("true", task_id="t9", group_id="g9", metadata={"team": "a"})
    session = runner.new(task, 2)
    sink.counts[session.session_id] = 11
    assert await runner.init(session)
    await runner.run(session)
    await runner.post(session)
    await runner.teardown(session)
    started, ended = sink.records
    assert isinstance(started, SessionStarted) and isinstance(ended, SessionEnded)
    for record in (started, ended):
        assert (record.session_id, record.task_id, record.group_id) == (
            session.session_id,
            "t9",
            "g9",
        )
        assert (record.sample_index, record.harness) == (2, "command")
    assert started.metadata["team"] == "a" and started.metadata["runtime"] == "local"
    assert ended.call_count == 11 and sink.asked == [session.session_id]
    assert started.started_at <= ended.ended_at


async def test_non_zero_exit_is_failed_with_its_exit_code(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, Sink())
    ended = await runner.run_one(command_task("echo partial > p.txt; exit 3"), 0)
    assert ended.status is SessionStatus.FAILED and ended.exit_code == 3
    assert ended.error == "harness failed (exit 3)"
    assert b"+partial" in _artifact(ended, DIFF_ARTIFACT)  # partial work is kept


async def test_a_hanging_command_and_its_children_die_at_the_agent_timeout(
    tmp_path: Path,
) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink)
    shell_pid, child_pid = tmp_path / "shell.pid", tmp_path / "child.pid"
    command = f"echo $$ > {shell_pid}; sleep 300 & echo $! > {child_pid}; sleep 300"
    task = command_task(command, agent_timeout_s=1.0)
    started = time.monotonic()
    ended = await runner.run_one(task, 0)
    assert time.monotonic() - started < 10
    assert ended.status is SessionStatus.TIMEOUT and ended.exit_code is None
    assert ended.error == "killed at the agent timeout of 1s"
    assert await wait_dead(int(shell_pid.read_text()))
    assert await wait_dead(int(child_pid.read_text()))
    assert [type(r) for r in sink.records] == [SessionStarted, SessionEnded]


async def test_init_timeout_fails_the_session_before_the_harness_runs(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink)
    task = command_task("touch ran.txt", setup=["sleep 300"], init_timeout_s=0.5)
    ended = await runner.run_one(task, 0)
    assert ended.status is SessionStatus.FAILED and ended.exit_code is None
    assert ended.error is not None
    assert "setup command 1 did not finish within the init timeout: sleep 300" in ended.error
    assert not any(a.name == DIFF_ARTIFACT for a in ended.artifacts)
    # Both records even so, in order, so the session's stream is complete.
    assert [type(r) for r in sink.records] == [SessionStarted, SessionEnded]
    assert ended.call_count == 0 and sink.asked == []  # no harness, no calls to ask about


async def test_a_failing_setup_command_fails_the_session_with_its_stderr(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path, Sink())
    ended = await runner.run_one(command_task("true", setup=["echo nope >&2; exit 9"]), 0)
    assert ended.status is SessionStatus.FAILED
    assert ended.error is not None and "setup command 1 exited with 9" in ended.error
    assert "nope" in ended.error


async def test_a_bad_workspace_fails_in_init(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, Sink())
    workspace = Workspace(kind=WorkspaceKind.DIRECTORY, path=str(tmp_path / "missing"))
    ended = await runner.run_one(command_task("true", workspace=workspace), 0)
    assert ended.status is SessionStatus.FAILED and ended.error is not None
    assert "init failed while starting the runtime" in ended.error
    assert "does not exist" in ended.error


async def test_an_unknown_harness_or_missing_option_fails_in_init(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, Sink())
    unknown = await runner.run_one(command_task("true", harness="cursor"), 0)
    assert unknown.error is not None and "unknown harness 'cursor'" in unknown.error
    task = command_task("true").model_copy(update={"metadata": {}})
    missing = await runner.run_one(task, 0)
    assert missing.error is not None and "harness.command" in missing.error


async def test_the_task_env_reaches_the_harness_but_not_over_the_session(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path, Sink())
    task = command_task(
        'echo "$FLAVOUR $ROLLSTREAM_SESSION" > env.txt',
        env={"FLAVOUR": "mint", SESSION_ENV: "stolen"},
    )
    ended = await runner.run_one(task, 0)
    assert f"+mint {ended.session_id}" in _artifact(ended, DIFF_ARTIFACT).decode()


async def test_the_python_preset_runs_an_async_function_in_a_child(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, Sink(), base_url="http://127.0.0.1:7")
    metadata = {
        "harness.function": "tests.producers.node.agents:write_note",
        "harness.pythonpath": str(REPO_ROOT),
    }
    task = command_task("", harness="python", instruction="Say hi", metadata=metadata)
    ended = await runner.run_one(task, 0)
    assert ended.status is SessionStatus.COMPLETED, ended.error
    diff = _artifact(ended, DIFF_ARTIFACT).decode()
    assert f"+http://127.0.0.1:7\n+{ended.session_id}\n+Say hi" in diff
    metadata["harness.function"] = "tests.producers.node.agents:give_up"
    failed = await runner.run_one(command_task("", harness="python", metadata=metadata), 0)
    assert failed.status is SessionStatus.FAILED and failed.exit_code == 4


async def test_a_failing_call_count_still_ends_the_session(tmp_path: Path) -> None:
    sink = Sink()

    async def broken(session_id: str) -> int:
        raise ConnectionError("interceptor away")

    runner = make_runner(tmp_path, sink)
    runner = type(runner)(runner.settings, runner.runtime, sink.emit, broken)
    ended = await runner.run_one(command_task("true"), 0)
    assert ended.status is SessionStatus.COMPLETED and ended.call_count == 0
    assert ended.error == "call count unavailable: interceptor away"


async def test_the_runtime_is_asked_for_the_tasks_image(tmp_path: Path) -> None:
    images: list[str | None] = []
    runner = make_runner(tmp_path, Sink())
    start = runner.runtime.start

    async def recording(session_id: str, image: str | None = None) -> Sandbox:
        images.append(image)
        return await start(session_id, image)

    runner.runtime.start = recording  # type: ignore[method-assign]
    await runner.run_one(command_task("true", image="swe-task:3"), 0)
    await runner.run_one(command_task("true"), 0)
    assert images == ["swe-task:3", None]
