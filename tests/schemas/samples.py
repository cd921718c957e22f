"""One fixed, fully populated instance of every record type (the golden-bytes inputs)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from rollstream.schemas import (
    RECORD_BUDGET_BYTES,
    ApiKind,
    Artifact,
    AvroRecord,
    CallError,
    CallRecord,
    CallStatus,
    CallTimings,
    Compaction,
    ContextInfo,
    ContextMode,
    DeadLetter,
    EvaluatorSpec,
    Logprobs,
    LossMask,
    PolicyVersion,
    PromptTokens,
    Scored,
    Segment,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    Task,
    TokenIds,
    Trajectory,
    TrajectoryStats,
    TrajectoryStatus,
    Workspace,
    WorkspaceKind,
    compress_json,
)
from rollstream.schemas.calls import LeftOut
from rollstream.schemas.requests import RequestBase

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
T1 = datetime(2026, 11, 30, 12, 0, 1, 654321, tzinfo=UTC)

CALL = CallRecord(
    call_id="call-2",
    session_id="sess-1",
    seq=2,
    api=ApiKind.ANTHROPIC_MESSAGES,
    model="qwen3-coder",
    policy_version=7,
    stream=True,
    harness_request=compress_json({"model": "claude-sonnet-4-5", "max_tokens": 64}),
    upstream_request=compress_json({"model": "qwen3-coder", "messages": []}),
    response=compress_json({"choices": [{"finish_reason": "length"}]}),
    prompt=PromptTokens(base_call_id="call-1", shared_len=40, suffix=TokenIds.from_list([5, 6, 7])),
    completion_token_ids=TokenIds.from_list([11, 0, 4294967295]),
    completion_logprobs=Logprobs.from_list([-0.5, -0.0, -12.25]),
    finish_reason="length",
    timings=CallTimings(started_at=T0, first_token_at=T0, ended_at=T1),
    status=CallStatus.ERROR,
    error=CallError(
        type="upstream_http", message="502 Bad Gateway", http_status=502, retriable=True
    ),
    harness_request_base=RequestBase(
        base_call_id="call-1", list_key="messages", shared_items=4, unchanged=["system", "tools"]
    ),
    upstream_request_base=RequestBase(base_call_id="call-1", unchanged=["model"]),
    context=ContextInfo(mode=ContextMode.EXACT, appended_end_of_turn=True),
    left_out=[LeftOut(part="response", reason="record_too_large", size=20, sha256="ab" * 32)],
    adjusted=["max_tokens 32000 above the served context of 8192 tokens: sent as 8192"],
    repeats="call-1",
    transport="websocket",
)

TASK = Task(
    task_id="task-1",
    group_id="group-1",
    instruction="Fix the failing test.",
    samples=4,
    harness="pi",
    workspace=Workspace(kind=WorkspaceKind.INLINE, files={"main.py": "print(1)\n"}),
    setup=["pip install -e ."],
    evaluator=EvaluatorSpec(kind="command", config={"command": "pytest -q", "timeout": "60"}),
    init_timeout_s=120.0,
    agent_timeout_s=600.0,
    env={"PYTHONHASHSEED": "0"},
    image="rollstream-base:trixie",
    priority=2,
    metadata={"suite": "demo"},
    submitted_at=T0,
)

STARTED = SessionStarted(
    session_id="sess-1",
    task_id="task-1",
    group_id="group-1",
    sample_index=3,
    harness="claude-code",
    policy_version=7,
    node_id="node-a",
    started_at=T0,
    metadata={"image": "python:3.12"},
    task=TASK,
)

ENDED = SessionEnded(
    session_id="sess-1",
    task_id="task-1",
    group_id="group-1",
    sample_index=3,
    harness="claude-code",
    policy_version=7,
    status=SessionStatus.TIMEOUT,
    exit_code=124,
    call_count=5,
    ended_at=T1,
    error="agent timeout after 1800s",
    artifacts=[
        Artifact(name="diff", content=b"--- a\n+++ b\n", truncated=True, original_size=99999)
    ],
)

TRAJECTORY = Trajectory(
    trajectory_id="traj-1",
    session_id="sess-1",
    task_id="task-1",
    group_id="group-1",
    sample_index=3,
    harness="claude-code",
    strategy="prefix_merge",
    status=TrajectoryStatus.INCOMPLETE,
    session_status=SessionStatus.COMPLETED,
    segments=[
        Segment(
            input_ids=TokenIds.from_list([1, 2, 3, 4]),
            loss_mask=LossMask.from_list([0, 0, 1, 1]),
            logprobs=Logprobs.from_list([0.0, 0.0, -0.25, -1.5]),
            call_ids=["call-1"],
        ),
        Segment(
            input_ids=TokenIds.from_list([1, 9]),
            loss_mask=LossMask.from_list([0, 1]),
            logprobs=Logprobs.from_list([0.0, -2.0]),
            call_ids=["call-2", "call-3"],
            parent=0,
        ),
    ],
    stats=TrajectoryStats(
        calls=5,
        calls_reported=5,
        calls_used=3,
        merges=1,
        breaks=1,
        break_reasons={"prompt_diverged": 1},
        failed_calls=1,
        duplicate_calls=0,
        superseded_calls=1,
        calls_without_tokens=0,
        missing_token_reasons={},
        invariant_relaxed=False,
        notes=["one call missing"],
        compactions=[Compaction(summary_call_id="call-1", resumed_call_id="call-2")],
    ),
    policy_versions=[6, 7],
    created_at=T1,
    task=TASK,
    artifacts=[Artifact(name="diff", content=b"+x\n", original_size=3)],
    messages=compress_json(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    ),
    final_text="ok",
)

SCORED = Scored(
    trajectory=TRAJECTORY,
    reward=0.5,
    evaluator="command",
    details={"exit_code": "1", "tail": "FAILED test_x"},
    error=None,
    scored_at=T1,
)

DEAD_LETTER = DeadLetter(
    source_topic="rollstream.events",
    partition=2,
    offset=12345,
    key=b"sess-1",
    value=b"\x00\x01garbage",
    consumer_group="reconstructor",
    error_type="SerializationError",
    error_message="not an Avro single-object record",
    retriable=False,
    attempts=1,
    failed_at=T1,
)

POLICY = PolicyVersion(version=8, published_at=T1, publisher="trainer-a", metadata={"step": "12"})

SAMPLES: dict[str, AvroRecord] = {
    r.avro_name: r for r in (CALL, STARTED, ENDED, TRAJECTORY, SCORED, TASK, DEAD_LETTER, POLICY)
}


def oversized_segment(over: int = 16 * 1024) -> Segment:
    """A segment of random context ids whose record alone is ``over`` bytes past the budget."""
    tokens = (RECORD_BUDGET_BYTES + over) // 9  # 9 bytes a token: id, mask, logprob
    return Segment(
        input_ids=TokenIds(os.urandom(4 * tokens)),
        loss_mask=LossMask(bytes(tokens)),
        logprobs=Logprobs(bytes(4 * tokens)),
        call_ids=["c"],
    )
