"""A service written on the transactional processor: its lifecycle and its progress lines.

The reconstructor and the scorer each hold a :class:`TransactionalProcessor` and supply the
transformation; what starting, stopping and running them means is the same for both, so it is
written here once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Self

from rollstream.kafka.processor import TransactionalProcessor

log = logging.getLogger(__name__)


class ProcessorService:
    """Start, stop and run a service's processor; log ``progress()`` now and then."""

    #: The service's name in its progress lines.
    label: str = "processor"
    progress_every_s: float = 30.0
    processor: TransactionalProcessor[Any]

    async def start(self) -> None:
        """Join the group; each partition's producer (and state) come with its assignment."""
        await self.processor.start()

    async def stop(self) -> None:
        """Leave the group; uncommitted work is the partitions' next owner's."""
        await self.processor.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Poll, transform, commit; until ``stop`` is set."""
        logging_task = asyncio.create_task(self._log_progress(stop))
        try:
            await self.processor.run(stop)
        finally:
            logging_task.cancel()

    def progress(self) -> str:
        """One line of counters for the log."""
        return str(self.processor.metrics)

    async def _log_progress(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self.progress_every_s)
            log.info("%s: %s", self.label, self.progress())
