"""Adopting orphaned spools: records a publisher left behind, sent by a sibling instead.

Only the publisher that opens a spool directory again drains it, and spool names come from
ports and worker indexes: a pool that shrank, a port that changed or port 0 leave spools nobody
opens again. So at its start a publisher looks at the directories beside its own spool of its
family: the same name up to the first ``-`` (``x`` for a pool's ``x-worker-<i>``, ``interceptor``
for ``interceptor-<port>``, ``node`` for ``node-<id>``), so that a spool directory chosen by
hand does not reach into whatever lies beside it. One that holds unsent records for the same
topic (``meta.json``) and whose lock nobody holds is an orphan: its records are moved into the
publisher's own spool, behind what that holds and ahead of anything new, and the emptied orphan
is removed. Unsent records for another topic, or for none recorded, are left where they are
with a warning; a spool whose lock is held is live.

Records move in chunks, each under the orphan's lock taken anew, and the lock stays free
between chunks for longer than an owner's poll (``spool_dir.POLL_S``): an owner that starts
again meanwhile waits for one chunk at most, then finds in its spool what was not moved. Each
record is in exactly one of the two spools, except after a crash between the append to ours
and the commit in theirs: then it is in both and sent twice (at least once; consumers
deduplicate by call id).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from rollstream.producers.publisher import spool_dir
from rollstream.producers.publisher.spool import Spool, SpoolError, SpoolLocked, unsent_bytes

log = logging.getLogger(__name__)

CHUNK_RECORDS = 1000
GAP_S = 2 * spool_dir.POLL_S

#: What a spool directory holds of its own; anything else (rejected records) keeps it.
_SPOOL_FILES = (
    "spool-*.log",
    "spool-*.done",
    ".spool-*.tmp",  # rollstream.durable's partial replacements
    f".{spool_dir.META_FILE}.tmp",
    "spool-*.tmp",  # those of earlier releases
    "meta.tmp",
    spool_dir.META_FILE,
)


class _Refused(Exception):
    """Our own spool refused the records (a full disk): the other orphans would fare the same."""


@dataclass
class Adoption:
    """One orphan being adopted: how many of its records were moved, and how it ended."""

    directory: Path
    moved: int = 0
    outcome: str = "left as it was"


def adopt_orphans(
    spool: Spool, topic: str, chunk: int = CHUNK_RECORDS, gap_s: float = GAP_S
) -> int:
    """Move the records of the orphaned spools beside ``spool`` into it; how many were moved.

    Blocking (disk I/O and the pauses between chunks): the publisher runs it in a thread
    before its sending task starts. An orphan that cannot be read stays as it is, with a
    warning; if ``spool`` refuses records (a full disk), adoption stops until the next start.
    """
    total = 0
    for directory in orphans(spool.directory, topic):
        adoption = Adoption(directory)
        try:
            _move(adoption, spool, topic, chunk, gap_s)
        except _Refused as exc:
            log.warning("adopting orphaned spools stopped at %s: %s", directory, exc.__cause__)
            break
        except (SpoolError, OSError) as exc:
            log.warning("cannot adopt the spool in %s: %s", directory, exc)
        finally:
            total += adoption.moved
            if adoption.moved:
                log.info(
                    "adopted %d records for %s from the orphaned spool in %s (%s)",
                    adoption.moved,
                    topic,
                    directory,
                    adoption.outcome,
                )
    return total


def family(name: str) -> str:
    """The family of a spool directory's name: its part before the first ``-``."""
    return name.split("-", 1)[0]


def orphans(own: Path, topic: str) -> list[Path]:
    """The directories of ``own``'s family beside it with unsent records for ``topic``, sorted.

    Their locks are not tried here (``_move`` does, chunk by chunk). Unsent records for another
    topic, or for none recorded, in a directory whose lock is free are reported, once each.
    """
    own = own.resolve()
    try:
        siblings = sorted(
            p
            for p in own.parent.iterdir()
            if family(p.name) == family(own.name) and p != own and p.is_dir() and not p.is_symlink()
        )
    except OSError as exc:
        log.warning("cannot look for orphaned spools beside %s: %s", own, exc)
        return []
    found = []
    for directory in siblings:
        try:
            unsent = unsent_bytes(directory)
            theirs = spool_dir.read_topic(directory)
            if not unsent:
                continue
            if theirs == topic:
                found.append(directory)
            elif not spool_dir.locked(directory):
                log.warning(
                    "the spool in %s holds %d unsent bytes for %s, not for %s: left for an "
                    "operator (nothing sends them until its own publisher starts there again)",
                    directory,
                    unsent,
                    f"topic {theirs}" if theirs else "no recorded topic",
                    topic,
                )
        except OSError:
            continue  # unreadable: not a spool of ours
    return found


def _move(adoption: Adoption, ours: Spool, topic: str, chunk: int, gap_s: float) -> None:
    """Move the orphan's records into ``ours``, one locked chunk at a time; remove it once empty.

    _Refused if ``ours`` refuses records; what moved before stays moved.
    """
    while True:
        try:
            orphan = Spool(adoption.directory, lock_timeout_s=0)
        except SpoolLocked:
            # Live (skipped quietly), or its owner (or another adopter) took it between chunks.
            if adoption.moved:
                adoption.outcome = "stopped: its lock was taken, its owner is back"
            return
        with orphan:
            if not orphan.empty():
                if spool_dir.read_topic(adoption.directory) != topic:
                    return  # its owner came back for another topic meanwhile
                records = orphan.read(chunk)
                if not records:
                    return  # unreadable now (the spool logged why): left for a later start
                try:
                    ours.append([(r.key, r.value) for r in records])
                except SpoolError as exc:
                    raise _Refused from exc
                adoption.moved += len(records)
                try:
                    orphan.commit(records[-1])
                except SpoolError as exc:
                    # In both spools now: sent twice if it is adopted again (at least once).
                    adoption.outcome = f"stopped: cannot mark records moved ({exc})"
                    return
            if orphan.empty():  # drained (or emptied meanwhile by another adopter)
                gone = remove_drained(adoption.directory)
                adoption.outcome = "removed" if gone else "emptied; other files kept"
                return
        time.sleep(gap_s)  # the lock free for longer than an owner's poll


def remove_drained(directory: Path) -> bool:
    """Delete an emptied spool's files, then its lock file and itself; whether it is gone.

    The caller holds the lock: the lock file goes last, while still held, so that a publisher
    waiting for it finds the directory gone and makes a new one. Files the spool does not own
    (rejected records) keep the directory and its lock file.
    """
    for pattern in _SPOOL_FILES:
        for path in directory.glob(pattern):
            path.unlink(missing_ok=True)
    if {p.name for p in directory.iterdir()} != {spool_dir.LOCK_FILE}:
        return False
    (directory / spool_dir.LOCK_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # a publisher came back and made its lock file anew
        directory.rmdir()
        return True
    return False
