"""The proxy policy: paths decided as the upstream reads them, everything unknown refused.

The oracle is a hand-written table of routes by their plain spelling; the property spells each
one in ways an upstream decodes to the same route (percent-encoding, dot segments, doubled
slashes, a trailing slash) and requires the same decision. The integration test sends such a
corpus through a real interceptor in strict mode to a real aiohttp upstream (which decodes
paths as vLLM's Starlette does) and counts what reached it: before the policy,
``/v1/chat/%63ompletions`` and ``/v1/completions`` were served without a record or a session.
"""

from __future__ import annotations

import collections
import json
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from rollstream.interceptor.policy import Route, UnreadablePath, decide, normalise
from rollstream.interceptor.pool_metrics import Family, parse_metrics
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import CallRecord, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.engine_servers import EngineServers
from tests.harness_stack import engine_interceptor, register
from tests.kafka_reading import read_records

#: (method, plain path) -> route: the oracle.
TABLE: dict[tuple[str, str], Route] = {
    ("POST", "/v1/chat/completions"): Route.LLM_CALL,
    ("POST", "/chat/completions"): Route.LLM_CALL,
    ("POST", "/v1/messages"): Route.LLM_CALL,
    ("POST", "/v1/responses"): Route.LLM_CALL,
    ("POST", "/v1beta/models/gemini-x:generateContent"): Route.LLM_CALL,
    ("POST", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"): Route.LLM_CALL,
    ("POST", "/v1/messages/count_tokens"): Route.COUNT_TOKENS,
    ("POST", "/v1beta/models/gemini-x:countTokens"): Route.COUNT_TOKENS,
    ("GET", "/v1/models"): Route.AUXILIARY,
    ("GET", "/v1/models/qwen3"): Route.AUXILIARY,
    ("GET", "/health"): Route.AUXILIARY,
    ("POST", "/tokenize"): Route.AUXILIARY,
    ("POST", "/detokenize"): Route.AUXILIARY,
    # An engine's own routes, and generation routes the interceptor cannot record.
    ("POST", "/v1/completions"): Route.REFUSED,
    ("POST", "/completions"): Route.REFUSED,
    ("POST", "/v1/load_lora_adapter"): Route.REFUSED,
    ("POST", "/sleep"): Route.REFUSED,
    ("POST", "/reset_prefix_cache"): Route.REFUSED,
    ("POST", "/collective_rpc"): Route.REFUSED,
    ("POST", "/admin/weights"): Route.REFUSED,
    ("POST", "/v1/embeddings"): Route.REFUSED,
    ("GET", "/metrics"): Route.REFUSED,
    ("POST", "/V1/chat/completions"): Route.REFUSED,  # the upstreams' routers match case
    ("GET", "/v1/chat/completions"): Route.REFUSED,  # an LLM route by another method
    ("POST", "/v1/models"): Route.REFUSED,
}
#: Decoded by the upstream, these reach an LLM route: each must be an LLM call or refused.
LLM_ROUTES = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"}


def spell(path: str, rng: random.Random) -> str:
    """``path`` written another way the upstream decodes to the same route (query kept)."""
    path, mark, query = path.partition("?")
    segments = path.strip("/").split("/")
    out: list[str] = []
    for segment in segments:
        if rng.random() < 0.3:
            out.append(".")
        if rng.random() < 0.2:
            out += ["junk", ".."]
        chars = [f"%{ord(c):02X}" if rng.random() < 0.3 else c for c in segment]
        out.append("".join(chars))
    joined = ("//" if rng.random() < 0.2 else "/").join(out)
    separator = "%2F" if rng.random() < 0.2 else "/"
    joined = joined.replace("/", separator, 1) if "/" in joined else joined
    return "/" + joined + ("/" if rng.random() < 0.3 else "") + mark + query


@pytest.mark.parametrize(("method", "path"), sorted(TABLE))
def test_each_route_is_decided_as_the_table_says(method: str, path: str) -> None:
    assert decide(method, path).route is TABLE[(method, path)]


@given(key=st.sampled_from(sorted(TABLE)), seed=st.integers(0, 2**32 - 1))
def test_a_route_spelled_another_way_is_decided_the_same(key: tuple[str, str], seed: int) -> None:
    method, path = key
    spelled = spell(path, random.Random(seed))
    decision = decide(method, spelled)
    assert decision.route is TABLE[key], spelled
    if decision.route is not Route.REFUSED:
        assert decision.path == path  # forwarded as the upstream reads it


@pytest.mark.parametrize(
    "path",
    ["/../v1/chat/completions", "/v1/chat/completions%00", "/v1/chat/%2563ompletions", "/v1\\x"],
)
def test_a_path_no_route_can_match_is_refused_as_unreadable(path: str) -> None:
    with pytest.raises(UnreadablePath):
        normalise(path)
    decision = decide("POST", path)
    assert (decision.route, decision.status) == (Route.REFUSED, 400)


def _body(path: str) -> dict[str, object]:
    """A valid request of the API at ``path`` (any body for the other routes)."""
    user = [{"role": "user", "content": "x"}]
    if "/v1beta/" in path:
        return {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}
    if path.startswith("/v1/messages"):
        return {"model": "m", "max_tokens": 5, "messages": user}
    if path == "/v1/responses":
        return {"model": "m", "input": "x"}
    return {"model": "m", "messages": user}


@pytest.fixture
async def any_route_upstream() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """A real aiohttp upstream: every route answers; what it served (decoded paths), in order."""
    served: list[tuple[str, str]] = []

    async def any_route(request: web.Request) -> web.Response:
        served.append((request.method, request.path))  # decoded, as Starlette routes it
        return web.json_response({"served": request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), served
    await server.close()


Corpus = list[tuple[tuple[str, str], str]]


def corpus(spellings: int, seed: int) -> Corpus:
    """Each route of the table in ``spellings`` spellings and its plain one: (route key, path)."""
    rng = random.Random(seed)
    spelled = [(key, spell(key[1], rng)) for key in sorted(TABLE) for _ in range(spellings)]
    return spelled + [(key, key[1]) for key in sorted(TABLE)]


@dataclass(frozen=True)
class Sent:
    """One request of the corpus and what the interceptor answered."""

    route: Route
    session: str
    path: str
    status: int
    text: str

    @property
    def recorded(self) -> bool:
        """Whether the interceptor records it: an LLM call (of any session) or a refusal."""
        return self.route in (Route.REFUSED, Route.LLM_CALL)


KNOWN, UNKNOWN = "sess-known", "sess-unknown"


async def send_corpus(base_url: str, requests: Corpus, model: str | None = None) -> list[Sent]:
    """Send every request as spelled (no client resolves it) with an unknown key, then a known
    one (``KNOWN``, registered by the caller)."""
    sent: list[Sent] = []
    extra = {"model": model} if model is not None else {}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        for session in (UNKNOWN, KNOWN):
            for (method, plain), path in requests:
                async with client.request(
                    method,
                    URL(base_url + path, encoded=True),
                    data=json.dumps(_body(plain) | extra),
                    headers={"authorization": f"Bearer {session}"},
                ) as response:
                    text = await response.text()
                sent.append(Sent(TABLE[(method, plain)], session, path, response.status, text))
    return sent


def forwarded(sent: list[Sent]) -> int:
    """The LLM calls the interceptor forwards: the known session's (strict mode)."""
    return sum(s.route is Route.LLM_CALL and s.session == KNOWN for s in sent)


@pytest.mark.integration
async def test_no_llm_route_of_the_upstream_is_reached_unrecorded(
    any_route_upstream: tuple[str, list[tuple[str, str]]],
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    url, served = any_route_upstream
    settings = InterceptorSettings(upstream=url, port=0, admin_port=0, strict_sessions=True)
    async with Interceptor(
        settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path)
    ) as proxy:
        register(proxy, KNOWN)
        sent = await send_corpus(proxy.url, corpus(6, seed=7))
    for s in sent:
        if s.route is Route.REFUSED:
            assert s.status in (400, 404, 405), (s.path, s.status)
            assert "error" in json.loads(s.text), (s.path, s.text)  # the API's own shape
    expected_records, forwarded_calls = sum(s.recorded for s in sent), forwarded(sent)
    # The upstream's generation routes were reached only by the registered session's LLM
    # calls, once each; nothing reached the engine's own routes.
    reached = [p for _, p in served if p in LLM_ROUTES]
    assert reached == ["/v1/chat/completions"] * forwarded_calls
    assert not [s for s in served if TABLE.get(s) is Route.REFUSED], served
    # Every LLM call and every refusal has its record (strict mode: unknown keys anonymous).
    records = await read_records(
        kafka_settings, rollstream_topics.events, CallRecord, expected_records
    )
    assert len(records) == expected_records
    assert {r.session_id for r in records} == {KNOWN, "anonymous"}
    refused = [r for r in records if r.error is not None and r.error.type == "refused"]
    assert len(refused) == sum(s.route is Route.REFUSED for s in sent)


def _served(metrics_text: str) -> tuple[collections.Counter[tuple[str, str]], float]:
    """What a vLLM server says it served: requests by (method, route), and generations run."""
    families = parse_metrics(metrics_text)
    by_route: collections.Counter[tuple[str, str]] = collections.Counter()
    for sample in families.get("http_requests_total", Family("counter", [])).samples:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', sample.labels))
        by_route[(labels["method"], labels["handler"])] += int(sample.value)
    success = families.get("vllm:request_success_total", Family("counter", [])).samples
    return by_route, sum(s.value for s in success)


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        return await response.text()


@pytest.mark.parametrize("family", ["qwen3"])
async def test_on_vllm_no_generation_runs_without_its_record(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    """The corpus through a strict interceptor in front of a real vLLM, counted by vLLM itself.

    vLLM's own metrics say which of its routes served what (``http_requests_total`` by route,
    as Starlette matched the decoded path) and how many generations it ran: every generation
    must be a recorded LLM call of the registered session, and no refused route reached it.
    """
    server = engine_servers.get(family)
    before = _served(await _text(f"{server.url}/metrics"))
    state = tmp_path / "state"
    async with engine_interceptor(kafka_settings, state, server, family, strict=True) as proxy:
        register(proxy, KNOWN)
        sent = await send_corpus(proxy.url, corpus(3, seed=11), model=server.model)
    after = _served(await _text(f"{server.url}/metrics"))
    for s in sent:
        if s.route is Route.REFUSED:
            assert s.status in (400, 404, 405), (s.path, s.text)
        elif s.route is Route.LLM_CALL and s.session == KNOWN:
            assert s.status == 200, (s.path, s.text)
    expected_records, forwarded_calls = sum(s.recorded for s in sent), forwarded(sent)
    requests, generations = after[0] - before[0], after[1] - before[1]
    # Every generation vLLM ran is one of the registered session's LLM calls.
    assert generations == forwarded_calls
    assert requests[("POST", "/v1/chat/completions")] == forwarded_calls
    # No refused route reached vLLM, nor any generation route but the one calls go to.
    refused = {key for key, route in TABLE.items() if route is Route.REFUSED}
    refused |= {("POST", p) for p in LLM_ROUTES - {"/v1/chat/completions"}}
    assert not [key for key in requests if key in refused], requests
    records = await read_records(
        kafka_settings, rollstream_topics.events, CallRecord, expected_records
    )
    assert len(records) == expected_records
    recorded_ok = [r for r in records if r.session_id == KNOWN and r.error is None]
    assert len(recorded_ok) == forwarded_calls
