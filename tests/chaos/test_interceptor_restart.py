"""The interceptor stopped (SIGTERM) or killed (SIGKILL) mid-stream and restarted.

Before the fault the broker is unreachable (the interceptor is given a bootstrap address where
nothing listens), so every call's record waits in the publisher's spool. Streams in all four
APIs are in flight when the signal comes: each client must see an error its SDK reports (a
truncated stream), in bounded time. The interceptor then restarts on the same port and state
directory with the right broker: the spool must drain, every spooled record reaching the events
topic exactly once, and calls work again.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer
from google import genai
from google.genai import types

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.host import free_port
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.spool import Spool
from rollstream.schemas import AvroSerializer, CallRecord, CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.upstreams import scripted_backend
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    # google-genai subclasses aiohttp's ClientSession, which aiohttp warns about: theirs.
    pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning"),
]

MODEL = "rollstream-tiny"
APIS = ("chat", "responses", "anthropic", "gemini")
WHOLE_PER_API = 2
DRAIN_S = 4.0
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def upstream(tokenizer: ChatTokenizer, tmp_path: Path) -> AsyncIterator[str]:
    # 40 ms a token: the ~290-token answer streams for about 12 s, long enough to interrupt.
    server = TestServer(scripted_backend(tmp_path / "backend", tokenizer, 40).app())
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def _whole(url: str, api: str, session: str) -> str:
    """One non-streamed call; the answer's text."""
    if api == "gemini":
        client = _gemini(url, session)
        try:
            reply = await client.aio.models.generate_content(
                model=MODEL, contents="hi", config=types.GenerateContentConfig(max_output_tokens=3)
            )
        finally:
            await client.aio.aclose()
        return reply.text or ""
    if api == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=url, api_key=session, max_retries=0)
        message = await claude.messages.create(model=MODEL, max_tokens=3, messages=HI)
        await claude.close()
        return "".join(b.text for b in message.content if b.type == "text")
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=session, max_retries=0) as oai:
        if api == "chat":
            answer = await oai.chat.completions.create(model=MODEL, messages=HI, max_tokens=3)
            return answer.choices[0].message.content or ""
        response = await oai.responses.create(model=MODEL, input="hi", max_output_tokens=3)
        return response.output_text


async def _stream(
    url: str, api: str, session: str, started: asyncio.Event, max_tokens: int = 1000
) -> str:
    """One streamed call (about 290 tokens at most); sets ``started`` at its first text."""
    text = ""
    if api == "gemini":
        client = _gemini(url, session)
        try:
            parts = await client.aio.models.generate_content_stream(
                model=MODEL,
                contents="hi",
                config=types.GenerateContentConfig(max_output_tokens=max_tokens),
            )
            async for part in parts:
                text += part.text or ""
                started.set()
        finally:
            await client.aio.aclose()
        return text
    if api == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=url, api_key=session, max_retries=0, timeout=30)
        try:
            events = await claude.messages.create(
                model=MODEL, max_tokens=max_tokens, messages=HI, stream=True
            )
            async for event in events:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text += event.delta.text
                    started.set()
        finally:
            await claude.close()
        return text
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key=session, max_retries=0, timeout=30
    ) as oai:
        if api == "chat":
            chunks = await oai.chat.completions.create(
                model=MODEL, messages=HI, max_tokens=max_tokens, stream=True
            )
            async for chunk in chunks:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    started.set()
        else:
            stream = await oai.responses.create(
                model=MODEL, input="hi", max_output_tokens=max_tokens, stream=True
            )
            async for item in stream:
                if item.type == "response.output_text.delta":
                    text += item.delta
                    started.set()
    return text


def _gemini(url: str, session: str) -> genai.Client:
    options = types.HttpOptions(base_url=url, timeout=30_000)  # ms
    return genai.Client(api_key=session, http_options=options)


def _modes(root: Path) -> dict[str, int]:
    """The permission bits of ``root`` and everything under it."""
    return {str(p): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}


def _spooled_calls(spool_dir: Path) -> list[str]:
    """The call ids of the records waiting in a spool (read without consuming)."""
    serializer = AvroSerializer()
    # A handful of records: all in the first segment, which ``read`` starts from.
    return [serializer.decode_as(r.value, CallRecord).call_id for r in Spool(spool_dir).read()]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_in_flight_calls_fail_cleanly_and_the_spool_drains_after_a_restart(
    signum: signal.Signals,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    upstream: str,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    proxy = InterceptorProcess(
        upstream,
        kafka_settings,
        tmp_path / "state",
        tmp_path / "interceptor.log",
        options=["--drain-timeout-s", str(DRAIN_S)],
    )
    await proxy.start(bootstrap=f"127.0.0.1:{free_port()}")  # no broker there
    try:
        # Served while the broker is unreachable; their records go to the spool.
        whole = [(api, f"spooled-{api}-{i}") for api in APIS for i in range(WHOLE_PER_API)]
        calls = [(api, f"in-flight-{api}", 1000) for api in APIS] + [("chat", "short", 10)]
        # Registered as the node registers its sessions (kept across the restart below).
        await proxy.register(*(s for _, s in whole), *(s for _, s, _ in calls))
        for api, session in whole:
            assert await _whole(proxy.url, api, session)
        await proxy.wait_metric("rollstream_records_spooled_total", len(whole))

        # A long stream in each API (about 12 s) and a short one (about 0.4 s).
        started = [asyncio.Event() for _ in calls]
        streams = [
            asyncio.create_task(_stream(proxy.url, api, session, event, tokens))
            for (api, session, tokens), event in zip(calls, started, strict=True)
        ]
        async with asyncio.timeout(20):
            for event in started:
                await event.wait()
        proxy.send(signum)
        began = time.monotonic()
        outcomes = await asyncio.wait_for(asyncio.gather(*streams, return_exceptions=True), 20)
        failed_within = time.monotonic() - began
        code = await proxy.wait_exit(30)

        # The long streams broke, each as an exception of its SDK's HTTP stack, not a hang; on
        # SIGTERM the short one finished while the proxy drained.
        *long, short = outcomes
        assert all(isinstance(o, Exception) for o in long), outcomes
        if signum == signal.SIGTERM:
            assert isinstance(short, str) and short, short
            assert code == 0
        else:
            assert isinstance(short, Exception) and code == -signal.SIGKILL
        # The spool survived the stop intact: the calls served before, and on SIGTERM the
        # streams' records (the broker is still unreachable).
        spooled = _spooled_calls(proxy.spool_dir)
        in_spool = len(whole) + (len(calls) if signum == signal.SIGTERM else 0)
        assert len(spooled) == len(set(spooled)) == in_spool
        # What it left is private (issue 36, point 8): the spool and the session journal (the
        # registered ids are strict mode's credentials) to the owner alone.
        journal = proxy.state_dir / "sessions" / proxy.spool_dir.name
        left = _modes(proxy.spool_dir) | _modes(journal.with_suffix(".txt").parent)
        assert left and {p: oct(m) for p, m in left.items() if m not in (0o600, 0o700)} == {}

        await proxy.start()  # same port, same state dir, the broker reachable now
        after = [(api, f"after-{api}") for api in APIS]
        await proxy.register(*(s for _, s in after))
        for api, session in after:
            assert await _whole(proxy.url, api, session)
        await proxy.wait_metric("rollstream_records_drained_total", len(spooled))
        assert Spool(proxy.spool_dir).empty()
    finally:
        await proxy.stop()

    expected = len(spooled) + len(after)
    records = await read_records(
        kafka_settings, rollstream_topics.events, CallRecord, expected, settle_s=2.0
    )
    counts = Counter(r.call_id for r in records)
    duplicated = sum(n - 1 for n in counts.values())
    by_session = {r.session_id: r for r in records}
    lost = [s for _, s in whole + after if s not in by_session]
    assert duplicated == 0 and lost == [] and len(records) == expected
    assert set(spooled) <= set(counts)
    if signum == signal.SIGTERM:
        # A clean stop records the calls it had to cut, and the one that finished.
        assert by_session["short"].status is CallStatus.OK
        for api in APIS:
            error = by_session[f"in-flight-{api}"].error
            assert error is not None and error.type == "interceptor_stopped", error
        recorded = len(calls)
    else:
        # Killed with the process before anything was recorded; the harnesses saw it.
        assert not any(s in by_session for _, s, _ in calls)
        recorded = 0
    errors = Counter(type(o).__name__ for o in outcomes if isinstance(o, Exception))
    name = signal.Signals(signum).name
    chaos_report(
        fault=f"interceptor {name} mid-stream, restarted on the same port and state dir "
        "(spool and session journal durable by name and private: issue 36, point 8)",
        load=f"{len(whole)} calls spooled (broker unreachable), {len(calls)} streams in flight "
        f"({len(APIS)} APIs)",
        lost=len(lost),
        duplicated=duplicated,
        errors=", ".join(f"{n} x {e}" for e, n in errors.items())
        + f" (expected: streams cut, raised by the SDKs within {failed_within:.1f} s); "
        f"{recorded} of {len(calls)} in-flight calls recorded",
    )
