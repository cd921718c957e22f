"""to_batch: GRPO advantages, masks, padding and packing of scored trajectories."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from rollstream.consumers.reconstruct.strategies import StrategyContext, prefix_merge
from rollstream.consumers.trainer import (
    Batch,
    Group,
    RecordBatch,
    TorchUnavailableError,
    group_advantages,
    to_batch,
)
from rollstream.consumers.trainer.batch import Layout
from rollstream.errors import ConfigurationError
from rollstream.schemas import Logprobs, LossMask, Scored, Segment, TokenIds
from tests.consumers.reconstruct.sessions import build_session
from tests.consumers.trainer.records import group_of, scored

# Every sample trajectory has two segments:
#   ids [1, 2, 3, 4], loss mask [0, 0, 1, 1], logprobs [0, 0, -0.25, -1.5]
#   ids [1, 9],       loss mask [0, 1],       logprobs [0, -2]
EPS = 1e-6


def test_advantages_are_group_normalised_and_none_rewards_are_left_out() -> None:
    records = group_of("a", 4, rewards=[1.0, 0.0, 0.5, None])
    std = np.sqrt(((0.5**2) * 2 + 0.0) / 3)  # population std of 1, 0, 0.5
    expected = [0.5 / (std + EPS), -0.5 / (std + EPS), 0.0, 0.0]
    np.testing.assert_allclose(group_advantages(records), expected, rtol=1e-6)


def test_each_group_of_a_plain_batch_is_normalised_on_its_own() -> None:
    records = group_of("a", 2, rewards=[1.0, 0.0]) + group_of("b", 2, rewards=[10.0, 30.0])
    np.testing.assert_allclose(group_advantages(records), [1, -1, -1, 1], rtol=1e-5)


def test_equal_rewards_a_single_scored_sample_or_none_at_all_give_zero() -> None:
    assert group_advantages(group_of("a", 3, rewards=[0.7, 0.7, 0.7])).tolist() == [0, 0, 0]
    assert group_advantages(group_of("a", 2, rewards=[2.0, None])).tolist() == [0, 0]
    assert group_advantages(group_of("a", 2, rewards=[None, None])).tolist() == [0, 0]


def test_padded_rows_one_per_segment() -> None:
    records = group_of("a", 2, rewards=[1.0, 0.0])
    batch = to_batch(Group("task-a", "a", 2, tuple(records)), pad_id=7)
    a = 0.5 / (0.5 + EPS)
    assert batch.layout == "padded" and batch.num_rows == 4 and batch.num_tokens == 12
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [1, 9, 7, 7]] * 2
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]] * 2
    assert batch.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]] * 2
    assert batch.loss_mask.tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]] * 2
    assert batch.old_logprobs.tolist() == [[0, 0, -0.25, -1.5], [0, -2, 0, 0]] * 2
    np.testing.assert_allclose(
        batch.advantages,
        [[0, 0, a, a], [0, a, 0, 0], [0, 0, -a, -a], [0, -a, 0, 0]],
        rtol=1e-6,
    )
    assert batch.row_lengths.tolist() == [4, 2, 4, 2]
    assert batch.row_trajectory.tolist() == [0, 0, 1, 1]
    assert batch.trajectory_ids == ("task-a/a/0", "task-a/a/1")
    assert batch.cu_seqlens is None and batch.max_seqlen == 4
    assert batch.input_ids.dtype == np.int64 and batch.attention_mask.dtype == np.int64
    assert batch.loss_mask.dtype == np.float32 and batch.old_logprobs.dtype == np.float32
    assert batch.advantages.dtype == np.float32
    # Every sampled token carries its logprob here: the validity mask is the loss mask.
    assert batch.logprob_mask.tolist() == batch.loss_mask.tolist()
    assert batch.logprob_mask.dtype == np.float32 and batch.missing_logprobs == 0


def test_packed_rows_are_one_sequence_with_restarting_positions() -> None:
    records = group_of("a", 2, rewards=[1.0, 0.0])
    packed = to_batch(records, layout="packed")
    padded = to_batch(records)
    assert packed.input_ids.shape == (1, 12)
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 1, 9] * 2]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1] * 2]
    assert packed.cu_seqlens is not None and packed.cu_seqlens.dtype == np.int32
    assert packed.cu_seqlens.tolist() == [0, 4, 6, 10, 12]
    assert packed.max_seqlen == 4 and packed.attention_mask.tolist() == [[1] * 12]
    real = padded.attention_mask.astype(bool)
    for name in ("input_ids", "loss_mask", "old_logprobs", "advantages", "logprob_mask"):
        assert getattr(packed, name)[0].tolist() == getattr(padded, name)[real].tolist(), name


def test_max_len_truncates_every_segment() -> None:
    batch = to_batch([scored("a", 0, samples=1)], max_len=3)
    assert batch.input_ids.tolist() == [[1, 2, 3], [1, 9, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 1], [0, 1, 0]]
    packed = to_batch([scored("a", 0, samples=1)], layout="packed", max_len=3)
    assert packed.cu_seqlens is not None and packed.cu_seqlens.tolist() == [0, 3, 5]


def test_a_record_batch_and_trajectories_without_rewards() -> None:
    records = group_of("a", 2, rewards=[None, None])
    batch = to_batch(RecordBatch(tuple(records)), layout="packed")
    assert not batch.advantages.any()
    assert np.isnan(batch.rewards).all() and batch.trajectory_advantages.tolist() == [0, 0]


def with_segments(record: Scored, segments: list[Segment]) -> Scored:
    trajectory = record.trajectory.model_copy(update={"segments": segments})
    return record.model_copy(update={"trajectory": trajectory})


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_missing_logprobs_are_masked_out_and_counted(layout: Layout) -> None:
    nan, inf = float("nan"), float("inf")
    segment = Segment(  # context, then sampled: a real 0.0, missing, real, not finite
        input_ids=TokenIds.from_list([1, 2, 3, 4, 5, 6]),
        loss_mask=LossMask.from_list([0, 1, 1, 1, 1, 0]),
        logprobs=Logprobs.from_list([0.0, 0.0, nan, -0.5, -inf, nan]),
        call_ids=["c"],
    )
    batch = to_batch([with_segments(scored("a", 0, samples=1), [segment])], layout=layout)
    assert batch.old_logprobs.tolist() == [[0.0, 0.0, 0.0, -0.5, 0.0, 0.0]]
    assert batch.logprob_mask.tolist() == [[0, 1, 0, 1, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 1, 1, 1, 1, 0]]  # still trained on, by choice
    assert batch.missing_logprobs == 2  # sampled tokens only: the context NaN is not counted
    assert batch.metrics == {
        "rows": 1,
        "tokens": 6,
        "trainable_tokens": 4,
        "missing_logprobs": 2,
    }


def test_a_call_without_logprobs_reaches_the_batch_as_missing_not_as_probability_one() -> None:
    session = build_session(["turn", "no_logprobs", "turn"])
    calls = session.resolved()
    (segment,) = prefix_merge(calls, StrategyContext()).segments
    without = [c for c in calls if c.logprobs is None]
    assert len(without) == 1 and without[0].completion is not None
    batch = to_batch([with_segments(scored("a", 0, samples=1), [segment])])
    assert batch.missing_logprobs == len(without[0].completion) > 0
    valid = batch.logprob_mask.astype(bool)
    assert valid.sum() == batch.loss_mask.sum() - batch.missing_logprobs
    assert np.isfinite(batch.old_logprobs).all() and (batch.old_logprobs[valid] < 0).all()


def test_large_token_ids_survive() -> None:
    big = scored("a", 0, samples=1)
    segment = Segment(
        input_ids=TokenIds.from_list([4294967295]),
        loss_mask=LossMask.from_list([1]),
        logprobs=Logprobs.from_list([-0.5]),
        call_ids=["c"],
    )
    big = big.model_copy(
        update={"trajectory": big.trajectory.model_copy(update={"segments": [segment]})}
    )
    assert to_batch([big]).input_ids.tolist() == [[4294967295]]


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_nothing_to_batch(layout: str) -> None:
    batch = to_batch([], layout=layout)  # type: ignore[arg-type]
    assert batch.num_rows == 0 and batch.num_tokens == 0
    assert batch.input_ids.shape == ((0, 0) if layout == "padded" else (1, 0))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="layout"):
        to_batch([], layout="ragged")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="max_len"):
        to_batch([], max_len=0)


def test_to_torch_without_torch_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    batch = to_batch(group_of("a", 2))
    with pytest.raises(TorchUnavailableError, match="pip install torch") as info:
        batch.to_torch()
    assert isinstance(info.value, ImportError) and isinstance(info.value, ConfigurationError)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_to_torch_gives_tensors_of_the_same_values(layout: str) -> None:
    torch = pytest.importorskip("torch")
    batch: Batch = to_batch(group_of("a", 2, rewards=[1.0, 0.0]), layout=layout)  # type: ignore[arg-type]
    tensors = batch.to_torch()
    assert isinstance(tensors["input_ids"], torch.Tensor)
    assert tensors["input_ids"].dtype == torch.int64
    assert tensors["advantages"].tolist() == batch.advantages.tolist()
    assert ("cu_seqlens" in tensors) == (layout == "packed")
    assert tensors["max_seqlen"] == batch.max_seqlen
