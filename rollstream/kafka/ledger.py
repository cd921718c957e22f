"""How far one partition may be committed, and what finished past that point.

Every consumer of rollstream that holds records across polls (the reconstructor holds a
session's records until its trajectory is emitted; the trainer client a group's trajectories
until the group is delivered) commits by the same rule: the safe offset of a partition is its
oldest record still *held*, or the next offset to read when nothing is. Whoever reads the
partition next (after a crash, a rebalance, a restart from a checkpoint) starts there and
re-reads every record still needed. What *finished* at or past the safe offset is remembered by
key (a session id, a trajectory id) with the offset that settles it, so that re-read delivers
nothing twice; a key leaves once the safe offset passes its offset.

Pure bookkeeping, no Kafka. The rollout node's task progress keeps the same rule with a
finer unit (the samples of a record, named in the commit's metadata):
``rollstream.producers.node.progress``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping


class PartitionLedger[K: Hashable]:
    """One partition: the next offset to read, the offsets held, the keys finished past them."""

    def __init__(self, next_offset: int | None = None, done: Mapping[K, int] | None = None):
        #: The next offset to read (None: nothing read and no commit to start from).
        self.next_offset = next_offset
        #: Key -> the offset that settles it, for keys finished at or past the safe offset.
        self.done: dict[K, int] = dict(done or {})
        self._held: set[int] = set()

    def read(self, offset: int, end: int | None = None) -> None:
        """The record at ``offset`` was read.

        ``end``: where reading goes on after it, for a record joined from parts (its last
        part's offset + 1).
        """
        after = offset + 1 if end is None else end
        self.next_offset = after if self.next_offset is None else max(self.next_offset, after)

    def hold(self, offset: int) -> None:
        """The record at ``offset`` is still needed: commits must not pass it."""
        self._held.add(offset)

    def release(self, offset: int) -> None:
        """The record at ``offset`` is no longer needed (no-op if it was not held)."""
        self._held.discard(offset)

    def finish(self, key: K, offset: int) -> None:
        """``key`` is settled by the record at ``offset``: a re-read up to there skips it."""
        self.done[key] = offset

    @property
    def held(self) -> frozenset[int]:
        """The offsets held."""
        return frozenset(self._held)

    def safe(self) -> int | None:
        """The offset to commit: the oldest held record, else the next to read."""
        return min(self._held) if self._held else self.next_offset

    def prune(self) -> dict[K, int]:
        """Forget keys settled before the safe offset (no re-read reaches them); the rest."""
        safe = self.safe()
        if safe is not None:
            self.done = {k: o for k, o in self.done.items() if o >= safe}
        return self.done
