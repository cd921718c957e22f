"""Segments on the wire as deltas of earlier ones: lossless, and sized by new tokens, not context.

The oracle of the round trips is the trajectory itself; the size bound is the tokens each segment
adds to the one before (9 bytes a token), computed from how the segments were made.
"""

from __future__ import annotations

import io
import random
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.errors import SerializationError
from rollstream.schemas import AvroSerializer, KnownSchema, SchemaRegistry
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds
from rollstream.schemas.registry import current_schemas, history_schemas
from rollstream.schemas.segment_deltas import from_wire, to_wire
from rollstream.schemas.serializer import MAGIC
from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.trajectories import (
    Scored,
    Segment,
    Trajectory,
    TrajectoryStats,
    TrajectoryStatus,
)

SERIALIZER = AvroSerializer()


def _segment(context: list[int], completion: list[int], parent: int | None = None) -> Segment:
    return Segment(
        input_ids=TokenIds.from_list([*context, *completion]),
        loss_mask=LossMask.from_list([0] * len(context) + [1] * len(completion)),
        logprobs=Logprobs.from_list([0.0] * len(context) + [-0.5] * len(completion)),
        call_ids=[f"c{len(context)}"],
        parent=parent,
    )


def _trajectory(segments: list[Segment]) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        session_id="s",
        task_id="task",
        group_id="g",
        strategy="prefix_merge",
        status=TrajectoryStatus.COMPLETE,
        session_status=SessionStatus.COMPLETED,
        segments=segments,
        stats=TrajectoryStats(calls=len(segments)),
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
    )


def _drifting(calls: int, rng: random.Random) -> tuple[list[Segment], int]:
    """A session whose every call drifts: each segment repeats the last context but its tail.

    Returns the segments and the tokens each adds to its predecessor's (what a delta carries).
    """
    context = [rng.randrange(1000) for _ in range(2000)]
    segments, added = [], 0
    for _ in range(calls):
        # The harness re-rendered the last answer: the context keeps all but its last 8 tokens.
        kept = context[:-8]
        new = [rng.randrange(1000, 2000) for _ in range(40)]
        completion = [rng.randrange(2000, 3000) for _ in range(30)]
        segments.append(_segment([*kept, *new], completion))
        added += len(new) + len(completion)
        context = [*kept, *new, *completion]
    return segments, added


def test_a_drifting_session_costs_its_new_tokens_not_its_contexts() -> None:
    segments, added = _drifting(200, random.Random(1))
    trajectory = _trajectory(segments)
    whole = sum(9 * len(s.input_ids) for s in segments)
    value = SERIALIZER.encode(trajectory)
    assert SERIALIZER.decode(value) == trajectory
    # Each delta repeats the 8 re-rendered tokens and carries a few bytes of framing.
    assert len(value) < 2000 * 9 + 9 * added + 200 * (8 * 9 + 64)
    assert len(value) < whole / 20


def test_shared_ids_that_were_sampled_are_not_taken_from_the_base() -> None:
    """A retry's segment starts with the earlier completion's ids, sampled again (mask 1)."""
    first = _segment(list(range(100)), [500, 501, 502])
    again = Segment(
        input_ids=TokenIds.from_list([*range(50), 500, 501, 7]),
        loss_mask=LossMask.from_list([0] * 20 + [1] * 33),
        logprobs=Logprobs.from_list([0.0] * 20 + [-1.0] * 33),
        call_ids=["retry"],
    )
    wire = to_wire([first.model_dump(), again.model_dump()])
    assert wire[1]["base"] == 0 and wire[1]["shared"] == 20
    assert _round_trip([first, again]) == [first, again]


def test_a_context_token_with_a_logprob_ends_what_is_shared() -> None:
    first = _segment(list(range(100)), [5])
    odd = Segment(
        input_ids=TokenIds.from_list(list(range(90))),
        loss_mask=LossMask.from_list([0] * 90),
        logprobs=Logprobs.from_list([0.0] * 30 + [-0.0] + [0.0] * 59),  # -0.0 is not 0 bytes
        call_ids=["x"],
    )
    wire = to_wire([first.model_dump(), odd.model_dump()])
    assert wire[1]["shared"] == 30
    assert _round_trip([first, odd]) == [first, odd]


def _round_trip(segments: list[Segment]) -> list[Segment]:
    decoded = SERIALIZER.decode_as(SERIALIZER.encode(_trajectory(segments)), Trajectory)
    return decoded.segments


@st.composite
def _sessions(draw: Any) -> list[Segment]:
    pool = draw(st.lists(st.integers(0, 5), min_size=40, max_size=80))
    segments: list[Segment] = []
    for _ in range(draw(st.integers(1, 6))):
        cut = draw(st.integers(0, len(pool)))
        head = pool[:cut]
        tail = draw(st.lists(st.integers(0, 5), max_size=20))
        mask = [0] * len(head) + draw(
            st.lists(st.integers(0, 1), min_size=len(tail), max_size=len(tail))
        )
        parent = draw(st.none() | st.integers(0, max(0, len(segments) - 1)))
        segments.append(
            Segment(
                input_ids=TokenIds.from_list([*head, *tail]),
                loss_mask=LossMask.from_list(mask),
                logprobs=Logprobs.from_list([-0.25 * m for m in mask]),
                call_ids=["c"],
                parent=parent if segments else None,
            )
        )
    return segments


@settings(max_examples=200, deadline=None)
@given(_sessions())
def test_any_segments_come_back_as_they_went(segments: list[Segment]) -> None:
    assert _round_trip(segments) == segments
    scored = Scored(
        trajectory=_trajectory(segments),
        reward=1.0,
        evaluator="e",
        scored_at=datetime(2026, 12, 6, tzinfo=UTC),
    )
    assert SERIALIZER.decode(SERIALIZER.encode(scored)) == scored


def test_a_delta_that_names_no_earlier_segment_is_refused() -> None:
    wire = [{"input_ids": b"", "loss_mask": b"", "logprobs": b"", "base": 0, "shared": 0}]
    with pytest.raises(SerializationError, match="not earlier"):
        from_wire(wire)
    first = {"input_ids": bytes(8), "loss_mask": bytes(2), "logprobs": bytes(8)}
    longer = {"input_ids": b"", "loss_mask": b"", "logprobs": b"", "base": 0, "shared": 3}
    with pytest.raises(SerializationError, match="shares 3 ids of segment 0, which has 2"):
        from_wire([first, longer])


def test_a_reader_of_whole_segments_refuses_a_record_of_deltas() -> None:
    """An older trainer must fail on the new records, not read a delta as a whole segment."""
    current = current_schemas()["rollstream.Trajectory"]
    older = [  # the versions before segments went out as deltas
        s
        for s in history_schemas()
        if s.name == "rollstream.Trajectory"
        and s.fingerprint != current.fingerprint
        and any(f["name"] == "segments" for f in s.schema["fields"])
    ]
    assert older
    segments, _ = _drifting(3, random.Random(2))
    value = SERIALIZER.encode(_trajectory(segments))
    for schema in older:
        old = AvroSerializer(
            SchemaRegistry(readers=[(schema, Trajectory)], writers=[current, *history_schemas()])
        )
        with pytest.raises(SerializationError):
            old.decode_datum(value)


def test_a_record_of_whole_segments_still_reads() -> None:
    """Records written before deltas (``segments``) read through the field's alias."""
    segments, _ = _drifting(3, random.Random(3))
    trajectory = _trajectory(segments)
    schema: KnownSchema = next(
        s
        for s in history_schemas()
        if s.name == "rollstream.Trajectory"
        and any(f["name"] == "segments" for f in s.schema["fields"])
        and any(f["name"] == "final_text" for f in s.schema["fields"])
    )
    datum = trajectory.model_dump(mode="python")
    buf = io.BytesIO()
    buf.write(MAGIC + schema.fingerprint)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema.schema, named_schemas={}), datum)
    assert SERIALIZER.decode_as(buf.getvalue(), Trajectory) == trajectory
