"""The served model's context length: given, or read from the upstream's ``/v1/models``.

vLLM and SGLang list ``max_model_len`` per served model. The interceptor reads it at start;
while the upstream has not answered (not up yet, still loading), a call sets off one more read
in the background, RECHECK_S seconds after the last and twice as long after each failed one (up
to MAX_RECHECK_S), and goes out unchanged. A server that answers without saying is not asked
again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp

from rollstream.interceptor.settings import InterceptorSettings

log = logging.getLogger(__name__)

#: Seconds between two reads of an upstream that has not answered yet, at first and at most.
RECHECK_S = 5.0
MAX_RECHECK_S = 300.0


class ServedContext:
    """What the interceptor knows of the served context (``max_model_len``, None: unknown)."""

    def __init__(self, settings: InterceptorSettings) -> None:
        self._settings = settings
        self.max_model_len: int | None = settings.max_model_len
        self._read_at = 0.0
        self._interval = RECHECK_S
        self._reading: asyncio.Task[None] | None = None
        self._started = False  # reads only between start() and stop()
        self._unsaid = False  # the upstream answered without a length: not asked again

    async def start(self) -> None:
        """Read the context length once (unless it was given); an unknown one is read later."""
        self._started = True
        if self._settings.max_model_len is None:
            await self._read()

    async def _read(self) -> None:
        self._read_at = time.monotonic()
        settings = self._settings
        url = settings.upstream.rstrip("/") + "/v1/models"
        headers = {}
        if settings.upstream_api_key is not None:
            headers["authorization"] = f"Bearer {settings.upstream_api_key.get_secret_value()}"
        try:
            async with (
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=5), headers=headers
                ) as client,
                client.get(url) as response,
            ):
                listed = await response.json() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.info("the served context length is not known yet (%s: %s)", url, exc)
            self._interval = min(self._interval * 2, MAX_RECHECK_S)
            return
        limit = model_context(listed, settings.upstream_model)
        if limit is None:
            log.info("the upstream's /v1/models does not say the served context length")
            self._unsaid = listed is not None
            self._interval = min(self._interval * 2, MAX_RECHECK_S)
            return
        if limit != self.max_model_len:
            log.info("served context: %d tokens (the upstream's /v1/models)", limit)
        self.max_model_len = limit

    def read_if_due(self) -> None:
        """While the length is unknown, read it again in the background if it is time."""
        if not self._started or self.max_model_len is not None or self._unsaid:
            return
        if time.monotonic() - self._read_at < self._interval:
            return
        if self._reading is None or self._reading.done():
            self._read_at = time.monotonic()
            self._reading = asyncio.get_running_loop().create_task(self._read())

    async def stop(self) -> None:
        """Wait for a read under way (it is bounded)."""
        self._started = False
        if self._reading is not None:
            await asyncio.gather(self._reading, return_exceptions=True)


def model_context(listed: Any, model: str | None) -> int | None:
    """``max_model_len`` of ``model`` (or of the only model) in a ``/v1/models`` answer."""
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    chosen = [e for e in entries if model is not None and e.get("id") == model]
    if not chosen and len(entries) == 1:
        chosen = entries
    limit = chosen[0].get("max_model_len") if chosen else None
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
