"""The dataset adapter without torch: its items, and the error that says torch is missing.

test_dataset_torch.py runs a torch DataLoader over a real stream where torch is installed.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from rollstream.consumers.trainer import (
    Batch,
    Group,
    RecordBatch,
    TorchUnavailableError,
    TrajectoryItems,
    to_batch,
    trajectory_dataset,
)
from rollstream.consumers.trainer.dataset import dataset_class
from rollstream.errors import ConfigurationError
from tests.consumers.trainer.records import group_of


def group(name: str, rewards: list[float | None]) -> Group:
    records = tuple(group_of(name, len(rewards), rewards=rewards))
    return Group(f"task-{name}", name, len(records), records)


GROUPS = [group("a", [1.0, 0.0]), group("b", [0.0, 2.0]), group("c", [1.0, 1.0])]


def assert_same_batch(got: Batch, want: Batch) -> None:
    for name in ("input_ids", "loss_mask", "old_logprobs", "advantages", "logprob_mask"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.trajectory_ids == want.trajectory_ids and got.layout == want.layout


def test_each_item_is_the_batch_of_its_groups_normalised_group_by_group() -> None:
    items = TrajectoryItems(GROUPS, output="batch", layout="packed", groups_per_item=2)
    [batch] = list(items)  # c alone is too few for an item and is left out
    assert isinstance(batch, Batch)
    records = [*GROUPS[0].records, *GROUPS[1].records]
    assert_same_batch(batch, to_batch(records, layout="packed"))
    np.testing.assert_allclose(batch.trajectory_advantages, [1, -1, -1, 1], rtol=1e-5)


def test_items_follow_to_batch_options_one_group_each_by_default() -> None:
    items = list(TrajectoryItems(GROUPS, output="batch", pad_id=7, max_len=3))
    assert len(items) == 3
    for item, source in zip(items, GROUPS, strict=True):
        assert_same_batch(item, to_batch(source, pad_id=7, max_len=3))
        assert item.max_seqlen == 3


def test_groups_output_yields_the_groups_themselves() -> None:
    batches = [RecordBatch(g.records) for g in GROUPS]
    assert list(TrajectoryItems(batches, output="groups", groups_per_item=3)) == [tuple(batches)]
    assert list(TrajectoryItems(GROUPS, output="groups")) == [(g,) for g in GROUPS]


def test_the_stream_is_read_only_as_items_are_asked_for() -> None:
    taken: list[str] = []

    def stream() -> Any:
        for g in GROUPS:
            taken.append(g.group_id)
            yield g

    items = iter(TrajectoryItems(stream(), output="groups"))
    assert next(items) == (GROUPS[0],) and taken == ["a"]  # a commit now covers a alone


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"output": "arrays"}, "output must be"),
        ({"layout": "ragged"}, "layout must be"),
        ({"groups_per_item": 0}, "groups_per_item must be at least 1"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TrajectoryItems(GROUPS, **kwargs)


def test_without_torch_the_dataset_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    dataset_class.cache_clear()
    try:
        with pytest.raises(TorchUnavailableError, match="pip install torch") as raised:
            trajectory_dataset(GROUPS)
        assert isinstance(raised.value, ImportError)
        # The items themselves need torch only for tensors.
        with pytest.raises(TorchUnavailableError, match="pip install torch"):
            next(iter(TrajectoryItems(GROUPS)))
    finally:
        dataset_class.cache_clear()


def test_the_dataset_is_an_iterable_dataset_that_refuses_worker_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Against a stand-in for torch: the class, its items, and the check for workers."""

    class IterableDataset:
        pass

    worker: list[object | None] = [None]
    data = types.SimpleNamespace(IterableDataset=IterableDataset, get_worker_info=lambda: worker[0])
    stand_in = types.SimpleNamespace(utils=types.SimpleNamespace(data=data))
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    dataset_class.cache_clear()
    try:
        dataset = trajectory_dataset(GROUPS, output="groups", groups_per_item=3)
        assert isinstance(dataset, IterableDataset) and isinstance(dataset, TrajectoryItems)
        assert list(dataset) == [tuple(GROUPS)]
        worker[0] = object()  # as in a DataLoader worker process
        with pytest.raises(ConfigurationError, match="num_workers=0"):
            iter(dataset)
    finally:
        dataset_class.cache_clear()
