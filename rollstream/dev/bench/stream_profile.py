"""Where a streamed token's proxy CPU goes: cProfile of plain mitmproxy and of a rollstream worker.

    python -m rollstream.dev.bench.stream_profile [--seconds 10] [--top 25] [--out DIR]

Runs the ``bench stream`` backend and load through ``mitmdump`` and through one rollstream
worker (publishing under a topic prefix of its own, deleted afterwards), each proxy profiled
only while the load runs (switched by two real-time signals: mitmproxy keeps SIGUSR1 and
SIGUSR2), and prints the hottest functions, the time per area and rollstream's entry points in
µs per streamed token. cProfile inflates what it measures: the shares and the difference
between the two paths are what count. ``--out`` keeps the ``.prof`` files for pstats.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.dev.bench.call_costs import upstream_chunks
from rollstream.dev.bench.common import spawn_pinned, wait_healthy
from rollstream.dev.bench.scale import bench_env
from rollstream.dev.bench.stream import (
    StreamBenchConfig,
    proxy_command,
    request_body,
    start_backend,
    start_load,
)
from rollstream.dev.bench.stream_load import stream_answer
from rollstream.host import free_port
from rollstream.settings import KafkaSettings

_ON, _OFF = signal.SIGRTMIN + 1, signal.SIGRTMIN + 2
# The proxy's own main, profiled only between _ON and _OFF (warm-up and stop left out).
_PROFILED = f"""
import cProfile, runpy, signal, sys
out, target, *args = sys.argv[1:]
profile = cProfile.Profile()
signal.signal({_ON}, lambda *_: profile.enable())
signal.signal({_OFF}, lambda *_: profile.disable())
try:
    if target == "mitmdump":
        from mitmproxy.tools.main import mitmdump
        mitmdump(args)
    else:
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(out)
"""

#: Areas of the code, by a piece of the file's path; the first that matches names it.
AREAS = (
    ("rollstream", "/rollstream/"),
    ("mitmproxy", "/mitmproxy/"),
    ("aiokafka", "/aiokafka/"),
    ("asyncio", "/asyncio/"),
    ("json", "/json/"),
    ("stdlib", "/lib/python"),
)


def area(filename: str) -> str:
    """The area a function's file belongs to (``builtins`` for C functions)."""
    for name, piece in AREAS:
        if piece in filename:
            return name
    return "builtins" if filename == "~" else "other"


def _label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    where = "/".join(parts[-2:]) if "site-packages" not in parts else "/".join(parts[-3:])
    return f"{where}:{line}:{name}"


def summarise_profile(path: Path, tokens: int, top: int) -> dict[str, Any]:
    """The profile's hottest functions (own time) and areas, in µs per streamed token."""
    stats: dict[Any, Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    per = 1e6 / max(tokens, 1)
    total = sum(tt for _, _, tt, _, _ in stats.values())
    areas: dict[str, float] = {}
    for key, (_, _, tt, _, _) in stats.items():
        areas[area(key[0])] = areas.get(area(key[0]), 0.0) + tt
    hottest = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    # rollstream's entry points as mitmproxy calls them, cumulative (its callees included).
    entry = [
        (k, v)
        for k, v in stats.items()
        if area(k[0]) == "rollstream" and not any(area(c[0]) == "rollstream" for c in v[4])
    ]
    entry.sort(key=lambda item: item[1][3], reverse=True)
    return {
        "tokens": tokens,
        "us_per_token": round(total * per, 1),
        "areas": {k: round(v * per, 2) for k, v in sorted(areas.items(), key=lambda i: -i[1])},
        "hottest": [
            (_label(k), round(v[2] * per, 2), v[1], round(v[2] / total * 100, 1))
            for k, v in hottest
        ],
        "rollstream_entries": [(_label(k), round(v[3] * per, 2), v[1]) for k, v in entry[:top]],
    }


async def _profile_path(
    path: str, config: StreamBenchConfig, upstream: str, tmp: Path, env: dict[str, str], out: Path
) -> int:
    """Run the load through one profiled proxy into the profile ``out``; the tokens streamed."""
    port, admin = free_port(), free_port()
    command = proxy_command(path, port, admin, upstream)
    target = ["mitmdump", *command[1:]] if path == "mitmproxy" else ["rollstream", *command[3:]]
    proxy = spawn_pinned(
        [sys.executable, "-c", _PROFILED, str(out), *target], None, tmp / f"{path}.log", env
    )
    base = f"http://127.0.0.1:{port}"
    plain = path == "mitmproxy"
    body = request_body(config, plain)
    keys = [f"profile-{os.getpid()}-{path}-{i}" for i in range(config.sessions)]
    try:
        await wait_healthy(f"{base if plain else f'http://127.0.0.1:{admin}'}/health")
        async with aiohttp.ClientSession() as http:
            url = f"{base}/v1/chat/completions"
            await asyncio.gather(*(stream_answer(http, url, body, key) for key in keys))
        load = await start_load(config, keys, [base] * len(keys), body, tmp, env)
        proxy.send_signal(_ON)
        results = await load
        proxy.send_signal(_OFF)
    finally:
        proxy.terminate()
        proxy.wait(timeout=60)
    ok = sum(1 for r in results for c in r.calls if not c[4])
    return ok * config.max_tokens


def split_events(chunks: list[bytes]) -> list[bytes]:
    """The stream as the proxy reads it under this load: one SSE event per read."""
    events = b"".join(chunks).split(b"\n\n")
    return [e + b"\n\n" for e in events if e]


def event_costs(events: list[bytes], tokens: int, repeats: int = 30) -> dict[str, float]:
    """µs per streamed token of rollstream's per-read steps, in a tight loop without cProfile.

    ``parse``: the SSE parser (JSON decode); ``capture``: ids, logprobs and text gathered;
    ``translate``: the unasked fields stripped and the event encoded again; ``stream``: the
    interceptor's whole per-read function, which runs the three (its own overhead on top).
    """
    from rollstream.apis.adapters import ADAPTER_BY_KIND
    from rollstream.apis.chat import Asked, Capture
    from rollstream.apis.sse import SSEParser
    from rollstream.interceptor.recording import CallState
    from rollstream.interceptor.streaming import PROMPT_IDS_KEY, stream_function
    from rollstream.schemas import ApiKind

    adapter, clock = ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS], time.perf_counter
    totals = dict.fromkeys(("parse", "capture", "translate", "stream"), 0.0)
    for _ in range(repeats):
        parser, capture = SSEParser(take_ids=PROMPT_IDS_KEY), Capture()
        translator = adapter.stream({"model": "m"}, Asked())
        # Read by read, as the proxy does: each event's objects die before the next read's.
        for chunk in events:
            t0 = clock()
            parsed = parser.feed(chunk)
            t1 = clock()
            for event in parsed:
                if isinstance(event.data, dict):
                    capture.add_chunk(event.data)
            t2 = clock()
            for event in parsed:
                if isinstance(event.data, dict):
                    b"".join(e.encode() for e in translator.feed(event.data))
            t3 = clock()
            totals["parse"] += t1 - t0
            totals["capture"] += t2 - t1
            totals["translate"] += t3 - t2
        state = CallState(ApiKind.CHAT_COMPLETIONS, "s", {}, {}, Asked(), stream=True)
        stream = stream_function(state, adapter.stream({"model": "m"}, Asked()))
        t4 = clock()
        for chunk in events:
            stream(chunk)
        stream(b"")
        t5 = clock()
        totals["stream"] += t5 - t4
    return {step: round(s / repeats / tokens * 1e6, 2) for step, s in totals.items()}


def _print(path: str, summary: dict[str, Any]) -> None:
    print(f"\n== {path}: {summary['us_per_token']} µs per token under cProfile")
    print("   by area: " + ", ".join(f"{k} {v}" for k, v in summary["areas"].items()))
    print("   own time, µs/token (calls, % of all):")
    for label, us, calls, share in summary["hottest"]:
        print(f"   {us:>7} {calls:>9} {share:>5}%  {label}")
    if summary["rollstream_entries"]:
        print("   rollstream's entry points, cumulative µs/token (calls):")
        for label, us, calls in summary["rollstream_entries"]:
            print(f"   {us:>7} {calls:>9}  {label}")


async def profile(
    config: StreamBenchConfig, kafka: KafkaSettings, top: int, out: Path | None = None
) -> None:
    """Profile both paths against one backend and print what each spends per token."""
    from rollstream.kafka.admin import TopicAdmin
    from rollstream.schemas import TopicNames, topic_specs

    kafka = kafka.model_copy(update={"topic_prefix": f"profile-{int(time.time())}"})
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(TopicNames(kafka.topic_prefix), 3))
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp, env = Path(tmp_name), bench_env(kafka, tmp_name)
            port = free_port()
            backend = await start_backend(config, port, tmp, env)
            try:
                upstream = f"http://127.0.0.1:{port}"
                body = request_body(config, plain=False)
                events = split_events(await upstream_chunks(upstream, body))
                costs = event_costs(events, config.max_tokens)
                print(f"rollstream's per-read steps, tight loop, µs per token: {costs}")
                for path in ("mitmproxy", "rollstream-1w"):
                    prof = (out or tmp) / f"{path}.prof"
                    tokens = await _profile_path(path, config, upstream, tmp, env, prof)
                    _print(path, summarise_profile(prof, tokens, top))
            finally:
                backend.terminate()
                backend.wait(timeout=30)
    finally:
        async with TopicAdmin(kafka) as cleaner:
            await cleaner.delete(s.name for s in topic_specs(TopicNames(kafka.topic_prefix)))


def main(argv: list[str] | None = None) -> None:
    """Entry point; see the module docs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=1000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, default=None, help="Keep the profiles here.")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    config = StreamBenchConfig(
        max_tokens=args.max_tokens, sessions=args.sessions, duration_s=args.seconds
    )
    asyncio.run(profile(config, KafkaSettings(), args.top, args.out))


if __name__ == "__main__":
    main()
