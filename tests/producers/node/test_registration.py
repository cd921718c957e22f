"""A session is registered on the interceptor before its launch is built, forgotten once over."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rollstream.producers.node.session import CONTEXT_METADATA, SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.runtimes import make_runtime
from rollstream.schemas.sessions import SessionEnded, SessionStarted, SessionStatus
from tests.producers.node.helpers import Sink, command_task


@dataclass
class Interceptor:
    """Records registrations beside the sink's records, in one timeline."""

    sink: Sink
    url: str | None = None
    events: list[tuple[str, str]] = field(default_factory=list)

    async def register(self, session: str, context: str | None) -> str | None:
        self.events.append(("register", f"{session} {context}"))
        return self.url

    async def forget(self, session: str) -> None:
        self.events.append(("forget", session))

    async def emit(self, record: SessionStarted | SessionEnded) -> None:
        self.events.append((type(record).__name__, record.session_id))
        await self.sink.emit(record)


def _runner(tmp_path: Path, interceptor: Interceptor) -> SessionRunner:
    node = NodeSettings(work_root=tmp_path / "sessions", base_url="http://127.0.0.1:9")
    return SessionRunner(
        node,
        make_runtime(node),
        interceptor.emit,
        interceptor.sink.calls_of,
        register=interceptor.register,
        forget=interceptor.forget,
    )


def _stdout(ended: SessionEnded) -> bytes:
    return next(a.content for a in ended.artifacts if a.name == "stdout")


async def test_the_harness_calls_the_url_its_registration_named(tmp_path: Path) -> None:
    interceptor = Interceptor(Sink(), url="http://127.0.0.1:4242")
    runner = _runner(tmp_path, interceptor)
    task = command_task('echo "$ROLLSTREAM_BASE_URL"', metadata={CONTEXT_METADATA: "exact"})
    ended = await runner.run_one(task, 0)
    assert ended.status is SessionStatus.COMPLETED
    assert _stdout(ended) == b"http://127.0.0.1:4242\n"
    session = ended.session_id
    assert interceptor.events == [
        ("register", f"{session} exact"),
        ("SessionStarted", session),
        ("SessionEnded", session),
        ("forget", session),
    ]


async def test_without_a_worker_url_the_node_s_base_url_is_used(tmp_path: Path) -> None:
    interceptor = Interceptor(Sink())
    ended = await _runner(tmp_path, interceptor).run_one(
        command_task('echo "$ROLLSTREAM_BASE_URL"'), 0
    )
    assert _stdout(ended) == b"http://127.0.0.1:9\n"
    assert [e[0] for e in interceptor.events] == [
        "register",
        "SessionStarted",
        "SessionEnded",
        "forget",
    ]


async def test_a_session_that_never_ran_is_forgotten_too(tmp_path: Path) -> None:
    interceptor = Interceptor(Sink(), url="http://127.0.0.1:4242")
    runner = _runner(tmp_path, interceptor)
    failed = await runner.run_one(command_task("true", setup=["exit 3"]), 0)
    assert failed.status is SessionStatus.FAILED
    assert [e[0] for e in interceptor.events][-1] == "forget"
    # Withdrawn after init (its task's partition went to another node): no records at all,
    # but the registration made at init is taken back at teardown.
    interceptor.events.clear()
    session = runner.new(command_task("true"), 1)
    assert await runner.init(session)
    session.withdrawn = True
    session.cancel("withdrawn before its harness started")
    await runner.teardown(session)
    await runner.teardown(session)  # once only
    assert interceptor.events == [
        ("register", f"{session.session_id} None"),
        ("forget", session.session_id),
    ]
