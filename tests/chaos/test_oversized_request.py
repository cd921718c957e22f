"""A 20 MiB request body through a real interceptor while other sessions run.

The body is a message with a 20 MiB image (a data URL: random base64, incompressible), as a
harness attaching a large screenshot sends. Its record, holding the harness's request and the
one sent upstream, would be twice the topic's 16 MiB message limit. No broker takes such a
record, and one stuck at the head of the publisher's queue blocks every later one. The
interceptor must record the call in a form that fits, flagged (``left_out``: what was left
out, its size and SHA-256), answer the harness as usual (the reference backend, whose template
is text-only, answers the text), and every other session's calls must reach the events topic,
each once, their delta chains resolving.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestServer

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import RECORD_BUDGET_BYTES, CallRecord, TopicNames
from rollstream.settings import KafkaSettings
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.pipeline import repeats
from tests.chaos.upstreams import scripted_backend
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

MODEL = "rollstream-tiny"
SESSIONS = 4  # running beside the oversized call
LATER = 2  # started once it was answered
TURNS = 5
BODY_MIB = 20


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def upstream(tokenizer: ChatTokenizer, tmp_path: Path) -> AsyncIterator[str]:
    server = TestServer(scripted_backend(tmp_path / "backend", tokenizer, 2).app())
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def _session(url: str, session: str, turns: int) -> int:
    """A conversation of ``turns`` calls, each carrying the ones before; how many answered."""
    messages: list[Any] = []
    answered = 0
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key=session, max_retries=0, timeout=60
    ) as client:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"{session}: step {turn}"})
            answer = await client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=8
            )
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            answered += 1
    return answered


async def _oversized(url: str, session: str) -> str:
    """One call with a 20 MiB incompressible image: what the harness's SDK made of the answer."""
    image = base64.b64encode(os.urandom(BODY_MIB * 2**20 * 3 // 4)).decode()
    content: Any = [
        {"type": "text", "text": "What does this screenshot show?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
    ]
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key=session, max_retries=0, timeout=120
    ) as client:
        try:
            answer = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=8
            )
        except openai.APIStatusError as exc:  # a parsed error of the harness's protocol
            return f"{exc.status_code} {type(exc).__name__}: {exc.message[:80]}"
    return f"200: {answer.choices[0].message.content!r}"


async def test_an_oversized_request_is_recorded_flagged_and_blocks_nothing(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    upstream: str,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    proxy = InterceptorProcess(
        upstream, kafka_settings, tmp_path / "state", tmp_path / "interceptor.log"
    )
    await proxy.start()
    try:
        await proxy.register(
            *(f"beside-{i}" for i in range(SESSIONS)),
            *(f"later-{i}" for i in range(LATER)),
            "oversized",
        )
        beside = [
            asyncio.create_task(_session(proxy.url, f"beside-{i}", TURNS)) for i in range(SESSIONS)
        ]
        outcome = await asyncio.wait_for(_oversized(proxy.url, "oversized"), 180)
        later = [_session(proxy.url, f"later-{i}", TURNS) for i in range(LATER)]
        answered = await asyncio.wait_for(asyncio.gather(*beside, *later), 120)
        assert answered == [TURNS] * (SESSIONS + LATER)
        # The harness got an answer in its protocol, not a hang or a dropped connection.
        assert outcome.startswith(("200", "400")), outcome
        metrics = await proxy.metrics()
    finally:
        await proxy.stop()

    expected = (SESSIONS + LATER) * TURNS + 1
    records = await read_records(
        kafka_settings, rollstream_topics.events, CallRecord, expected, timeout=90, settle_s=2.0
    )
    duplicated = repeats([r.call_id for r in records])
    by_session: dict[str, list[CallRecord]] = defaultdict(list)
    for record in records:
        by_session[record.session_id].append(record)
    sessions = [f"beside-{i}" for i in range(SESSIONS)] + [f"later-{i}" for i in range(LATER)]
    lost = sum(max(0, TURNS - len(by_session[s])) for s in sessions)
    lost += 0 if by_session["oversized"] else 1
    assert duplicated == 0 and lost == 0 and len(records) == expected, Counter(
        r.session_id for r in records
    )
    for session in sessions:
        calls = resolve_calls(by_session[session])
        assert [c.seq for c in calls] == list(range(TURNS))
        assert all(c.missing_reason is None for c in calls), [c.missing_reason for c in calls]

    [big] = by_session["oversized"]
    assert big.left_out, "the oversized call must be flagged"
    assert {p.reason for p in big.left_out} == {"record_too_large"}
    assert sum(p.size for p in big.left_out) > 10 * 2**20
    assert all(len(p.sha256) == 64 for p in big.left_out)
    for part in big.left_out:
        assert getattr(big, part.part) is None
    assert metrics["rollstream_records_too_large_total"] == 1
    assert metrics["rollstream_records_lost_total"] == 0
    left_out = ", ".join(f"{p.part} ({p.size / 2**20:.1f} MiB)" for p in big.left_out)
    chaos_report(
        fault=f"a {BODY_MIB} MiB incompressible request body (record budget "
        f"{RECORD_BUDGET_BYTES / 2**20:.2f} MiB): an image in a message",
        load=f"{SESSIONS} sessions x {TURNS} calls beside it, {LATER} x {TURNS} after it",
        lost=lost,
        duplicated=duplicated,
        errors=f"the oversized call's harness got {outcome.split(':')[0]} (the backend's "
        f"answer); its record kept, flagged, without {left_out}; 0 for the others",
    )
