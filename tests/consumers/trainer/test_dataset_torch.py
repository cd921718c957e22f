"""A torch DataLoader over a SyncTrajectoryStream, against a real broker (needs torch)."""

from __future__ import annotations

import pytest

from rollstream.consumers.trainer import (
    SyncTrajectoryStream,
    TrainerSettings,
    to_batch,
    trajectory_dataset,
)
from rollstream.errors import ConfigurationError
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.trainer.records import group_of
from tests.consumers.trainer.test_stream import produce

torch = pytest.importorskip("torch")  # not a dependency: skipped (broker unstarted) without it

pytestmark = pytest.mark.integration


async def test_a_data_loader_over_a_sync_stream(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = rollstream_topics.scored
    a = group_of("a", 2, rewards=[1.0, 0.0])
    b = group_of("b", 2, rewards=[0.0, 3.0])
    await produce(await producer_factory(), topic, [(0, r) for r in a + b])

    with SyncTrajectoryStream(TrainerSettings(), "trainer-torch", kafka_settings) as stream:
        dataset = trajectory_dataset(stream, layout="packed")
        assert isinstance(dataset, torch.utils.data.IterableDataset)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None)
        items = iter(loader)
        first = next(items)
        want = to_batch(a, layout="packed")
        assert set(first) >= {"input_ids", "loss_mask", "old_logprobs", "advantages"}
        assert torch.equal(first["input_ids"], torch.from_numpy(want.input_ids))
        assert torch.equal(first["cu_seqlens"], torch.from_numpy(want.cu_seqlens))
        assert first["max_seqlen"] == want.max_seqlen
        assert stream.commit() == {(topic, 0): 2}  # the loader read no further than a
        second = next(items)
        assert torch.equal(second["advantages"], torch.from_numpy(to_batch(b, "packed").advantages))
        assert stream.commit() == {(topic, 0): 4}

        # In a DataLoader worker the dataset refuses to run.
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
        with pytest.raises(ConfigurationError, match="num_workers=0"):
            next(iter(dataset))
