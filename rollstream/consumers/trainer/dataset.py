"""A ``torch.utils.data.IterableDataset`` over a :class:`SyncTrajectoryStream`.

```python
with SyncTrajectoryStream(settings, group="trainer-a") as stream:
    loader = DataLoader(trajectory_dataset(stream, layout="packed"), batch_size=None)
    for tensors in loader:          # the dict of Batch.to_torch(): one item per group
        train_step(tensors)
        stream.commit()             # covers exactly the groups of the items trained on
```

Each item is already a batch, so the loader gets ``batch_size=None`` (no collation) and
``num_workers=0``: the stream reads in its own thread already, and a worker process could
neither share the consumer nor let the training loop commit what it read. torch is imported
only when a dataset is made (:class:`TrajectoryItems`, the iteration itself, needs none).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from rollstream.consumers.trainer.batch import Layout, TorchUnavailableError, to_batch
from rollstream.consumers.trainer.groups import Group, RecordBatch
from rollstream.errors import ConfigurationError

DatasetOutput = Literal["tensors", "batch", "groups"]
"""What an item is: ``Batch.to_torch()``, the :class:`Batch`, or the tuple of groups."""


class TrajectoryItems:
    """The items of a dataset over ``stream``: ``groups_per_item`` groups (or batches) each.

    ``stream`` is a :class:`~rollstream.consumers.trainer.sync.SyncTrajectoryStream` (any
    iterable of groups or plain batches will do); it is read as the items are asked for, never
    ahead.

    ``output`` tensors: the dict of :meth:`Batch.to_torch` of the groups' records (GRPO
    advantages normalised group by group); batch: that :class:`Batch`; groups: the tuple of
    groups (or plain batches) themselves. ``layout``, ``pad_id`` and ``max_len`` go to
    :func:`to_batch`. Iteration ends when the stream is closed; a last incomplete item (fewer
    groups than ``groups_per_item``) is then dropped, and its groups are not committed
    unless the loop commits after it.
    """

    def __init__(
        self,
        stream: Iterable[Group | RecordBatch],
        *,
        output: DatasetOutput = "tensors",
        layout: Layout = "padded",
        pad_id: int = 0,
        max_len: int | None = None,
        groups_per_item: int = 1,
    ) -> None:
        if output not in ("tensors", "batch", "groups"):
            raise ConfigurationError(f"output must be tensors, batch or groups, not {output!r}")
        if layout not in ("padded", "packed"):
            raise ConfigurationError(f"layout must be padded or packed, not {layout!r}")
        if groups_per_item < 1:
            raise ConfigurationError(f"groups_per_item must be at least 1, not {groups_per_item}")
        self.stream = stream
        self.output: DatasetOutput = output
        self.layout: Layout = layout
        self.pad_id = pad_id
        self.max_len = max_len
        self.groups_per_item = groups_per_item

    def __iter__(self) -> Iterator[Any]:
        """One item per ``groups_per_item`` groups the stream delivers, as ``output`` says."""
        pending: list[Group | RecordBatch] = []
        for item in self.stream:
            pending.append(item)
            if len(pending) < self.groups_per_item:
                continue
            groups, pending = tuple(pending), []
            if self.output == "groups":
                yield groups
                continue
            records = [record for group in groups for record in group.records]
            batch = to_batch(records, self.layout, self.pad_id, self.max_len)
            yield batch if self.output == "batch" else batch.to_torch()


def import_torch() -> Any:
    """The torch module; :class:`TorchUnavailableError` saying what to do when it is missing."""
    try:
        import torch
    except ImportError as exc:
        raise TorchUnavailableError(
            "trajectory_dataset() needs torch, which is not installed: pip install torch "
            "(or iterate SyncTrajectoryStream.groups() and use to_batch's numpy arrays)"
        ) from exc
    return torch


@functools.cache
def dataset_class() -> type[TrajectoryItems]:
    """:class:`TrajectoryItems` as a ``torch.utils.data.IterableDataset`` (made once)."""
    torch = import_torch()

    class TrajectoryDataset(TrajectoryItems, torch.utils.data.IterableDataset):  # type: ignore[misc,name-defined]
        """An ``IterableDataset`` of :class:`TrajectoryItems`; for ``num_workers=0`` only."""

        def __iter__(self) -> Iterator[Any]:
            if torch.utils.data.get_worker_info() is not None:
                raise ConfigurationError(
                    "a trajectory dataset runs in the training process: use DataLoader("
                    "num_workers=0) (the stream reads in its own thread, and only this "
                    "process can commit what it read)"
                )
            return super().__iter__()

    TrajectoryDataset.__qualname__ = "TrajectoryDataset"
    return TrajectoryDataset


def trajectory_dataset(
    stream: Iterable[Group | RecordBatch],
    *,
    output: DatasetOutput = "tensors",
    layout: Layout = "padded",
    pad_id: int = 0,
    max_len: int | None = None,
    groups_per_item: int = 1,
) -> TrajectoryItems:
    """A ``torch.utils.data.IterableDataset`` of ``stream``'s groups (see :class:`TrajectoryItems`).

    Raises :class:`TorchUnavailableError` (an ``ImportError``) when torch is not installed.
    """
    return dataset_class()(
        stream,
        output=output,
        layout=layout,
        pad_id=pad_id,
        max_len=max_len,
        groups_per_item=groups_per_item,
    )
