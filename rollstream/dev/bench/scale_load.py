"""The load generator of ``rollstream bench scale``: many multi-turn streaming sessions at once.

Runs as its own process (``python -m rollstream.dev.bench.scale_load SPEC_JSON``, light to
import), printing its result as one JSON line. Every session has its own connection and key,
starts at a moment spread over the ramp and makes its calls in a row with a growing
conversation, as an agent does; calls carry wall-clock times, so several processes' overlay.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from rollstream.dev.bench.stream_load import StreamFailed
from rollstream.interceptor.sessions import SESSION_HEADER


@dataclass(frozen=True)
class LoadSpec:
    """What one load process runs: sessions ``first`` to ``first + count - 1``."""

    url: str
    first: int
    count: int
    turns: int
    max_tokens: int
    start_at: float
    ramp_s: float
    key_prefix: str
    call_timeout_s: float = 600.0
    seed: int = 0


@dataclass
class LoadResult:
    """Every call as (session, turn, began, first content, end, error kind or ""), and the rest."""

    calls: list[tuple[int, int, float, float, float, str]] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    nofile_soft: int = 0
    nofile_hard: int = 0


def raise_nofile(wanted: int) -> tuple[int, int]:
    """Raise this process's open-file soft limit towards ``wanted``, within the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft, hard


def chat_body(messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    """A streamed Chat Completions request that always runs to ``max_tokens``."""
    return {
        "model": "rollstream-tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }


async def stream_call(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str
) -> tuple[str, float]:
    """One streamed call: (the answer's text, wall time of its first content)."""
    first = 0.0
    parts: list[str] = []
    finish, done = None, False
    # The session named as a launcher names it: a key nobody registered would be recorded
    # only as its keyed hash, and the run's records are found by their session ids.
    async with http.post(url, json=body, headers={SESSION_HEADER: key}) as resp:
        if resp.status != 200:
            await resp.read()
            raise StreamFailed(f"http_{resp.status}")
        async for raw in resp.content:
            line = raw.strip()
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise StreamFailed("stream_error")
                for choice in chunk.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        first = first or time.time()
                        parts.append(content)
                    finish = choice.get("finish_reason") or finish
    if not done or finish is None:
        raise StreamFailed("incomplete_stream")
    if finish != "length":  # ignore_eos: every answer runs to max_tokens
        raise StreamFailed(f"finish_{finish}")
    return "".join(parts), first


async def _session(spec: LoadSpec, index: int, offset: float, result: LoadResult) -> None:
    key = f"{spec.key_prefix}-{index}"
    messages = [
        {"role": "system", "content": "You are a helpful assistant working on a long task."},
        {"role": "user", "content": f"Session {index}: tell me about polar bears."},
    ]
    timeout = aiohttp.ClientTimeout(total=spec.call_timeout_s)
    # One connection per session, kept alive across its turns, as a harness's client does.
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.sleep(max(0.0, spec.start_at + offset - time.time()))
        for turn in range(spec.turns):
            began, first, kind = time.time(), 0.0, ""
            try:
                answer, first = await stream_call(
                    http, spec.url, chat_body(messages, spec.max_tokens), key
                )
            except StreamFailed as exc:
                kind, answer = exc.kind, ""
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                kind, answer = type(exc).__name__, ""
            result.calls.append((index, turn, began, first, time.time(), kind))
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"Good. Now step {turn + 2}, please."},
            ]


async def run_load(spec: LoadSpec) -> LoadResult:
    """Run the spec's sessions side by side; every call is recorded, failed or not."""
    result = LoadResult()
    result.nofile_soft, result.nofile_hard = raise_nofile(spec.count + 256)
    rng = random.Random(spec.seed * 1_000_003 + spec.first)
    offsets = [rng.uniform(0, spec.ramp_s) for _ in range(spec.count)]
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(
        *(_session(spec, spec.first + i, offsets[i], result) for i in range(spec.count))
    )
    result.cpu_s = round(time.process_time() - cpu, 3)
    result.wall_s = round(time.perf_counter() - wall, 3)
    return result


def main(argv: list[str]) -> None:
    """Entry point: the spec as JSON in ``argv[1]``; the result as JSON on stdout."""
    spec = LoadSpec(**json.loads(argv[1]))
    result = asyncio.run(run_load(spec))
    sys.stdout.write(json.dumps(asdict(result)) + "\n")


if __name__ == "__main__":
    main(sys.argv)
