"""Probes of a starting broker: its log for the ready line, a metadata request."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient


def _run_sync[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def probe_metadata(
    bootstrap_servers: str, timeout: float = 5.0, security: dict[str, Any] | None = None
) -> bool:
    """Whether a metadata request to ``bootstrap_servers`` succeeds and names a broker.

    ``security``: the client's TLS and SASL arguments (a secure broker's admin).
    """
    client = AIOKafkaClient(
        **{"bootstrap_servers": bootstrap_servers, **(security or {})},
        request_timeout_ms=int(timeout * 1000),
        connections_max_idle_ms=int(timeout * 1000) + 1000,
    )
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        return bool(client.cluster.brokers())
    except Exception:  # any failure means "not ready (yet)"
        return False
    finally:
        await client.close()


def _scan_for(path: Path, needle: str, offset: int) -> tuple[bool, int]:
    """Look for ``needle`` in what was appended to ``path`` since ``offset``.

    Returns whether it was found and the offset to resume from; the resume point overlaps by the
    needle's length so a line split across two reads is still seen.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except OSError:
        return False, offset
    found = needle.encode() in chunk
    return found, max(offset, offset + len(chunk) - len(needle))
