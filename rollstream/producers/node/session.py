"""One sample of a task: init → run → post-run → teardown, and its two lifecycle records.

``SessionRunner`` does each stage on a ``Session`` and never raises for a session's own failures
(a bad workspace, a failing setup, a crashing or hanging harness): they become the session's
status and error, and every session, whatever happened, ends with a SessionEnded. Cancellation
is the caller's (``asyncio`` cancellation of the stage in progress, then ``Session.cancel``).

SessionStarted is emitted when the harness is launched, so ``started_at`` is when its calls can
begin; a session that never gets there (failed init, cancelled while queued) emits it just
before its SessionEnded, so every session id has both records, in order.

The session is registered on the interceptor at the start of init, not at SessionStarted: an
interceptor pool answers with the worker that will hold the session, whose address goes into
the harness's launch. It is forgotten once its SessionEnded is out, or at teardown when it
never ends with one (withdrawn).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from rollstream.errors import RollstreamError
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.harnesses.executables import resolve_executable
from rollstream.sandbox.harnesses.launch import HarnessContext, HarnessLaunch
from rollstream.sandbox.harnesses.presets import preset
from rollstream.sandbox.harnesses.runner import HarnessResult
from rollstream.sandbox.netns import Endpoint, Wall, walled_url
from rollstream.sandbox.outputs import read_tail
from rollstream.sandbox.runtime import Runtime, Sandbox, run_setup
from rollstream.sandbox.workspace import baseline, diff, materialize
from rollstream.schemas.sessions import Artifact, SessionEnded, SessionStarted, SessionStatus
from rollstream.schemas.tasks import Task
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

SessionRecord = SessionStarted | SessionEnded
#: Publishes a lifecycle record (later: the capture publisher, key = session id).
Emit = Callable[[SessionRecord], Awaitable[None]]
#: The number of calls the interceptor recorded for a session (later: its admin API).
CallsOf = Callable[[str], Awaitable[int]]
#: Registers a session (with the context mode its task asks for, if any) on the interceptor;
#: the base URL its harness must call (a pool's worker), or None for the node's ``base_url``.
Register = Callable[[str, str | None], Awaitable[str | None]]
#: Forgets a session on the interceptor once it is over.
Forget = Callable[[str], Awaitable[None]]
#: Task metadata keys ``harness.<option>`` become the preset's options (e.g. ``harness.command``).
HARNESS_OPTION_PREFIX = "harness."

#: Task metadata naming the interceptor's context mode for the task's sessions (exact|ordinary).
CONTEXT_METADATA = "context"


class Stage(StrEnum):
    """Where a session is."""

    QUEUED = "queued"
    INIT = "init"
    READY = "ready"
    RUN = "run"
    POST = "post"
    ENDED = "ended"


def new_session_id(task_id: str, sample: int) -> str:
    """``<task_id>-<sample>-<8 hex>``: readable, and unique across retries and nodes."""
    return f"{task_id}-{sample}-{uuid.uuid4().hex[:8]}"


def harness_options(task: Task) -> dict[str, str]:
    """The preset options a task gives in its ``harness.*`` metadata."""
    n = len(HARNESS_OPTION_PREFIX)
    return {k[n:]: v for k, v in task.metadata.items() if k.startswith(HARNESS_OPTION_PREFIX)}


@dataclass(eq=False)
class Session:
    """One sample of a task, as it moves through the stages."""

    task: Task
    sample: int
    session_id: str
    stage: Stage = Stage.QUEUED
    sandbox: Sandbox | None = None
    launch: HarnessLaunch | None = None
    baseline: str | None = None
    result: HarnessResult | None = None
    #: Set when the outcome is known before post-run (failed init, crash, cancellation).
    status: SessionStatus | None = None
    error: str | None = None
    started: SessionStarted | None = None
    #: Where its harness calls: the interceptor (pool worker) holding it; None: ``base_url``.
    base_url: str | None = None
    #: With a walled runtime: that interceptor, the one address its harness may reach.
    reach: Endpoint | None = None
    #: Registered on the interceptor and not yet forgotten.
    registered: bool = False
    ended: SessionEnded | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: The policy version current when the session was created (what its records carry).
    policy_version: int = 0
    #: Given back before its harness started: no records, its sample is still to run.
    withdrawn: bool = False
    #: Cut short to give its task's partition to another node: it ends ``cancelled`` and its
    #: sample runs again on the partition's next owner.
    handed_back: bool = False

    def fail(self, status: SessionStatus, error: str) -> None:
        """Decide the outcome now; the first cause wins (a later cancel changes nothing)."""
        if self.status is None:
            self.status, self.error = status, error

    def cancel(self, reason: str = "task cancelled") -> None:
        """End this session ``cancelled`` (for ``reason``) unless already decided."""
        self.fail(SessionStatus.CANCELLED, reason)

    @property
    def cancelled(self) -> bool:
        """Whether the session ends cancelled."""
        return self.status is SessionStatus.CANCELLED


class SessionRunner:
    """Runs the stages of sessions in one runtime, emitting their lifecycle records."""

    def __init__(
        self,
        settings: NodeSettings,
        runtime: Runtime,
        emit: Emit,
        calls_of: CallsOf,
        executable: Callable[[str], Path] | None = None,
        register: Register | None = None,
        forget: Forget | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self._emit = emit
        self._calls_of = calls_of
        self._register = register
        self._forget = forget
        cache_dir = StatePaths().cache_dir
        self._executable = executable or (lambda name: resolve_executable(name, cache_dir))
        #: Set by the node from the control topic; stamped into sessions created from then on.
        self.policy_version = 0

    def new(self, task: Task, sample: int) -> Session:
        """A queued session for sample ``sample`` of ``task``."""
        return Session(
            task, sample, new_session_id(task.task_id, sample), policy_version=self.policy_version
        )

    def _launch(self, session: Session) -> HarnessLaunch:
        task = session.task
        options = harness_options(task)
        base_url = session.base_url or self.settings.base_url
        if self.runtime.walls:
            # Behind the wall the interceptor is on loopback at its port, relayed from outside.
            base_url, session.reach = walled_url(base_url)
        ctx = HarnessContext(
            base_url=base_url,
            session=session.session_id,
            model=options.get("model", self.settings.model),
            instruction=task.instruction,
            options=options,
        )
        launch = preset(task.harness).launch(ctx, self._executable(task.harness))
        # The preset's variables win: a task's env must not replace the session id (API key).
        return HarnessLaunch(launch.argv, task.env | launch.env, launch.home_files)

    async def init(self, session: Session) -> bool:
        """Runtime up, workspace, setup, git baseline, within the init timeout; True if ready."""
        session.stage = Stage.INIT
        task = session.task
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + task.init_timeout_s
        step = "registering the session with the interceptor"
        try:
            if self._register is not None:
                # Before the launch: a pool's reply names the worker the harness must call.
                context = task.metadata.get(CONTEXT_METADATA)
                session.registered = True  # even if its reply is lost: forgotten at the end
                session.base_url = await self._register(session.session_id, context)
            step = "preparing the harness"
            # Before the runtime: an unknown harness or a missing option fails in no time.
            session.launch = self._launch(session)
            step = "starting the runtime and materializing the workspace"
            async with asyncio.timeout_at(deadline):
                session.sandbox = await self.runtime.start(session.session_id, task.image)
                await materialize(task.workspace, session.sandbox.work)
            step = "running the setup commands"
            await run_setup(self.runtime, session.sandbox, task.setup, task.env, deadline)
            step = "committing the workspace baseline"
            async with asyncio.timeout_at(deadline):
                session.baseline = await baseline(session.sandbox.work)
        except TimeoutError:
            session.fail(
                SessionStatus.FAILED,
                f"init timed out after {task.init_timeout_s:g}s while {step}",
            )
        except (RollstreamError, OSError) as exc:
            session.fail(SessionStatus.FAILED, f"init failed while {step}: {exc}")
        session.timings["init_s"] = loop.time() - began
        if session.status is None:
            session.stage = Stage.READY
            return True
        return False

    async def run(self, session: Session) -> None:
        """Emit SessionStarted, run the harness until it exits or its agent timeout."""
        assert session.sandbox is not None and session.launch is not None, "init first"
        session.stage = Stage.RUN
        await self._emit_started(session)
        began = asyncio.get_running_loop().time()
        try:
            session.result = await self.runtime.execute(
                session.sandbox,
                session.launch,
                session.task.agent_timeout_s,
                session.sandbox.logs / "harness",
                Wall(session.reach),
            )
        except (RollstreamError, OSError) as exc:
            # It could not even start (no executable, E2BIG), or its container's engine failed
            # under it: a crash, so ``failed``.
            log.warning("session %s: harness did not run: %s", session.session_id, exc)
            session.fail(SessionStatus.FAILED, f"harness could not run to its end: {exc}")
        finally:
            session.timings["run_s"] = asyncio.get_running_loop().time() - began

    async def post(self, session: Session) -> SessionEnded:
        """Outcome, artifacts (diff, output tails), call count; emit and return SessionEnded."""
        session.stage = Stage.POST
        # No SessionStarted yet: the harness never ran, so no call can carry this session id.
        launched = session.started is not None
        if not launched:
            await self._emit_started(session)
        status, exit_code, error = self._outcome(session)
        notes = [error] if error else []
        artifacts: list[Artifact] = []
        sandbox = session.sandbox
        if sandbox is not None and session.baseline is not None:
            try:
                artifacts.append(
                    await diff(
                        self.runtime,
                        sandbox,
                        session.baseline,
                        self.settings.diff_max_bytes,
                        session.task.init_timeout_s,
                    )
                )
            except (RollstreamError, OSError) as exc:
                notes.append(f"workspace diff unavailable: {exc}")
        if sandbox is not None:
            for stream in ("stdout", "stderr"):
                path = sandbox.logs / "harness" / stream
                try:
                    artifacts.append(_tail_artifact(stream, path, self.settings.log_tail_bytes))
                except FileNotFoundError:
                    pass  # the harness never started
                except (RollstreamError, OSError) as exc:
                    notes.append(f"harness {stream} unavailable: {exc}")
        try:
            call_count = await self._calls_of(session.session_id) if launched else 0
        except Exception as exc:
            # The session must still end; 0 lets the reconstructor close it, the error says why.
            log.warning("session %s: call count unavailable: %s", session.session_id, exc)
            call_count = 0
            notes.append(f"call count unavailable: {exc}")
        ended = SessionEnded(
            **self._identity(session),
            status=status,
            exit_code=exit_code,
            call_count=call_count,
            ended_at=datetime.now(UTC),
            error="; ".join(notes) or None,
            artifacts=artifacts,
        )
        session.ended = ended
        await self._emit(ended)
        await self._forget_session(session)
        return ended

    async def teardown(self, session: Session) -> None:
        """Forget a session still registered (withdrawn), remove its sandbox (unless kept)."""
        await self._forget_session(session)
        if session.sandbox is not None:
            await self.runtime.stop(session.sandbox)
        session.stage = Stage.ENDED

    async def run_one(self, task: Task, sample: int) -> SessionEnded:
        """All stages of one session in sequence (no pools): its SessionEnded."""
        session = self.new(task, sample)
        try:
            if await self.init(session):
                await self.run(session)
            return await self.post(session)
        finally:
            await self.teardown(session)

    @staticmethod
    def _outcome(session: Session) -> tuple[SessionStatus, int | None, str | None]:
        result = session.result
        exit_code = result.exit_code if result is not None else None
        if session.status is not None:
            return session.status, exit_code, session.error
        if result is None:
            return SessionStatus.FAILED, None, "the harness did not run"
        if result.timed_out:
            timeout = session.task.agent_timeout_s
            return SessionStatus.TIMEOUT, None, f"killed at the agent timeout of {timeout:g}s"
        if result.exit_code == 0:
            return SessionStatus.COMPLETED, 0, None
        code = result.exit_code
        why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
        return SessionStatus.FAILED, code, f"harness failed ({why})"

    def _identity(self, session: Session) -> dict[str, str | int]:
        return {
            "session_id": session.session_id,
            "task_id": session.task.task_id,
            "group_id": session.task.group_id,
            "sample_index": session.sample,
            "harness": session.task.harness,
            "policy_version": session.policy_version,
        }

    async def _forget_session(self, session: Session) -> None:
        if session.registered and self._forget is not None:
            session.registered = False
            await self._forget(session.session_id)

    async def _emit_started(self, session: Session) -> None:
        metadata = session.task.metadata | {"runtime": self.runtime.name}
        if "init_s" in session.timings:
            metadata["init_s"] = f"{session.timings['init_s']:.3f}"
        session.started = SessionStarted(
            **self._identity(session),
            node_id=self.settings.node_id,
            started_at=datetime.now(UTC),
            metadata=metadata,
            task=session.task,
        )
        await self._emit(session.started)


def _tail_artifact(name: str, path: Path, max_bytes: int) -> Artifact:
    """The last ``max_bytes`` of a log file, starting at a line where possible."""
    content, size = read_tail(path, max_bytes)
    truncated = size > len(content)
    if truncated and b"\n" in content:
        content = content[content.index(b"\n") + 1 :]
    return Artifact(name=name, content=content, truncated=truncated, original_size=size)
