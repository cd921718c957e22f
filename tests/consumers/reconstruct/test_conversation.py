"""The conversation a trajectory keeps: the last answered call's messages and its text."""

from __future__ import annotations

from datetime import UTC, datetime

from rollstream.consumers.reconstruct.buffers import SessionBuffer, build_trajectory
from rollstream.consumers.reconstruct.conversation import conversation, message_text
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.schemas import (
    ApiKind,
    Artifact,
    CallError,
    CallRecord,
    CallStatus,
    CallTimings,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    Task,
    compress_json,
    decompress_json,
)
from rollstream.schemas.trajectories import TrajectoryStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def call(seq: int, user: str, answer: str, status: CallStatus = CallStatus.OK) -> CallRecord:
    """A Chat call asking ``user`` and answered with ``answer`` (no tokens needed here)."""
    return CallRecord(
        call_id=f"c{seq}",
        session_id="s",
        seq=seq,
        api=ApiKind.CHAT_COMPLETIONS,
        model="m",
        upstream_request=compress_json({"messages": [{"role": "user", "content": user}]}),
        response=compress_json({"choices": [{"message": {"role": "assistant", "content": answer}}]})
        if status is CallStatus.OK
        else None,
        timings=CallTimings(started_at=T0),
        status=status,
        error=None if status is CallStatus.OK else CallError(type="x", message="boom"),
    )


def test_the_last_answered_call_gives_messages_and_final_text() -> None:
    calls = [
        call(1, "second", "two"),
        call(0, "first", "one"),
        call(2, "third", "", CallStatus.ERROR),
    ]
    blob, text = conversation(calls)
    assert text == "two"
    assert blob is not None
    assert decompress_json(blob) == [
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "two"},
    ]


def test_no_answered_call_keeps_nothing() -> None:
    assert conversation([call(0, "q", "", CallStatus.ERROR)]) == (None, "")
    assert conversation([]) == (None, "")


def test_text_parts_are_joined_and_other_parts_ignored() -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url"},
            {"type": "text", "text": "b"},
        ],
    }
    assert message_text(message) == "ab"
    assert message_text({"role": "assistant", "content": None}) == ""


def test_the_trajectory_carries_the_task_the_artifacts_and_the_conversation() -> None:
    task = Task(task_id="t", group_id="g", instruction="do", harness="pi", submitted_at=T0)
    buffer = SessionBuffer("s", first_offset=0, last_offset=0, last_time=0.0)
    buffer.started = SessionStarted(
        session_id="s", task_id="t", group_id="g", harness="pi", started_at=T0, task=task
    )
    diff = Artifact(name="diff", content=b"+x\n")
    buffer.ended = SessionEnded(
        session_id="s",
        task_id="t",
        group_id="g",
        harness="pi",
        status=SessionStatus.COMPLETED,
        call_count=1,
        ended_at=T0,
        artifacts=[diff],
    )
    buffer.calls["c0"] = call(0, "q", "done")
    trajectory = build_trajectory(
        buffer, TrajectoryStatus.COMPLETE, get_strategy("per_call"), "per_call"
    )
    assert trajectory.task == task
    assert trajectory.artifact("diff") == diff and trajectory.artifact("nope") is None
    assert trajectory.final_text == "done"
    assert trajectory.decoded_messages()[-1] == {"role": "assistant", "content": "done"}


def test_the_last_call_may_be_delta_encoded_against_an_earlier_one() -> None:
    from rollstream.schemas.requests import best_delta

    first = call(0, "first", "one")
    second = call(1, "first", "two")
    whole = {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "again"},
        ]
    }
    base = {"messages": [{"role": "user", "content": "first"}]}
    rest, spec = best_delta(whole, [("c0", base)])
    assert spec is not None and spec.shared_items == 1
    second = second.model_copy(
        update={"upstream_request": compress_json(rest), "upstream_request_base": spec}
    )
    blob, text = conversation([first, second])
    assert text == "two" and blob is not None
    assert decompress_json(blob) == [*whole["messages"], {"role": "assistant", "content": "two"}]
