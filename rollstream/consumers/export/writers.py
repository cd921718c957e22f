"""Export files: JSONL written line by line, Parquet in row groups through one writer.

Both flush as they go so a ``--follow`` export is usable while it runs (JSONL) and a stopped
one is complete up to the last record read (both). A Parquet file is readable only once
closed (the footer comes last), so :meth:`ParquetExportWriter.close` runs on every stop.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from rollstream.consumers.export.rows import EXPORT_SCHEMA, Row, json_line, record_batch, row_tokens
from rollstream.errors import ConfigurationError

ExportFormat = Literal["jsonl", "parquet"]

_SUFFIXES: dict[str, ExportFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}

#: A row group is written once it holds this many tokens, whatever its row count: a few
#: thousand 100k-token segments would otherwise sit in memory.
MAX_GROUP_TOKENS = 16 * 1024 * 1024


def format_for(path: Path, given: str | None) -> ExportFormat:
    """The format asked for, else the one ``path``'s suffix names; ConfigurationError if neither."""
    if given is not None:
        if given not in ("jsonl", "parquet"):
            raise ConfigurationError(f"unknown export format {given!r} (jsonl or parquet)")
        return "jsonl" if given == "jsonl" else "parquet"
    found = _SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise ConfigurationError(
            f"cannot tell the format from {path.name!r}: give --format jsonl or parquet"
        )
    return found


class ExportWriter(Protocol):
    """Where rows go; ``rows_written`` counts rows already in the file."""

    rows_written: int

    def write(self, rows: list[Row]) -> None:
        """Add rows (written now or buffered)."""

    def tick(self, now: float) -> None:
        """Called every so often: write what has been buffered too long."""

    def close(self) -> None:
        """Write everything buffered and close the file."""


class JsonlExportWriter:
    """One JSON object per line, flushed after every write."""

    def __init__(self, path: Path) -> None:
        self.rows_written = 0
        self._file: BinaryIO = path.open("wb")

    def write(self, rows: list[Row]) -> None:
        """Write the rows and flush, so a follower of the file sees whole records."""
        if not rows:
            return
        self._file.write(b"".join(json_line(row) for row in rows))
        self._file.flush()
        self.rows_written += len(rows)

    def tick(self, now: float) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Close the file."""
        self._file.close()


class ParquetExportWriter:
    """Row groups of :data:`EXPORT_SCHEMA`, written when big enough or old enough."""

    def __init__(
        self,
        path: Path,
        *,
        group_rows: int = 1000,
        flush_interval_s: float = 5.0,
        max_group_tokens: int = MAX_GROUP_TOKENS,
        now: float | None = None,
    ) -> None:
        self.rows_written = 0
        self.group_rows = group_rows
        self.flush_interval_s = flush_interval_s
        self.max_group_tokens = max_group_tokens
        self._buffer: list[Row] = []
        self._tokens = 0
        self._since = time.monotonic() if now is None else now
        try:
            self._writer = pq.ParquetWriter(path, EXPORT_SCHEMA, compression="zstd")
        except (OSError, pa.ArrowException) as exc:
            raise ConfigurationError(f"cannot write {path}: {exc}") from exc

    def write(self, rows: list[Row]) -> None:
        """Buffer the rows; write a row group once it has enough rows or tokens."""
        self._buffer += rows
        self._tokens += sum(row_tokens(row) for row in rows)
        if len(self._buffer) >= self.group_rows or self._tokens >= self.max_group_tokens:
            self._flush()

    def tick(self, now: float) -> None:
        """Write the buffered rows if the oldest waited ``flush_interval_s``."""
        if not self._buffer:
            self._since = now
        elif now - self._since >= self.flush_interval_s:
            self._flush(now)

    def close(self) -> None:
        """Write the last row group and the footer."""
        self._flush()
        self._writer.close()

    def _flush(self, now: float | None = None) -> None:
        if self._buffer:
            self._writer.write_batch(record_batch(self._buffer))
            self.rows_written += len(self._buffer)
        self._buffer, self._tokens = [], 0
        self._since = time.monotonic() if now is None else now


def open_writer(
    path: Path, fmt: ExportFormat, *, group_rows: int = 1000, flush_interval_s: float = 5.0
) -> ExportWriter:
    """A writer of ``fmt`` creating (or replacing) ``path``."""
    if fmt == "parquet":
        return ParquetExportWriter(path, group_rows=group_rows, flush_interval_s=flush_interval_s)
    try:
        return JsonlExportWriter(path)
    except OSError as exc:
        raise ConfigurationError(f"cannot write {path}: {exc}") from exc
