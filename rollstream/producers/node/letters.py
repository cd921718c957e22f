"""The node's dead letters: undecodable task records, held uncommitted until they are written.

A task record the node cannot decode has nothing to run; it goes to the dead-letter topic, and
only then may the partition's commit pass it. When the broker refuses the letter, the record is
held: its entry stays unfinished (the commit point stops before it) and the letter is tried
again after a back-off, with the other records of the partition still taken meanwhile. A
partition handed over drops its held letters: the next owner reads them again from the last
commit. Each refusal is logged and counted (``rollstream_node_dead_letters_failed_total``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.kafka.clients import LazyProducer
from rollstream.kafka.deadletters import dead_letter
from rollstream.producers.node.progress import PartitionProgress, TaskEntry
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

LETTER_TIMEOUT_S = 10.0
#: After a refusal no letter is tried for this long: the intake must not stall on each poison
#: record while the broker refuses (the held ones wait, uncommitted).
LETTER_BACKOFF_S = 60.0


@dataclass
class _Held:
    tp: TopicPartition
    progress: PartitionProgress
    entry: TaskEntry
    message: ConsumerRecord
    error: Exception


class DeadLetters:
    """Writes the node's dead letters, holding each record's commit until its letter is written."""

    def __init__(
        self, kafka: KafkaSettings, serializer: AvroSerializer, group: str, topic: str
    ) -> None:
        self.serializer = serializer
        self.group = group
        self.topic = topic
        self.sent = 0
        self.failed = 0  # attempts the broker refused or did not answer in time
        self._held: list[_Held] = []
        self._producer = LazyProducer(kafka, LETTER_TIMEOUT_S)  # poison is rare
        self._retry_at = 0.0  # loop time before which no letter is tried

    @property
    def kafka(self) -> KafkaSettings:
        """The cluster letters go to (the producer's: the next producer made uses a new one)."""
        return self._producer.settings

    @kafka.setter
    def kafka(self, kafka: KafkaSettings) -> None:
        self._producer.settings = kafka

    @property
    def held(self) -> int:
        """Records whose letter is not written yet (their partitions' commits wait)."""
        return len(self._held)

    async def take(
        self,
        tp: TopicPartition,
        progress: PartitionProgress,
        message: ConsumerRecord,
        error: Exception,
    ) -> None:
        """Dead-letter the record at ``message``; its entry is finished once the letter is."""
        # One sample to "run": the letter. Finished (the commit may pass) once it is written.
        entry = progress.take(message.offset, 1)
        if await self._send(message, error):
            entry.done.add(0)
        else:
            self._held.append(_Held(tp, progress, entry, message, error))

    async def retry(self, owned: dict[TopicPartition, PartitionProgress]) -> bool:
        """Try the held letters again (after the back-off); whether any was written."""
        written = False
        for held in list(self._held):
            if owned.get(held.tp) is not held.progress:  # handed over: read again elsewhere
                self._held.remove(held)
            elif await self._send(held.message, held.error):
                held.entry.done.add(0)
                self._held.remove(held)
                written = True
            else:
                break  # refused again: the back-off holds the rest too
        return written

    async def stop(self) -> None:
        """Close the producer; held letters stay unwritten (their records are not committed)."""
        await self._producer.close()

    async def _send(self, message: ConsumerRecord, error: Exception) -> bool:
        loop = asyncio.get_running_loop()
        where = f"{message.topic}[{message.partition}]@{message.offset}"
        if loop.time() < self._retry_at:
            log.error("not dead-lettered yet (held, retrying later): %s", where)
            return False
        letter = self.serializer.encode(dead_letter(message, error, self.group))
        try:
            producer = await self._producer.get()
            await asyncio.wait_for(
                producer.send_and_wait(self.topic, letter, key=message.key), LETTER_TIMEOUT_S
            )
        except (KafkaError, TimeoutError, OSError) as exc:
            self.failed += 1
            self._retry_at = loop.time() + LETTER_BACKOFF_S
            log.error("could not dead-letter %s (held, not committed): %r", where, exc)
            return False
        self.sent += 1
        return True
