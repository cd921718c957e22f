"""The interceptor's gate: new LLM calls wait at it while a trainer swaps the policy's weights.

A pause holds until it is resumed: calls sent mid-sync would be sampled with weights that are
neither the old nor the new policy's, or recorded under the wrong version. A pausing client that
may die before resuming can ask for a lease: the pause then ends on its own after that many
seconds, which is logged and counted (``rollstream_pause_leases_expired_total``) because it means
the weight sync it guarded did not finish in time.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class Gate:
    """Holds new calls while paused; a pause ends by ``resume()``, or when its lease runs out."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._lease: asyncio.TimerHandle | None = None
        self.leases_expired = 0

    @property
    def paused(self) -> bool:
        """Whether new calls are being held."""
        return not self._open.is_set()

    def pause(self, lease_s: float | None = None) -> None:
        """Hold new calls until ``resume()``; with a lease, for at most ``lease_s`` seconds.

        A second pause replaces the first one's lease (or removes it, given none).
        """
        self._open.clear()
        if self._lease is not None:
            self._lease.cancel()
            self._lease = None
        if lease_s is not None:
            self._lease = asyncio.get_running_loop().call_later(lease_s, self._expire, lease_s)

    def resume(self) -> None:
        """Let held and new calls through."""
        if self._lease is not None:
            self._lease.cancel()
            self._lease = None
        self._open.set()

    async def wait(self) -> None:
        """Return once calls may go upstream."""
        await self._open.wait()

    def _expire(self, lease_s: float) -> None:
        self._lease = None
        self.leases_expired += 1
        log.warning(
            "the pause's %g s lease ran out without a resume (did the pausing trainer die?): "
            "held calls go upstream again",
            lease_s,
        )
        self._open.set()
