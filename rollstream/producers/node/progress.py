"""Where a node stands on one task partition: its commit point and the samples done past it.

A task record expands into ``samples`` sessions, and the samples of a record finish in any
order, records of one partition too. Kafka keeps one committed offset per partition and a
short metadata string beside it; both carry the node's progress:

- the committed offset never passes a record that still has a sample to run;
- the metadata names the samples finished *past* that offset (whole records, or some samples
  of a record), so whichever node owns the partition next, after a rebalance, a clean leave or
  a crash, runs only the samples nobody finished (as far as the last commit knew).

Metadata: ``rs1 `` then comma-separated items, offsets as deltas from the committed offset:
``d`` a whole record done, ``a-b`` every record at offsets ``a``..``b`` done (consecutive
offsets only: a gap may hide a record not done), ``d:HEX`` the samples of a record done so far
(bit ``i`` of ``HEX`` is sample ``i``). Kafka caps metadata (``offset.metadata.max.bytes``,
4096 by default): past ``METADATA_BUDGET`` the items of the highest offsets are left out and
counted, and those samples may run again should the partition move before they are committed.

The rule is the consumers' (``rollstream.kafka.ledger``: commit at the oldest record still
needed, remember what finished past it), but not their ledger: here a record is finished by its
samples, in any order and from outside (a session ending), partly finished records must be
named too, and what is named must fit the commit's metadata.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: Under the broker's default ``offset.metadata.max.bytes`` (4096), with room to spare.
METADATA_BUDGET = 4000
_PREFIX = "rs1 "
#: A record finished whole, in ``Inherited`` (its sample count is not known before it is read).
WHOLE: frozenset[int] = frozenset({-1})

#: Offset -> the samples of that record done by an earlier owner (``WHOLE``: all of them).
Inherited = dict[int, frozenset[int]]


@dataclass
class TaskEntry:
    """One task record taken off the partition: how many samples it asks for, which are done."""

    offset: int
    samples: int
    done: set[int] = field(default_factory=set)

    @property
    def finished(self) -> bool:
        """Every sample done (a record with nothing to run is finished at once)."""
        return len(self.done) >= self.samples

    def todo(self) -> list[int]:
        """The samples still to run, in order."""
        return [s for s in range(self.samples) if s not in self.done]


@dataclass(frozen=True)
class CommitPoint:
    """What to commit for a partition: the offset, the metadata, items left out for size."""

    offset: int
    metadata: str
    left_out: int = 0


def encode(
    offset: int, done: Sequence[tuple[int, frozenset[int] | None]], budget: int
) -> CommitPoint:
    """The commit point at ``offset`` naming ``done`` (offset, samples or None for whole).

    ``done`` is sorted by offset, every offset at or past ``offset``.
    """
    items: list[str] = []
    run: tuple[int, int] | None = None  # a run of whole records at consecutive offsets

    def close_run() -> None:
        if run is not None:
            a, b = run[0] - offset, run[1] - offset
            items.append(str(a) if a == b else f"{a}-{b}")

    for at, samples in done:
        if samples is None:
            if run is not None and at == run[1] + 1:
                run = (run[0], at)
                continue
            close_run()
            run = (at, at)
            continue
        close_run()
        run = None
        if samples:
            items.append(f"{at - offset}:{sum(1 << s for s in samples):x}")
    close_run()
    left_out = 0
    while items and len(_PREFIX) + len(",".join(items)) > budget:
        items.pop()
        left_out += 1
    return CommitPoint(offset, _PREFIX + ",".join(items) if items else "", left_out)


def decode(offset: int, metadata: str) -> Inherited:
    """The samples done past ``offset`` that ``metadata`` names; empty if it names none.

    Metadata in another form (another writer, a damaged string) is logged and ignored: the
    samples it might have named run again, never lost.
    """
    if not metadata:
        return {}
    if not metadata.startswith(_PREFIX):
        log.warning("commit metadata %r is not a node's progress: ignored", metadata[:80])
        return {}
    done: Inherited = {}
    try:
        for item in filter(None, metadata[len(_PREFIX) :].split(",")):
            if ":" in item:
                delta, mask = item.split(":", 1)
                bits = int(mask, 16)
                done[offset + int(delta)] = frozenset(
                    i for i in range(bits.bit_length()) if bits >> i & 1
                )
            elif "-" in item:
                first, last = (int(x) for x in item.split("-", 1))
                done |= {offset + d: WHOLE for d in range(first, last + 1)}
            else:
                done[offset + int(item)] = WHOLE
    except ValueError:
        log.warning("commit metadata %r cannot be read: ignored", metadata[:80])
        return {}
    return done


class PartitionProgress:
    """The records of one partition this node has taken, since the commit it started from."""

    def __init__(self, committed: int | None = None, metadata: str = "") -> None:
        #: Everything before this offset is done (None: nothing committed yet).
        self.base = committed
        self.inherited = decode(committed, metadata) if committed is not None else {}
        self.entries: deque[TaskEntry] = deque()
        self._next: int | None = committed
        #: The last commit the broker acknowledged (what the group would restart from).
        self.acked: CommitPoint | None = (
            CommitPoint(committed, metadata) if committed is not None else None
        )

    def seen(self, offset: int) -> bool:
        """Whether the record at ``offset`` was taken already (delivered again after a seek)."""
        return self._next is not None and offset < self._next

    def take(self, offset: int, samples: int) -> TaskEntry:
        """Note the record at ``offset`` asking for ``samples``, with those done earlier."""
        for stale in [o for o in self.inherited if o < offset]:
            del self.inherited[stale]  # never to be read (deleted, or not a data record)
        prior = self.inherited.pop(offset, frozenset())
        done = set(range(samples)) if prior == WHOLE else {s for s in prior if s < samples}
        entry = TaskEntry(offset, samples, done)
        self.entries.append(entry)
        self._next = offset + 1
        return entry

    def point(self, budget: int = METADATA_BUDGET) -> CommitPoint | None:
        """What to commit now; None when nothing was ever committed nor taken."""
        while self.entries and self.entries[0].finished:
            self.base = self.entries.popleft().offset + 1
        if self.entries:
            offset = self.entries[0].offset
        elif self.base is not None:
            offset = self.base
        else:
            return None
        done: list[tuple[int, frozenset[int] | None]] = [
            (e.offset, None if e.finished else frozenset(e.done)) for e in self.entries
        ]
        done += [(o, None if s == WHOLE else s) for o, s in self.inherited.items() if o >= offset]
        done.sort(key=lambda item: item[0])
        return encode(offset, done, budget)

    @property
    def behind(self) -> bool:
        """Whether progress exists that the broker has not acknowledged."""
        point = self.point()
        if point is None:
            return False
        return self.acked is None or (point.offset, point.metadata) != (
            self.acked.offset,
            self.acked.metadata,
        )
