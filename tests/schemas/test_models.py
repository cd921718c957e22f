"""Model rules that the Avro schema alone cannot express."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollstream.schemas import (
    CallStatus,
    Logprobs,
    LossMask,
    Segment,
    TokenIds,
    Workspace,
    WorkspaceKind,
)
from tests.schemas.samples import CALL, TASK


def test_logprobs_must_match_completion_tokens() -> None:
    with pytest.raises(ValidationError, match="2 logprobs for 3 completion tokens"):
        CALL.model_validate(
            CALL.model_dump() | {"completion_logprobs": Logprobs.from_list([-1.0, -2.0])}
        )


def test_error_status_needs_an_error() -> None:
    with pytest.raises(ValidationError, match="needs an error"):
        CALL.model_validate(CALL.model_dump() | {"status": CallStatus.ERROR, "error": None})


def test_records_are_frozen_and_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        CALL.seq = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        CALL.model_validate(CALL.model_dump() | {"surprise": 1})


def test_naive_datetimes_are_rejected() -> None:
    from datetime import datetime

    with pytest.raises(ValidationError, match="timezone"):
        TASK.model_validate(TASK.model_dump() | {"submitted_at": datetime(2026, 1, 1)})


def test_segment_arrays_must_align() -> None:
    with pytest.raises(ValidationError, match="differ in length"):
        Segment(
            input_ids=TokenIds.from_list([1, 2]),
            loss_mask=LossMask.from_list([1]),
            logprobs=Logprobs.from_list([0.0, 0.0]),
            call_ids=["c"],
        )


def test_segment_counts_trainable_tokens() -> None:
    segment = Segment(
        input_ids=TokenIds.from_list([1, 2, 3]),
        loss_mask=LossMask.from_list([0, 1, 1]),
        logprobs=Logprobs.from_list([0.0, -1.0, -1.0]),
        call_ids=["c"],
    )
    assert segment.trainable_tokens == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": WorkspaceKind.GIT, "path": "/repo"}, "needs a commit"),
        ({"kind": WorkspaceKind.DIRECTORY}, "needs a path"),
        ({"kind": WorkspaceKind.EMPTY, "files": {"a": "b"}}, "only for an inline"),
    ],
)
def test_workspace_fields_match_kind(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Workspace(**kwargs)


def test_task_needs_at_least_one_sample() -> None:
    with pytest.raises(ValidationError):
        TASK.model_validate(TASK.model_dump() | {"samples": 0})


def test_json_round_trip_keeps_blobs() -> None:
    assert type(CALL).model_validate_json(CALL.model_dump_json()) == CALL
