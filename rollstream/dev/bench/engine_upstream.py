"""A real vLLM as a benchmark's upstream: started off the event loop, stopped the same way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rollstream.dev.engine.serve import EngineServer, EngineSettings
from rollstream.settings import StatePaths


@asynccontextmanager
async def vllm_upstream(
    family: str, served_name: str | None = None, port: int = 0
) -> AsyncIterator[EngineServer]:
    """VLLM serving ``family``'s tiny model (installed and built first if missing), running.

    The model plays the engine's scenarios (the default ones unless ROLLSTREAM_BACKEND_SCENARIOS
    names others); ``served_name`` is the model name clients ask for; port 0 is a free one.
    """
    server = EngineServer(
        EngineSettings(family=family, served_name=served_name, port=port), StatePaths()
    )
    # Starting takes a minute or more and polls with blocking sleeps: off the event loop.
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)
