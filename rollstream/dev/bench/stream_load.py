"""The load generator of ``rollstream bench stream``: long streamed answers, calls in a row.

Runs as its own process (``python -m rollstream.dev.bench.stream_load SPEC_JSON``) and prints its
result as one JSON line. Each session has its own key, its own connection (a connector of one)
and its own URL (its worker's, as the node hands them out), and makes one streamed call after
another until the duration is over; the call in flight then runs to its end.

The generator has to cost little next to the proxy it loads, so it does not parse the stream:
it counts SSE events in the raw bytes and checks only the tail for the closing chunk. With
``read_batch_ms`` the event loop also sleeps (blocking) that long between turns, so each socket
is read once for many events rather than once per event: on a two-core machine every
microsecond the generator spends is one the backend or the proxy does not get.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

EVENT = b"data: {"
DONE = b"data: [DONE]"
#: The closing chunk of an answer cut at ``max_tokens`` (``ignore_eos``: every answer is).
LENGTH = re.compile(rb'"finish_reason":\s*"length"')
_TAIL = 1024


@dataclass(frozen=True)
class StreamLoadSpec:
    """What one load process runs: its sessions' keys and URLs, and when."""

    keys: list[str]
    urls: list[str]
    body: dict[str, Any]
    start_at: float
    duration_s: float
    read_batch_ms: float = 2.0
    call_timeout_s: float = 120.0


@dataclass
class StreamLoadResult:
    """Every call as (session index, began, end, SSE events, error kind or ""), and the CPU."""

    calls: list[tuple[int, float, float, int, str]] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0


class StreamFailed(Exception):
    """A call that did not end as a complete answer cut at ``max_tokens``; ``kind`` says how."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


async def stream_answer(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str
) -> int:
    """One streamed call to its end; the SSE events with a JSON payload it carried."""
    events, tail = 0, b""
    async with http.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
        if resp.status != 200:
            await resp.read()
            raise StreamFailed(f"http_{resp.status}")
        async for data in resp.content.iter_any():
            # The previous read's last bytes go in front: an event marker split across two
            # reads is counted once (it is longer than the bytes carried over).
            buffer = tail[-(len(EVENT) - 1) :] + data
            events += buffer.count(EVENT)
            tail = (tail + data)[-_TAIL:]
    if DONE not in tail:
        raise StreamFailed("incomplete_stream")
    if not LENGTH.search(tail):
        raise StreamFailed("not_cut_at_max_tokens")
    return events


async def _session(spec: StreamLoadSpec, index: int, result: StreamLoadResult) -> None:
    timeout = aiohttp.ClientTimeout(total=spec.call_timeout_s)
    # One connection per session, kept alive across its calls, as a harness's client does.
    connector = aiohttp.TCPConnector(limit=1)
    url = f"{spec.urls[index]}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.sleep(max(0.0, spec.start_at - time.time()))
        end_at = spec.start_at + spec.duration_s
        made = 0
        # At least one call: a load process that started after its window (a busy machine
        # slow to import it) still measures a call rather than report none.
        while made == 0 or time.time() < end_at:
            made += 1
            began, events, kind = time.time(), 0, ""
            try:
                events = await stream_answer(http, url, spec.body, spec.keys[index])
            except StreamFailed as exc:
                kind = exc.kind
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                kind = type(exc).__name__
            result.calls.append((index, began, time.time(), events, kind))
            if kind:
                await asyncio.sleep(0.05)  # a proxy refusing at once must not spin the loop


async def _batch_reads(seconds: float) -> None:
    """Block the loop for ``seconds`` between turns, so reads find many events waiting."""
    while True:
        time.sleep(seconds)  # noqa: ASYNC251 - blocking is the point: nothing is read meanwhile
        await asyncio.sleep(0)


async def run_stream_load(spec: StreamLoadSpec) -> StreamLoadResult:
    """Run the spec's sessions side by side until the duration is over."""
    result = StreamLoadResult()
    await asyncio.sleep(max(0.0, spec.start_at - time.time()))
    batcher = (
        asyncio.create_task(_batch_reads(spec.read_batch_ms / 1000))
        if spec.read_batch_ms > 0
        else None
    )
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        await asyncio.gather(*(_session(spec, i, result) for i in range(len(spec.keys))))
    finally:
        if batcher is not None:
            batcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await batcher
    result.cpu_s = round(time.process_time() - cpu, 3)
    result.wall_s = round(time.perf_counter() - wall, 3)
    return result


def main(argv: list[str]) -> None:
    """Entry point: the spec as JSON in ``argv[1]``; the result as JSON on stdout."""
    spec = StreamLoadSpec(**json.loads(argv[1]))
    result = asyncio.run(run_stream_load(spec))
    sys.stdout.write(json.dumps(asdict(result)) + "\n")


if __name__ == "__main__":
    main(sys.argv)
