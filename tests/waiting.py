"""Bounded waits for tests: poll a condition until it holds, or fail saying what never did."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable


async def until(
    condition: Callable[[], object],
    timeout: float = 30.0,
    what: str = "the condition",
    interval: float = 0.02,
) -> None:
    """Return once ``condition()`` (plain or awaitable) is true; AssertionError after ``timeout``.

    Polling, because the parts under test signal nothing a test could await instead.
    """
    try:
        async with asyncio.timeout(timeout):
            while True:
                held = condition()
                if inspect.isawaitable(held):
                    held = await held
                if held:
                    return
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g}s: {what}") from None
