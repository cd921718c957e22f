"""The proxy policy under a corpus of path spellings, through an interceptor process.

Every route of the policy's table (tests/interceptor/test_policy.py) spelled as an
upstream decodes it (percent-encoding, dot segments, doubled slashes, trailing slashes), sent
by a registered and an unregistered session to ``rollstream interceptor --strict-sessions``
in front of a real aiohttp upstream that answers every route and notes what it served, decoded
as vLLM's Starlette decodes it. Counted afterwards: a generation route the upstream served
without a CallRecord is a lost call; a call recorded twice is a duplicate; the refusals each
caller got in its own API's error shape are the errors the harnesses saw (expected).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rollstream.interceptor.policy import Route
from rollstream.schemas import CallRecord, TopicNames
from rollstream.settings import KafkaSettings
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.fault_table import ChaosReport
from tests.interceptor.test_policy import (
    KNOWN,
    LLM_ROUTES,
    TABLE,
    corpus,
    send_corpus,
)
from tests.kafka_reading import read_records

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SPELLINGS = 8  # per route, besides its plain spelling


async def test_no_request_on_any_spelling_reaches_a_generation_route_unrecorded(
    any_route_upstream: tuple[str, list[tuple[str, str]]],
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    url, served = any_route_upstream
    proxy = InterceptorProcess(
        url,
        kafka_settings,
        tmp_path / "state",
        tmp_path / "interceptor.log",
        options=["--strict-sessions"],
    )
    await proxy.start()
    try:
        await proxy.register(KNOWN)
        sent = await send_corpus(proxy.url, corpus(SPELLINGS, seed=36))
    finally:
        await proxy.stop()
    statuses = Counter(s.status for s in sent)
    refused = sum(s.route is Route.REFUSED for s in sent)
    llm_calls = sum(s.route is Route.LLM_CALL for s in sent)
    generations = [p for _, p in served if p in LLM_ROUTES]
    expected = refused + llm_calls  # strict mode: the unknown session's calls are refused too
    records = await read_records(kafka_settings, rollstream_topics.events, CallRecord, expected)
    by_call = Counter(r.call_id for r in records)
    # The stand-in upstream answers no completion: a call it served is recorded with the
    # upstream's error (a 502 to the caller), never without a record.
    forwarded = [
        r
        for r in records
        if r.session_id == KNOWN and (r.error is None or r.error.type != "refused")
    ]
    lost = len(generations) - len(forwarded)
    duplicated = sum(n - 1 for n in by_call.values())
    chaos_report(
        fault=f"requests on {len(TABLE)} routes x {SPELLINGS + 1} spellings (percent-encoded, "
        "dot segments, doubled and trailing slashes), registered and unknown session, through "
        "a strict interceptor (issue 36, point 1)",
        load=f"{len(sent)} requests: {len(generations)} generations served upstream, "
        f"{len(records)} records ({refused} refused, {llm_calls - len(forwarded)} calls of the "
        "unknown session refused)",
        lost=lost,
        duplicated=duplicated,
        errors=", ".join(
            f"{n} x {status}" for status, n in sorted(statuses.items()) if status >= 400
        )
        + " (refusals in each API's error shape; 502: the stand-in upstream answers no "
        "completion; expected)",
    )
    assert lost == 0 and duplicated == 0
    assert len(records) == expected
    # Only the registered session's LLM calls reached a generation route, each once.
    assert len(generations) == len(forwarded) == llm_calls // 2
    assert not [s for s in served if TABLE.get(s) is Route.REFUSED], served
