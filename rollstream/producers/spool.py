"""An append-only, fsync'd local spool of records waiting for the broker.

Records are framed as ``len(key) len(value) key value crc32`` (little-endian uint32 lengths)
in segment files. A consumer of the spool reads from the oldest segment, and after the broker
acknowledged a prefix, ``commit`` records how far it got (an fsync'd offset file); a fully sent
segment is deleted. After a crash the uncommitted tail is sent again: at least once, consumers
deduplicate by call id.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from rollstream.errors import RollstreamError

_HEADER = struct.Struct("<II")
_CRC = struct.Struct("<I")
SEGMENT_BYTES = 64 * 1024 * 1024


class SpoolError(RollstreamError):
    """The spool cannot be written (e.g. the disk is full); retriable once space returns."""

    retriable = True


@dataclass(frozen=True)
class SpooledRecord:
    """A record in the spool and where the next one starts."""

    key: bytes | None
    value: bytes
    segment: Path
    end: int


class Spool:
    """Segments ``spool-<n>.log`` in a directory; ``<segment>.done`` holds the sent offset."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        # The publisher asks whether the spool is empty before every batch: answered from
        # memory, recomputed from disk only after the spool changed (we are its only writer).
        self._pending: int | None = None
        self._repair()

    def _repair(self) -> None:
        """Cut a torn frame (a crash mid-append) off the newest segment: appends stay readable."""
        segments = self._segments()
        if not segments:
            return
        last = segments[-1]
        data = last.read_bytes()
        valid = _parse(data, 0, last, limit=len(data))
        end = valid[-1].end if valid else 0
        if end < len(data):
            with last.open("rb+") as fh:
                fh.truncate(end)
                os.fsync(fh.fileno())

    def _segments(self) -> list[Path]:
        return sorted(self.directory.glob("spool-*.log"))

    def _done_offset(self, segment: Path) -> int:
        try:
            return int(segment.with_suffix(".done").read_text() or 0)
        except (OSError, ValueError):
            return 0

    def append(self, records: list[tuple[bytes | None, bytes]]) -> None:
        """Append records durably (one fsync for the batch); SpoolError if the disk refuses."""
        if not records:
            return
        segments = self._segments()
        segment = segments[-1] if segments else self.directory / "spool-000000001.log"
        if segment.exists() and segment.stat().st_size >= self.segment_bytes:
            number = int(segment.stem.split("-")[1]) + 1
            segment = self.directory / f"spool-{number:09d}.log"
        frames = bytearray()
        for key, value in records:
            k = key if key is not None else b""
            body = _HEADER.pack(len(k) if key is not None else 0xFFFFFFFF, len(value)) + k + value
            frames += body + _CRC.pack(zlib.crc32(body))
        self._pending = None
        try:
            with segment.open("ab") as fh:
                fh.write(frames)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise SpoolError(f"cannot write to the spool in {self.directory}: {exc}") from exc

    def read(self, limit: int = 500) -> list[SpooledRecord]:
        """Up to ``limit`` unsent records from the oldest segment, in order."""
        for segment in self._segments():
            start = self._done_offset(segment)
            data = segment.read_bytes()
            if start >= len(data):
                if segment != self._segments()[-1]:
                    self._remove(segment)
                    continue
                return []
            return _parse(data, start, segment, limit)
        return []

    def commit(self, record: SpooledRecord) -> None:
        """Mark everything up to and including ``record`` as sent."""
        self._pending = None
        done = record.segment.with_suffix(".done")
        tmp = done.with_suffix(".tmp")
        tmp.write_text(str(record.end))
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        tmp.replace(done)
        if record.end >= record.segment.stat().st_size and len(self._segments()) > 1:
            self._remove(record.segment)

    def _remove(self, segment: Path) -> None:
        self._pending = None
        segment.unlink(missing_ok=True)
        segment.with_suffix(".done").unlink(missing_ok=True)

    @property
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


def _parse(data: bytes, start: int, segment: Path, limit: int) -> list[SpooledRecord]:
    records: list[SpooledRecord] = []
    pos = start
    while pos + _HEADER.size <= len(data) and len(records) < limit:
        key_len, value_len = _HEADER.unpack_from(data, pos)
        has_key = key_len != 0xFFFFFFFF
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
