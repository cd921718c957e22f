"""An append-only, fsync'd local spool of records waiting for the broker.

Records are framed as ``len(key) len(value) key value crc32`` (little-endian uint32 lengths)
in segment files. A consumer of the spool reads from the oldest segment, and after the broker
acknowledged a prefix, ``commit`` records how far it got (an fsync'd offset file); a fully sent
segment is deleted. After a crash the uncommitted tail is sent again: at least once, consumers
deduplicate by call id.

An append the disk refuses (a full disk) is cut back to where it started, so the segment stays
a sequence of whole frames and later appends stay readable.

A publisher's spool is locked while open (an exclusive ``flock`` on ``lock``, holding the
owner's pid), so that a spool nobody holds is known to be an orphan: another publisher of the
same topic (``meta.json``) may then adopt its records (``rollstream.producers.publisher.adopt``).
A ``Spool`` opened without ``lock_timeout_s`` is a view for tests and operators.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import struct
import threading
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rollstream.durable import append_durably, make_directory, remove_durably, replace_durably
from rollstream.errors import RollstreamError
from rollstream.producers.publisher import spool_dir

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
_CRC = struct.Struct("<I")
_NO_KEY = 0xFFFFFFFF
SEGMENT_BYTES = 64 * 1024 * 1024
#: How long a publisher waits for its own spool's lock: an adopter holds it for one chunk, a
#: previous owner for as long as its stop takes; longer means two publishers share the spool.
LOCK_TIMEOUT_S = 15.0


class SpoolError(RollstreamError):
    """The spool cannot be written (e.g. the disk is full); retriable once space returns."""

    retriable = True


class SpoolLocked(SpoolError):
    """Another open ``Spool`` (in this process or another) holds the directory's lock."""

    retriable = False

    def __init__(self, directory: Path, holder: str, waited: float) -> None:
        super().__init__(
            f"the spool in {directory} is held by pid {holder} (waited {waited:g} s): two "
            "publishers share a spool; give each its own state name or spool directory"
        )
        self.directory = directory
        self.holder = holder


@dataclass(frozen=True)
class SpooledRecord:
    """A record in the spool and where the next one starts."""

    key: bytes | None
    value: bytes
    segment: Path
    end: int


def encode_frames(records: list[tuple[bytes | None, bytes]]) -> bytes:
    """The records framed as the spool stores them (also used for rejected records)."""
    frames = bytearray()
    for key, value in records:
        k = key if key is not None else b""
        body = _HEADER.pack(len(k) if key is not None else _NO_KEY, len(value)) + k + value
        frames += body + _CRC.pack(zlib.crc32(body))
    return bytes(frames)


def _serialized[F: Callable[..., Any]](method: F) -> F:
    # Adoption appends from a worker thread while publish() may spool on the event loop.
    @functools.wraps(method)
    def serialized(self: Spool, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return cast(F, serialized)


class Spool:
    """Segments ``spool-<n>.log`` in a directory; ``<segment>.done`` holds the sent offset.

    With ``lock_timeout_s`` the spool is its publisher's: locked until ``close()`` (SpoolLocked
    if another holder keeps the lock that long), and ``topic`` is recorded for adopters.
    """

    def __init__(
        self,
        directory: Path,
        segment_bytes: int = SEGMENT_BYTES,
        *,
        topic: str | None = None,
        lock_timeout_s: float | None = None,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._mutex = threading.RLock()
        make_directory(directory)
        self._release: Callable[[], object] = lambda: None
        if lock_timeout_s is not None:
            fd = _lock(directory, lock_timeout_s)
            # Released when the spool is garbage: a publisher dropped without stop() must not
            # strand its directory until the process exits.
            self._release = weakref.finalize(self, os.close, fd)
        if topic is not None:
            spool_dir.write_topic(directory, topic)
        # The publisher asks whether the spool is empty before every batch: answered from
        # memory, recomputed from disk only after the spool changed (we are its only writer).
        self._pending: int | None = None
        # Sent offsets as this process knows them: ahead of the .done files when one could not
        # be written (a full disk), so a record is not sent twice by the same process.
        self._done: dict[Path, int] = {}
        self._torn = False  # a failed append could not be cut back: repair before the next
        #: Bytes that were not whole frames and were skipped (damage from outside); logged.
        self.skipped_bytes = 0
        self._repair()

    def close(self) -> None:
        """Release the lock (if held): the directory may then be reopened or adopted."""
        self._release()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repair(self) -> None:
        """Cut a torn frame (a crash mid-append) off the newest segment: appends stay readable.

        Parsing starts at the sent offset: bytes before it were sent (or skipped) already.
        """
        self._torn = False
        segments = self._segments()
        if not segments:
            return
        last = segments[-1]
        data = last.read_bytes()
        start = min(self._done_offset(last), len(data))
        valid = _parse(data, start, last, limit=len(data))
        end = valid[-1].end if valid else start
        if end < len(data):
            with last.open("rb+") as fh:
                fh.truncate(end)
                os.fsync(fh.fileno())
        self._pending = None

    def _segments(self) -> list[Path]:
        return sorted(self.directory.glob("spool-*.log"))

    def _done_offset(self, segment: Path) -> int:
        if segment in self._done:
            return self._done[segment]
        try:
            return int(segment.with_suffix(".done").read_text() or 0)
        except (OSError, ValueError):
            return 0

    @_serialized
    def append(self, records: list[tuple[bytes | None, bytes]]) -> None:
        """Append records durably (one fsync for the batch); SpoolError if the disk refuses.

        All or nothing: a refused append leaves the spool as it was before it.
        """
        if not records:
            return
        if self._torn:
            self._repair()
        segments = self._segments()
        segment = segments[-1] if segments else self.directory / "spool-000000001.log"
        if segment.exists() and segment.stat().st_size >= self.segment_bytes:
            number = int(segment.stem.split("-")[1]) + 1
            segment = self.directory / f"spool-{number:09d}.log"
        self._pending = None
        try:
            append_durably(segment, encode_frames(records))
        except OSError as exc:
            # Cutting back failed too (rare: the truncate itself refused): the next append
            # repairs the segment first.
            self._torn = not _whole_frames(segment, self._done_offset(segment))
            raise SpoolError(f"cannot write to the spool in {self.directory}: {exc}") from exc

    @_serialized
    def read(self, limit: int = 500) -> list[SpooledRecord]:
        """Up to ``limit`` unsent records from the oldest segment, in order.

        Bytes that are not a whole frame where one should start were damaged outside this
        process (our failed appends are cut back): they are skipped with an error in the log
        and counted in ``skipped_bytes``, rather than block every record after them.
        """
        for segment in self._segments():
            start = self._done_offset(segment)
            if start >= segment.stat().st_size:
                if segment != self._segments()[-1]:
                    self._remove(segment)
                    continue
                return []
            # From the sent offset on, only as far as ``limit`` frames reach: a segment is up
            # to 64 MiB and a drain takes it 500 records at a time.
            records = _read_frames(segment, start, limit)
            if records:
                return records
            data = segment.read_bytes()  # damage: the whole segment, to find the next frame
            if segment == self._segments()[-1] and self._torn:
                self._repair()
                return self.read(limit)
            # Skip to the next whole frame, not to the end: the damage is usually a few bytes,
            # and every valid record after it must still be sent.
            resume = _next_frame(data, start + 1)
            self.skipped_bytes += resume - start
            log.error(
                "spool segment %s is damaged at offset %d: %d bytes skipped",
                segment,
                start,
                resume - start,
            )
            with contextlib.suppress(SpoolError):  # the offset is kept in memory meanwhile
                self._mark_sent(segment, resume)
            return self.read(limit)
        return []

    @_serialized
    def commit(self, record: SpooledRecord) -> None:
        """Mark everything up to and including ``record`` as sent.

        Remembered in this process even when the offset file cannot be written (SpoolError):
        only a restart before the next successful commit sends those records again.
        """
        self._mark_sent(record.segment, record.end)
        if record.end >= record.segment.stat().st_size and len(self._segments()) > 1:
            self._remove(record.segment)

    def _mark_sent(self, segment: Path, offset: int) -> None:
        self._pending = None
        self._done[segment] = offset
        try:
            replace_durably(segment.with_suffix(".done"), str(offset).encode())
        except OSError as exc:
            raise SpoolError(f"cannot record the sent offset in {self.directory}: {exc}") from exc

    def _remove(self, segment: Path) -> None:
        self._pending = None
        # The segment before its offset: a crash between them leaves an offset without a
        # segment (ignored), never a sent segment without its offset (sent again).
        with contextlib.suppress(OSError):  # removed again at the next read
            remove_durably(segment, segment.with_suffix(".done"))
        self._done.pop(segment, None)

    @property
    @_serialized
    def pending_bytes(self) -> int:
        """Bytes not yet sent (framing included)."""
        if self._pending is None:
            self._pending = sum(
                max(0, s.stat().st_size - self._done_offset(s)) for s in self._segments()
            )
        return self._pending

    def empty(self) -> bool:
        """Whether nothing waits to be sent."""
        return self.pending_bytes == 0


def _lock(directory: Path, timeout: float) -> int:
    try:
        return spool_dir.lock(directory, timeout)
    except spool_dir.LockHeld as exc:
        raise SpoolLocked(directory, exc.holder, timeout) from None
    except OSError as exc:
        raise SpoolError(f"cannot lock the spool in {directory}: {exc}") from exc


def unsent_bytes(directory: Path) -> int:
    """Bytes not yet sent in a spool directory, read without opening (or locking) it."""
    total = 0
    for segment in directory.glob("spool-*.log"):
        try:
            done = int(segment.with_suffix(".done").read_text() or 0)
        except (OSError, ValueError):
            done = 0
        with contextlib.suppress(OSError):
            total += max(0, segment.stat().st_size - done)
    return total


def _whole_frames(segment: Path, start: int) -> bool:
    try:
        data = segment.read_bytes()
    except OSError:
        return True  # nothing there to repair
    valid = _parse(data, min(start, len(data)), segment, limit=len(data))
    return (valid[-1].end if valid else min(start, len(data))) == len(data)


def parse_frames(data: bytes, segment: Path) -> list[SpooledRecord]:
    """Every whole frame of ``data`` from its start (also used for rejected records)."""
    return _parse(data, 0, segment, limit=len(data))


def _read_frames(segment: Path, start: int, limit: int) -> list[SpooledRecord]:
    """Up to ``limit`` whole frames of ``segment`` from ``start``, reading no further."""
    records: list[SpooledRecord] = []
    pos = start
    with segment.open("rb") as fh:
        fh.seek(start)
        while len(records) < limit:
            header = fh.read(_HEADER.size)
            if len(header) < _HEADER.size:
                break
            key_len, value_len = _HEADER.unpack(header)
            k = key_len if key_len != _NO_KEY else 0
            # A damaged length can ask for more than the file holds: read() stops at its end.
            rest = fh.read(k + value_len + _CRC.size)
            frame = header + rest
            parsed = _parse(frame, 0, segment, 1)
            if not parsed:
                break
            pos += len(frame)
            records.append(SpooledRecord(parsed[0].key, parsed[0].value, segment, pos))
    return records


def _parse(data: bytes, start: int, segment: Path, limit: int) -> list[SpooledRecord]:
    records: list[SpooledRecord] = []
    pos = start
    while pos + _HEADER.size <= len(data) and len(records) < limit:
        key_len, value_len = _HEADER.unpack_from(data, pos)
        has_key = key_len != _NO_KEY
        k = key_len if has_key else 0
        end = pos + _HEADER.size + k + value_len + _CRC.size
        if end > len(data):
            break  # a torn write at the very end (crash mid-append): not a record
        body = data[pos : end - _CRC.size]
        (crc,) = _CRC.unpack_from(data, end - _CRC.size)
        if zlib.crc32(body) != crc:
            break
        key = body[_HEADER.size : _HEADER.size + k] if has_key else None
        records.append(SpooledRecord(key, body[_HEADER.size + k :], segment, end))
        pos = end
    return records


def _next_frame(data: bytes, start: int) -> int:
    """The first offset from ``start`` where a whole frame with a valid CRC begins, else the end.

    A false match needs plausible lengths and a matching CRC-32 at once: about one in four
    billion offsets, each of them scanned only after damage.
    """
    for pos in range(start, len(data) - _HEADER.size - _CRC.size + 1):
        key_len, value_len = _HEADER.unpack_from(data, pos)
        k = 0 if key_len == _NO_KEY else key_len
        end = pos + _HEADER.size + k + value_len + _CRC.size
        if end <= len(data) and _parse(data, pos, Path(), 1):
            return pos
    return len(data)
