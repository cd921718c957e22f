"""The trainer client: GRPO groups from the scored topic, with staleness and safe commits.

```python
from rollstream.consumers.trainer import TrajectoryStream, TrainerSettings, to_batch

async with TrajectoryStream(TrainerSettings(max_staleness=2), group="trainer-a") as stream:
    async for group in stream.groups():
        train_step(to_batch(group, layout="packed"))
        await stream.commit()
        await stream.publish_policy_version(stream.policy_version + 1)
```

Training loops that are not async use :class:`SyncTrajectoryStream` (same methods, blocking),
and :func:`trajectory_dataset` makes a torch ``IterableDataset`` of one (torch is imported only
then). See docs/trainer-client.md for the semantics (groups, staleness, commits, exactly-once).
"""

from rollstream.consumers.trainer.batch import (
    Batch,
    TorchUnavailableError,
    group_advantages,
    to_batch,
)
from rollstream.consumers.trainer.dataset import DatasetOutput, TrajectoryItems, trajectory_dataset
from rollstream.consumers.trainer.filters import FilterReason
from rollstream.consumers.trainer.groups import (
    Group,
    GroupAssembler,
    RecordBatch,
    StreamMetrics,
    oldest_policy_version,
)
from rollstream.consumers.trainer.ledger import OffsetLedger, PartitionPosition, StreamPosition
from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.consumers.trainer.stream import TrajectoryStream
from rollstream.consumers.trainer.sync import SyncTrajectoryStream

__all__ = [
    "Batch",
    "DatasetOutput",
    "FilterReason",
    "Group",
    "GroupAssembler",
    "OffsetLedger",
    "PartitionPosition",
    "RecordBatch",
    "StreamMetrics",
    "StreamPosition",
    "SyncTrajectoryStream",
    "TorchUnavailableError",
    "TrainerSettings",
    "TrajectoryItems",
    "TrajectoryStream",
    "group_advantages",
    "oldest_policy_version",
    "to_batch",
    "trajectory_dataset",
]
