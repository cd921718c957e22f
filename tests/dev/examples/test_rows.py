"""The example trainer's rows: only tokens with a recorded logprob take part in the update."""

from __future__ import annotations

from rollstream.consumers.trainer import to_batch
from rollstream.dev.examples.grpo_trainer import rows_of
from rollstream.schemas import Logprobs, LossMask, Segment, TokenIds
from tests.consumers.trainer.records import scored


def test_a_sampled_token_without_its_logprob_is_left_out_of_the_update() -> None:
    record = scored("a", 0, samples=1)
    segment = Segment(
        input_ids=TokenIds.from_list([1, 2, 3, 4]),
        loss_mask=LossMask.from_list([0, 1, 1, 1]),
        logprobs=Logprobs.from_list([0.0, -0.5, float("nan"), -1.0]),
        call_ids=["c"],
    )
    trajectory = record.trajectory.model_copy(update={"segments": [segment]})
    [row] = rows_of(to_batch([record.model_copy(update={"trajectory": trajectory})]))
    assert row.mask.tolist() == [False, True, False, True]
    assert row.old_logprobs.tolist() == [0.0, -0.5, 0.0, -1.0]
