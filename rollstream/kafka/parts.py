"""Records over the record budget, carried as several: split by the writer, joined by the reader.

A trajectory of a long session (or its Scored record) can outgrow one Kafka record even with its
segments written as deltas. The writer sends such a value as consecutive *parts* under the same
key, each with the header ``rollstream-part: INDEX/COUNT/DIGEST`` (DIGEST: the whole value's
SHA-256, shortened); every consumer made by :func:`rollstream.kafka.clients.make_consumer` joins
them back before its caller sees a record, so readers and their offsets see one record.

Parts of a whole are written in one transaction, but several writers' transactions interleave in
an output partition, so a reader meets other records between them. The joiner releases records
in offset order: a record behind a whole still missing parts waits for it. A joined record sits
at its first part's offset, and :func:`after` (its last part's offset + 1) is where reading goes
on: a consumer commits the largest ``after`` of what it released, never a whole's first offsets
alone. A part whose first part came before the reading started (a restart inside a whole already
handled) is left out and counted; a whole whose parts never all come (a writer outside a
transaction that died mid-way) is released as its raw parts after ``MAX_BEHIND`` later records,
which then fail decoding like any malformed record: logged, counted, dead-lettered.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.schemas import RECORD_BUDGET_BYTES

log = logging.getLogger(__name__)

PART_HEADER = "rollstream-part"
#: Records read behind an incomplete whole before it is given up as broken.
MAX_BEHIND = 20_000
#: Room in each part for its header and key beyond the value's share.
_HEADROOM = 4096

Headers = tuple[tuple[str, bytes], ...]


def split(
    key: bytes | None, value: bytes, budget: int = RECORD_BUDGET_BYTES
) -> list[tuple[bytes, Headers]]:
    """``value`` as the records to send: itself alone when it fits ``budget``, else its parts."""
    if len(key or b"") + len(value) <= budget:
        return [(value, ())]
    size = budget - len(key or b"") - _HEADROOM
    if size <= 0:
        raise ValueError(f"a {len(key or b'')}-byte key leaves no room in a {budget}-byte record")
    digest = hashlib.sha256(value).hexdigest()[:32]
    chunks = [value[i : i + size] for i in range(0, len(value), size)]
    return [
        (chunk, ((PART_HEADER, f"{i}/{len(chunks)}/{digest}".encode()),))
        for i, chunk in enumerate(chunks)
    ]


@dataclass
class JoinedRecord(ConsumerRecord[bytes, bytes]):  # type: ignore[misc]
    """A record carried as parts: at its first part's offset, ``end`` past its last part."""

    end: int = 0


def after(message: ConsumerRecord[bytes, bytes]) -> int:
    """The offset reading goes on from once ``message`` is handled (past all of its parts)."""
    return message.end if isinstance(message, JoinedRecord) else message.offset + 1


def _part(message: ConsumerRecord[bytes, bytes]) -> tuple[int, int, str] | None:
    for name, raw in message.headers or ():
        if name == PART_HEADER:
            try:
                index, count, digest = raw.decode().split("/")
                return int(index), int(count), digest
            except ValueError:
                return None  # not our header's form: the record goes on as it is
    return None


@dataclass
class _Whole:
    """A record in waiting: a whole whose parts are still coming, or one ready to release."""

    parts: list[ConsumerRecord[bytes, bytes]]
    count: int = 1
    digest: str = ""
    ready: list[ConsumerRecord[bytes, bytes]] = field(default_factory=list)


@dataclass
class JoinerMetrics:
    """What joining did: wholes joined, leftover parts skipped, broken wholes released raw."""

    joined: int = 0
    leftover_parts: int = 0
    broken_wholes: int = 0


class Joiner:
    """Joins parts into wholes per partition, releasing records in offset order."""

    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, deque[_Whole]] = {}
        self._next: dict[TopicPartition, int] = {}
        self.metrics = JoinerMetrics()

    def forget(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Drop what waits in ``partitions`` (all if None): they are read again from elsewhere."""
        for tp in list(self._waiting if partitions is None else partitions):
            self._waiting.pop(tp, None)
            self._next.pop(tp, None)

    def join(
        self, polled: Mapping[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        """One poll's records, parts joined; a partition with nothing to release is left out."""
        out = {}
        for tp, messages in polled.items():
            released = [r for m in messages for r in self._feed(tp, m)]
            if released:
                out[tp] = released
        return out

    def _feed(
        self, tp: TopicPartition, message: ConsumerRecord[bytes, bytes]
    ) -> list[ConsumerRecord[bytes, bytes]]:
        if message.offset < self._next.get(tp, 0):
            self.forget([tp])  # sought back: what waited comes again
        self._next[tp] = message.offset + 1
        waiting = self._waiting.setdefault(tp, deque())
        part = _part(message)
        if part is None:
            waiting.append(_Whole([], ready=[message]))
        else:
            index, count, digest = part
            whole: _Whole | None = None
            if index == 0:
                whole = _Whole([message], count, digest)
                waiting.append(whole)
            else:
                whole = next(
                    (
                        w
                        for w in waiting
                        if not w.ready and w.digest == digest and len(w.parts) == index
                    ),
                    None,
                )
                if whole is None:
                    # Its first part lies before where this reading began: a whole handled.
                    self.metrics.leftover_parts += 1
                    log.debug("%s@%d: part of a whole begun before the reading", tp, message.offset)
                else:
                    whole.parts.append(message)
            if whole is not None:
                self._complete(tp, whole)
        return self._release(tp, waiting)

    def _complete(self, tp: TopicPartition, whole: _Whole) -> None:
        if len(whole.parts) < whole.count:
            return
        value = b"".join(p.value or b"" for p in whole.parts)
        if hashlib.sha256(value).hexdigest()[:32] != whole.digest:
            self._broken(tp, whole, "its joined value does not match its digest")
            return
        first, last = whole.parts[0], whole.parts[-1]
        whole.ready = [
            JoinedRecord(
                first.topic,
                first.partition,
                first.offset,
                first.timestamp,
                first.timestamp_type,
                first.key,
                value,
                None,
                first.serialized_key_size,
                len(value),
                [],
                end=last.offset + 1,
            )
        ]
        self.metrics.joined += 1

    def _broken(self, tp: TopicPartition, whole: _Whole, why: str) -> None:
        self.metrics.broken_wholes += 1
        log.error(
            "%s: the record at %d came in %d of %d parts (%s): released as they are",
            tp,
            whole.parts[0].offset,
            len(whole.parts),
            whole.count,
            why,
        )
        whole.ready = list(whole.parts)

    def _release(
        self, tp: TopicPartition, waiting: deque[_Whole]
    ) -> list[ConsumerRecord[bytes, bytes]]:
        released: list[ConsumerRecord[bytes, bytes]] = []
        while waiting:
            head = waiting[0]
            if not head.ready and len(waiting) > MAX_BEHIND:  # what waits behind it
                self._broken(tp, head, f"{MAX_BEHIND} records read since without the rest")
            if not head.ready:
                break
            released += waiting.popleft().ready
        return released
