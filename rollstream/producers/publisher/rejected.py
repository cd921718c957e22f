"""Records no broker will take (too large for the topic), set aside for an operator.

Next to the spool: ``rejected.jsonl`` says, one JSON object a line, when a record was set aside,
for which topic, its key, its size and why (the broker's error or the record budget);
``rejected.log`` holds the records themselves, framed as in the spool, at the ``offset`` the
line gives. The publisher carries on with later records; nothing reads this back on its own.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rollstream.durable import append_durably, make_directory
from rollstream.producers.publisher.metrics import PublisherMetrics
from rollstream.producers.publisher.spool import (
    SpoolError,
    encode_frames,
    parse_frames,
)

log = logging.getLogger(__name__)

#: Past this much in ``rejected.log``, only the line in ``rejected.jsonl`` is kept (``offset``
#: null): a stream of oversized records must not fill the disk the spool needs.
KEEP_VALUES_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class RejectedRecord:
    """One record set aside: where it was going, why it could not, and the record if kept."""

    at: str
    topic: str
    key: bytes | None
    size: int
    reason: str
    value: bytes | None


class RejectedRecords:
    """``rejected.jsonl`` (reasons) and ``rejected.log`` (records) in a directory."""

    def __init__(self, directory: Path, keep_values_bytes: int = KEEP_VALUES_BYTES) -> None:
        self.directory = directory
        self.keep_values_bytes = keep_values_bytes
        self.index = directory / "rejected.jsonl"
        self.records = directory / "rejected.log"

    def add(self, topic: str, key: bytes | None, value: bytes, reason: str) -> None:
        """Set one record aside durably; SpoolError if the disk refuses."""
        make_directory(self.directory)
        kept = self.records.stat().st_size if self.records.exists() else 0
        try:
            offset = None
            if kept + len(value) <= self.keep_values_bytes:
                offset = append_durably(self.records, encode_frames([(key, value)]))
            line = {
                "at": datetime.now(UTC).isoformat(),
                "topic": topic,
                "key": None if key is None else key.decode("utf-8", "replace"),
                "size": len(key or b"") + len(value),
                "reason": reason,
                "offset": offset,
            }
            append_durably(self.index, (json.dumps(line) + "\n").encode())
        except OSError as exc:
            raise SpoolError(
                f"cannot set a rejected record aside in {self.directory}: {exc}"
            ) from exc

    def set_aside(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        reason: str,
        metrics: PublisherMetrics,
    ) -> None:
        """Add a record and log where it went; a disk that refuses it is counted, not raised."""
        where = f"set aside in {self.index}"
        try:
            self.add(topic, key, value, reason)
        except SpoolError as exc:
            metrics.spool_errors += 1
            where = f"LOST, not set aside ({exc})"
        log.error(
            "record for %s (key %r, %d bytes) rejected: %s; %s",
            topic,
            key,
            len(value),
            reason,
            where,
        )

    def read(self) -> list[RejectedRecord]:
        """Everything set aside so far, oldest first (for operators and tests)."""
        if not self.index.exists():
            return []
        data = self.records.read_bytes() if self.records.exists() else b""
        out = []
        for text in self.index.read_text().splitlines():
            line = json.loads(text)
            value = None
            key = None if line["key"] is None else str(line["key"]).encode()
            if line["offset"] is not None:
                frames = parse_frames(data[line["offset"] :], self.records)
                if frames:
                    key, value = frames[0].key, frames[0].value
            out.append(
                RejectedRecord(line["at"], line["topic"], key, line["size"], line["reason"], value)
            )
        return out
