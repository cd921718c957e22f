"""The interceptor's gate: new LLM calls wait at it while a trainer swaps the policy's weights."""

from __future__ import annotations

import asyncio


class Gate:
    """Holds new calls while paused; a pause ends by resume() or after its timeout."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def paused(self) -> bool:
        """Whether new calls are being held."""
        return not self._open.is_set()

    def pause(self, timeout_s: float) -> None:
        """Hold new calls for at most ``timeout_s`` seconds."""
        self._open.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(timeout_s, self.resume)

    def resume(self) -> None:
        """Let held and new calls through."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._open.set()

    async def wait(self) -> None:
        """Return once calls may go upstream."""
        await self._open.wait()
