"""The trainer client: GRPO groups from the scored topic, with staleness and safe commits.

```python
from rollstream.trainer import TrajectoryStream, TrainerSettings, to_batch

async with TrajectoryStream(TrainerSettings(max_staleness=2), group="trainer-a") as stream:
    async for group in stream.groups():
        train_step(to_batch(group, layout="packed"))
        await stream.commit()
        await stream.publish_policy_version(stream.policy_version + 1)
```

See docs/trainer-client.md for the semantics (groups, staleness, commits, exactly-once).
"""

from rollstream.trainer.batch import (
    Batch,
    TorchUnavailableError,
    group_advantages,
    to_batch,
)
from rollstream.trainer.groups import (
    Group,
    GroupAssembler,
    RecordBatch,
    StreamMetrics,
    oldest_policy_version,
)
from rollstream.trainer.ledger import OffsetLedger, PartitionPosition, StreamPosition
from rollstream.trainer.settings import TrainerSettings
from rollstream.trainer.stream import TrajectoryStream

__all__ = [
    "Batch",
    "Group",
    "GroupAssembler",
    "OffsetLedger",
    "PartitionPosition",
    "RecordBatch",
    "StreamMetrics",
    "StreamPosition",
    "TorchUnavailableError",
    "TrainerSettings",
    "TrajectoryStream",
    "group_advantages",
    "oldest_policy_version",
    "to_batch",
]
