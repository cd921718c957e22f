"""Where rollstream's own CPU goes in one intercepted call, measured on a real upstream stream.

The interceptor benchmark compares whole processes; this splits our share of it into the pure
steps the addon runs (no proxy, no Kafka client), on the bytes the backend really streams for
the benchmark's 8k-token call, so a missed target comes with the profile that explains it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import CaptureOptions, prepare_chat_request
from rollstream.apis.sse import SSEParser
from rollstream.interceptor.recording import CallState, build_record
from rollstream.interceptor.sessions import SessionLedger
from rollstream.interceptor.streaming import PROMPT_IDS_KEY
from rollstream.schemas import ApiKind, AvroSerializer, jsonfast

STEPS = ("request", "stream", "record", "avro")


async def upstream_chunks(upstream: str, body: dict[str, Any]) -> list[bytes]:
    """The raw reads of one streamed answer, asked with rollstream's capture fields."""
    asked, _ = prepare_chat_request(body, CaptureOptions())
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{upstream}/v1/chat/completions", json=asked) as response,
    ):
        return [chunk async for chunk in response.content.iter_any()]


def _one_call(raw_request: bytes, chunks: list[bytes], serializer: AvroSerializer) -> list[float]:
    clock = time.perf_counter
    adapter = ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS]
    t0 = clock()
    body = jsonfast.loads(raw_request)
    upstream, asked = prepare_chat_request(adapter.to_chat(body, "m"), CaptureOptions())
    jsonfast.dumps(upstream)
    t1 = clock()
    state = CallState(ApiKind.CHAT_COMPLETIONS, "bench", body, upstream, asked, stream=True)
    # As the addon parses a Chat Completions stream whose harness did not ask for the ids.
    parser, translator = SSEParser(take_ids=PROMPT_IDS_KEY), adapter.stream(body, asked)
    for chunk in [*chunks, b""]:
        for event in parser.feed(chunk) if chunk else parser.flush():
            if isinstance(event.data, dict):
                if event.token_ids is not None:
                    state.capture.set_packed_prompt_ids(event.token_ids)
                state.capture.add_chunk(event.data)
                b"".join(e.encode() for e in translator.feed(event.data))
    t2 = clock()
    record, _ = build_record(state, SessionLedger(), "m", 0)
    t3 = clock()
    serializer.encode(record)
    t4 = clock()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def measure_call_costs(
    raw_request: bytes, chunks: list[bytes], repeats: int = 200
) -> dict[str, float]:
    """Mean milliseconds per call of each step, and their total."""
    serializer = AvroSerializer()
    run: Callable[[], list[float]] = lambda: _one_call(raw_request, chunks, serializer)  # noqa: E731
    for _ in range(20):  # warm-up
        run()
    totals = [0.0] * len(STEPS)
    for _ in range(repeats):
        totals = [a + b for a, b in zip(totals, run(), strict=True)]
    costs = {step: round(t / repeats * 1000, 3) for step, t in zip(STEPS, totals, strict=True)}
    costs["total"] = round(sum(totals) / repeats * 1000, 3)
    return costs
