"""Export: scored records (or trajectories) to JSONL or Parquet for SFT and offline analysis.

One row per trajectory segment (:mod:`.rows`, pure), files written as they go
(:mod:`.writers`), and the group-less read loop with ``--follow`` (:mod:`.run`).
"""

from rollstream.consumers.export.rows import (
    EXPORT_SCHEMA,
    exportable,
    json_line,
    passes,
    record_batch,
    rows_of,
)
from rollstream.consumers.export.run import ExportOptions, ExportReport, export, record_rows
from rollstream.consumers.export.writers import format_for, open_writer

__all__ = [
    "EXPORT_SCHEMA",
    "ExportOptions",
    "ExportReport",
    "export",
    "exportable",
    "format_for",
    "json_line",
    "open_writer",
    "passes",
    "record_batch",
    "record_rows",
    "rows_of",
]
