"""Outputs over the record budget: what is left out to fit, how it is flagged, what is refused."""

from __future__ import annotations

import os

import pytest

from rollstream.errors import RecordTooLargeError
from rollstream.processing.oversized import (
    TRAJECTORY_BUDGET_BYTES,
    encode_scored,
    encode_trajectory,
)
from rollstream.schemas import RECORD_BUDGET_BYTES, Artifact, AvroSerializer, record_size
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds
from rollstream.schemas.trajectories import Scored, Segment, Trajectory
from tests.schemas.samples import SCORED, TRAJECTORY

SERIALIZER = AvroSerializer()
KEY = b"group-1"


def _segment(tokens: int) -> Segment:
    return Segment(
        input_ids=TokenIds(os.urandom(4 * tokens)),
        loss_mask=LossMask(bytes(tokens)),
        logprobs=Logprobs(bytes(4 * tokens)),
        call_ids=["call-1"],
    )


def _size(trajectory: Trajectory) -> int:
    return record_size(KEY, SERIALIZER.encode(trajectory))


def test_the_reconstructor_keeps_room_for_the_scored_wrapping() -> None:
    assert RECORD_BUDGET_BYTES - TRAJECTORY_BUDGET_BYTES >= 1024 * 1024


def test_a_trajectory_within_the_budget_is_recorded_whole() -> None:
    encoded = encode_trajectory(SERIALIZER, KEY, TRAJECTORY, budget=_size(TRAJECTORY))
    assert encoded.left_out == [] and encoded.value == SERIALIZER.encode(TRAJECTORY)


def test_a_trajectory_over_the_budget_goes_without_its_messages_and_says_so() -> None:
    chatty = TRAJECTORY.model_copy(update={"messages": os.urandom(50_000)})
    budget = _size(chatty) - 1
    encoded = encode_trajectory(SERIALIZER, KEY, chatty, budget=budget)
    assert encoded.left_out == ["messages"]
    assert record_size(KEY, encoded.value) <= budget
    slim = SERIALIZER.decode_as(encoded.value, Trajectory)
    assert slim.messages is None
    # What training and scoring read is all there.
    assert slim.segments == chatty.segments and slim.final_text == chatty.final_text
    assert slim.artifacts == chatty.artifacts and slim.task == chatty.task
    [note] = [n for n in slim.stats.notes if n.startswith("oversized")]
    assert "messages left out" in note and str(budget) in note
    assert slim.stats.notes[: len(chatty.stats.notes)] == chatty.stats.notes


def test_a_trajectory_whose_segments_alone_are_over_is_refused_with_its_sizes() -> None:
    bulky = TRAJECTORY.model_copy(
        update={"segments": [_segment(20_000)], "messages": os.urandom(1_000)}
    )
    with pytest.raises(RecordTooLargeError, match="without its messages") as caught:
        encode_trajectory(SERIALIZER, KEY, bulky, budget=100_000)
    assert caught.value.limit == 100_000 and caught.value.size > 100_000
    assert not caught.value.retriable


def test_a_scored_record_leaves_out_messages_then_details_then_artifacts() -> None:
    trajectory = TRAJECTORY.model_copy(
        update={
            "messages": os.urandom(30_000),
            "artifacts": [Artifact(name="diff", content=os.urandom(30_000))],
        }
    )
    scored = SCORED.model_copy(update={"trajectory": trajectory, "details": {"tail": "x" * 30_000}})
    whole = record_size(KEY, SERIALIZER.encode(scored))
    expected = {
        whole - 20_000: ["messages"],
        whole - 50_000: ["messages", "details"],
        whole - 80_000: ["messages", "details", "artifacts"],
    }
    for budget, left_out in expected.items():
        encoded = encode_scored(SERIALIZER, KEY, scored, budget=budget)
        assert encoded.left_out == left_out
        assert record_size(KEY, encoded.value) <= budget
        slim = SERIALIZER.decode_as(encoded.value, Scored)
        assert slim.reward == scored.reward and slim.evaluator == scored.evaluator
        assert slim.trajectory.segments == trajectory.segments
        assert slim.details["oversized"].startswith(f"oversized: {', '.join(left_out)} left out")
        assert ("tail" in slim.details) is ("details" not in left_out)
        assert bool(slim.trajectory.artifacts) is ("artifacts" not in left_out)
        assert slim.trajectory.stats.notes[-1] == slim.details["oversized"]
    with pytest.raises(RecordTooLargeError, match="without its messages, details, artifacts"):
        encode_scored(SERIALIZER, KEY, scored, budget=whole - 100_000)
