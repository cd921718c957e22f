"""The capture publisher's counters, read by the admin ports' ``/health`` and ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PublisherMetrics:
    """Counters for ``/metrics``."""

    published: int = 0
    batches: int = 0
    spooled: int = 0
    drained: int = 0
    #: Records moved into our spool from orphaned ones beside it (see ``adopt``), at start.
    adopted: int = 0
    #: Records lost: the spool could not be written and the memory bound was reached.
    dropped: int = 0
    #: Records no broker would take (over the record budget or the topic's message size),
    #: set aside next to the spool (see rollstream.producers.publisher.rejected) and skipped.
    rejected: int = 0
    send_failures: int = 0
    spool_errors: int = 0
    spool_alarm: bool = False
    #: Records held in memory because the spool could not be written (sent or spooled later).
    held: int = 0
    connected: bool = False
    last_error: str = ""
    queue_depth: int = 0
    spool_bytes: int = 0
    bytes_published: int = 0
