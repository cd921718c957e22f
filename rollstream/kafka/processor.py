"""The transactional processor: consume, transform, produce, exactly once in what readers see.

The reconstructor and the scorer are written on it; each only supplies its transformation
(:class:`Transformation`). The processor owns the rest:

- a consumer in the group reading ``read_committed``, offsets committed only inside
  transactions;
- decoding: a record that fails becomes a dead letter carrying the error's ``retriable`` flag,
  a retriable failure (a writer schema not known yet) only after the schema store was read
  again (once per poll, however many records need it);
- for each input partition, one transaction holding that partition's outputs, its dead letters,
  its state on the compacted state topic (optional) and its next offset, all or nothing;
- rebalances: a revocation waits for the transaction in flight, then the transformation drops
  the partitions; an assignment starts their producers, loads their state and seeks to their
  committed offsets before any of their records is handed over (a failure there stops the run
  loop, for a restart, rather than leave them assigned and idle).

**Guarantee.** Outputs, dead letters, state and offsets of a partition become visible
together or not at all to ``read_committed`` readers, so a crash or restart anywhere neither
loses nor duplicates an output.

**Zombies.** aiokafka has no KIP-447 (its TxnOffsetCommit carries no group generation), so the
group coordinator cannot refuse the commit of a member that was expelled (a long pause, a
network partition) and does not know it yet. What closes that gap is the transactional id
*per input partition* (``<prefix>-<topic>-<partition>``, the scheme Kafka Streams used before
KIP-447): every assignment starts that partition's producer afresh, and its
``InitProducerId`` bumps the id's epoch, which aborts the old owner's open transaction and
fences every later one (``ProducerFenced``). An expelled member's outputs and offsets for the
partition therefore never commit; it drops the partition and asks the group to assign anew.

**Limits.** One producer (one connection and sender) per owned input partition; transactions
of different partitions commit concurrently, not atomically together. Without KIP-447's stable
offset fetch, a new owner could read a partition's committed offset in the moment between the
old owner's last commit and its offsets landing at the group coordinator: that last batch is
then processed again (for the reconstructor: sessions lying wholly within it are emitted
again). Upgrading from per-instance transactional ids, a transaction left open under an old id
is not fenced by the new ones: ``read_committed`` readers wait until the broker aborts it
(``transaction.timeout.ms``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError, InvalidProducerEpoch, ProducerFenced
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.kafka.batches import (
    Batch,
    ProcessorMetrics,
    Transaction,
    Transformation,
    decode,
)
from rollstream.kafka.clients import (
    caught_up,
    make_consumer,
    ordinary_tasks,
    seek_to_committed,
)
from rollstream.kafka.partition_producer import (
    PartitionProducer,
    ProducerBroken,
    ProducerFailed,
    open_partitions,
    retry_transient,
)
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)
_FENCED = (ProducerFenced, InvalidProducerEpoch)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: TransactionalProcessor[Any]) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.owner._revoke(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.owner._assign(list(assigned))


class TransactionalProcessor[T]:
    """One member of ``group_id`` processing ``input_topic`` with ``app``; see the module."""

    def __init__(
        self,
        kafka: KafkaSettings,
        app: Transformation[T],
        *,
        input_topic: str,
        group_id: str,
        dead_letter_topic: str,
        transactional_prefix: str | None = None,
        state_topic: str | None = None,
        accepts: tuple[type, ...] = (),
        max_batch_records: int = 500,
        poll_timeout_ms: int = 200,
        consumer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.kafka = kafka
        self.app = app
        self.input_topic = input_topic
        self.group_id = group_id
        self.dead_letter_topic = dead_letter_topic
        self.transactional_prefix = transactional_prefix or group_id
        self.state_topic = state_topic
        self.accepts = accepts
        self.max_batch_records = max_batch_records
        self.poll_timeout_ms = poll_timeout_ms
        self.consumer_overrides = consumer_overrides or {}
        self.serializer = AvroSerializer()
        self.metrics = ProcessorMetrics()
        self.committing = asyncio.Lock()
        self.generation = 0
        self.consumer: AIOKafkaConsumer | None = None
        self._producers: dict[TopicPartition, PartitionProducer] = {}
        self._store: SchemaStore | None = None
        self._working: asyncio.Task[T] | None = None
        self._listener = _Listener(self)

    def transactional_id(self, tp: TopicPartition) -> str:
        """The transactional id of ``tp``'s producer: the same for whichever member owns it."""
        return f"{self.transactional_prefix}-{tp.topic}-{tp.partition}"

    async def start(self) -> None:
        """Open the schema store and join the group (producers come with partitions)."""
        self._store = SchemaStore(self.kafka, self.serializer.registry)
        await self._store.start()
        self.consumer = make_consumer(
            self.kafka,
            group_id=self.group_id,
            max_poll_records=self.max_batch_records,
            **self.consumer_overrides,
        )
        self.consumer.subscribe([self.input_topic], listener=self._listener)
        with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
            await self.consumer.start()

    async def stop(self) -> None:
        """Leave the group and close every producer; uncommitted work is the next owner's."""
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                await self.consumer.stop()
        await self._close(list(self._producers))
        if self._store is not None:
            with contextlib.suppress(Exception):
                await self._store.stop()

    async def __aenter__(self) -> TransactionalProcessor[T]:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def caught_up(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` was read to its end (the last stable offset, under read_committed)."""
        assert self.consumer is not None
        return await caught_up(self.consumer, tp)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll, transform, commit; until ``stop`` is set (a batch in hand is the next's)."""
        assert self.consumer is not None
        while not stop.is_set():
            generation = self.generation  # before the poll: a rebalance during it counts
            polled = await self.consumer.getmany(
                timeout_ms=self.poll_timeout_ms, max_records=self.max_batch_records
            )
            batch = await self._decode(polled, generation)
            if self.generation != generation:
                # Partitions moved while the batch was decoded: positions went back to the
                # committed offsets, and the transformation's state for them may be new.
                await self._rewind(polled)
                continue
            done, result = await self._transform(batch, stop)
            if not done:
                if stop.is_set():
                    break
                await self._rewind(polled)
                continue
            if not await self._commit(batch, result):
                await self._rewind(polled)

    async def _decode(
        self, polled: dict[TopicPartition, list[ConsumerRecord]], generation: int
    ) -> Batch:
        assert self.consumer is not None
        batch = Batch(generation)
        refreshed = False  # one schema-store refresh per poll, however many records need it
        for tp, messages in polled.items():
            if tp not in self._producers:
                # Fetched while the assignment was still loading its state, or just revoked:
                # read these again once the partition is ours.
                if tp in self.consumer.assignment():
                    self.consumer.seek(tp, messages[0].offset)
                continue
            incoming = []
            for message in messages:
                item = decode(self.serializer, self.accepts, message)
                if item.retry and not refreshed:
                    # A newer writer's schema: it is in the store by now.
                    assert self._store is not None
                    await self._store.refresh()
                    self.metrics.schema_refreshes += 1
                    refreshed = True
                    item = decode(self.serializer, self.accepts, message)
                incoming.append(item.final(self.group_id))
            batch.records[tp] = incoming
            self.metrics.records += len(messages)
        return batch

    async def _transform(self, batch: Batch, stop: asyncio.Event) -> tuple[bool, Any]:
        """The app's result; (False, None) if a rebalance or ``stop`` voided the batch."""
        if not self.app.cancel_on_rebalance:
            return True, await self.app.transform(batch)
        working = asyncio.create_task(self.app.transform(batch))
        stopping = asyncio.create_task(stop.wait())
        self._working = working
        try:
            await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._working = None
            stopping.cancel()
            if not working.done():
                working.cancel()  # stopping: the work's processes are killed
                with contextlib.suppress(asyncio.CancelledError):
                    await working
        if working.cancelled():
            return False, None
        return True, working.result()

    async def _commit(self, batch: Batch, result: Any) -> bool:
        """Each owned partition's transaction; False if a rebalance voided the batch."""
        async with self.committing:
            if self.app.cancel_on_rebalance and batch.generation != self.generation:
                return False
            transactions = self.app.transactions(batch, result)
            for tp, incoming in batch.records.items():
                dead = [i.dead for i in incoming if i.dead is not None]
                if dead:
                    transaction = transactions.setdefault(tp, Transaction())
                    transaction.dead[:0] = dead
            work = {
                tp: t for tp, t in transactions.items() if tp in self._producers and not t.empty()
            }
            outcomes = await asyncio.gather(
                *(self._commit_one(tp, t) for tp, t in work.items()), return_exceptions=True
            )
            failed: BaseException | None = None
            fenced: list[TopicPartition] = []
            broken: list[TopicPartition] = []
            for tp, outcome in zip(work, outcomes, strict=True):
                if outcome is None:
                    self.app.committed(tp, work[tp])
                elif isinstance(outcome, _FENCED):
                    fenced.append(tp)
                elif isinstance(outcome, ProducerBroken):
                    broken.append(tp)
                    log.warning("%s: %s; taking the partition afresh", self.group_id, outcome)
                elif failed is None:
                    failed = outcome
            if fenced:
                await self._fenced(fenced)
            if broken and failed is None:
                await self._retake(broken)
            if failed is not None:
                if isinstance(failed, ProducerFailed):  # not an ownership change: say why
                    log.error("%s: %s; stopping", self.group_id, failed)
                raise failed  # that transaction was aborted: a restart re-reads its input
        return not broken

    async def _commit_one(self, tp: TopicPartition, transaction: Transaction) -> None:
        await self._producers[tp].commit(transaction)
        self.metrics.transactions += 1
        self.metrics.dead_letters += len(transaction.dead)

    async def _fenced(self, tps: list[TopicPartition]) -> None:
        """Another member owns ``tps`` now (it fenced our producers): give them up."""
        self.metrics.fenced += len(tps)
        log.warning(
            "%s: fenced on %s: another member owns them now; their uncommitted work is dropped",
            self.group_id,
            ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps),
        )
        self.generation += 1
        await self._close(tps)
        self.app.revoked(tps)
        assert self.consumer is not None
        # Not read again until the group assigns them anew. Ask for that now: an expelled
        # member learns it so, and one the broker fenced for another reason (a transaction it
        # timed out) gets its partitions back with fresh producers instead of idling on them.
        with contextlib.suppress(IllegalStateError):
            self.consumer.pause(*[tp for tp in tps if tp in self.consumer.assignment()])
        self.consumer._coordinator.request_rejoin()

    async def _retake(self, tps: list[TopicPartition]) -> None:
        """Our producers of ``tps`` lost their broker mid-transaction: take the partitions afresh.

        Their transactions did not commit, so the transformation's state for them is ahead of
        what readers see: it is dropped, and the partitions start again from their committed
        state and offsets with new producers, as on an assignment. Retried while the cluster
        is still out of reach (a coordinator moving); after that, the run stops for a restart.
        """
        self.metrics.retaken += len(tps)
        self.generation += 1
        await self._close(tps)
        self.app.revoked(tps)
        assert self.consumer is not None
        consumer = self.consumer
        await retry_transient(
            lambda: self._take([tp for tp in tps if tp in consumer.assignment()]),
            f"{self.group_id}: taking back {', '.join(f'{t.topic}[{t.partition}]' for t in tps)}",
        )

    async def _revoke(self, tps: list[TopicPartition]) -> None:
        # A transaction in flight finishes first: the group's rebalance waits for this
        # callback, so the next owner starts from what was committed.
        async with self.committing:
            self.generation += 1
            if self._working is not None:
                self._working.cancel()
            mine = [tp for tp in tps if tp in self._producers]
            await self._close(mine)
            self.app.revoked(mine)

    async def _assign(self, tps: list[TopicPartition]) -> None:
        async with self.committing:
            self.generation += 1  # positions went back to the committed offsets
            if self._working is not None:
                self._working.cancel()
        # A failure here is raised by the consumer's next poll (rollstream.kafka.clients): the
        # partitions would otherwise stay assigned and never processed.
        await self._take(tps)

    async def _take(self, tps: list[TopicPartition]) -> None:
        """Producers (fencing each partition's previous owner), state and positions of ``tps``.

        Everything that awaits comes first; the partitions become the transformation's and
        the processor's at once, so no commit sees one without the other.
        """
        assert self.consumer is not None
        fresh = [tp for tp in tps if tp not in self._producers]
        producers = {
            tp: PartitionProducer(
                self.kafka,
                tp,
                self.transactional_id(tp),
                group_id=self.group_id,
                serializer=self.serializer,
                dead_letter_topic=self.dead_letter_topic,
                state_topic=self.state_topic,
            )
            for tp in fresh
        }
        states, committed = await open_partitions(
            producers, self.consumer, self.kafka, self.state_topic, self.group_id
        )
        for tp in fresh:
            if committed[tp] is not None:
                self.consumer.seek(tp, committed[tp])
            producers[tp].resume(states.get(tp))
            self.app.assigned(tp, states.get(tp), committed[tp])
        self._producers.update(producers)
        # A batch polled before now may hold records of these partitions from before the seek
        # above (processed by the owner just fenced), and a decode awaiting the schema store
        # would take them for ours: such a batch is read again.
        self.generation += 1

    async def _close(self, tps: list[TopicPartition]) -> None:
        for producer in [self._producers.pop(tp) for tp in tps if tp in self._producers]:
            await producer.stop()

    async def _rewind(self, polled: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """After a voided batch: read its partitions again from the group's committed offsets.

        Not from the batch's own first offsets: after a rebalance another member may have
        processed and committed past them.
        """
        assert self.consumer is not None
        if polled:  # an empty poll dropped nothing
            self.metrics.dropped_batches += 1
            await seek_to_committed(self.consumer, list(polled))
