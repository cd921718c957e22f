"""Credentials: none reaches the upstream or Kafka; strict mode refuses unknown sessions.

A harness's API key is its session id: it may be recorded as the session (the record's key and
``session_id``), nowhere else. Any other credential (an ``Authorization`` header beside a
session given by header or path, an unknown key in strict mode) must appear nowhere at all.
Checked by grepping every record of every topic of the test (raw bytes, and the compressed JSON
blobs opened), the interceptor's log (at DEBUG), and everything the upstream received.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.sessions import keyed_session
from rollstream.kafka.clients import behind, make_consumer, topic_partitions
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    CallRecord,
    CallStatus,
    SessionEnded,
    TopicNames,
    decompress_json,
)
from rollstream.settings import KafkaSettings, StatePaths
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.upstreams import FaultyUpstream, scripted_backend
from tests.conftest import ProducerFactory
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records
from tests.producers.node.helpers import command_task

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

MODEL = "rollstream-tiny"
HI: Any = [{"role": "user", "content": "hi"}]
APIS = ("chat", "responses", "anthropic")


def _secret(kind: str) -> str:
    return f"sk-{kind}-{uuid.uuid4().hex}"


@dataclass
class Secrets:
    """Session keys (may be a record's session) and credentials (must appear nowhere)."""

    sessions: list[str] = field(default_factory=list)
    credentials: list[str] = field(default_factory=list)

    def session(self) -> str:
        key = _secret("secret")
        self.sessions.append(key)
        return key

    def credential(self) -> str:
        key = _secret("credential")
        self.credentials.append(key)
        return key


async def _sdk_call(url: str, api: str, key: str, stream: bool) -> None:
    """One call through the API's official SDK, whole or streamed (read to its end)."""
    if api == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0)
        try:
            if stream:
                async with claude.messages.stream(model=MODEL, max_tokens=3, messages=HI) as events:
                    await events.get_final_message()
            else:
                await claude.messages.create(model=MODEL, max_tokens=3, messages=HI)
        finally:
            await claude.close()
        return
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as oai:
        if api == "chat":
            if stream:
                chunks = await oai.chat.completions.create(
                    model=MODEL, messages=HI, max_tokens=3, stream=True
                )
                _ = [chunk async for chunk in chunks]
            else:
                await oai.chat.completions.create(model=MODEL, messages=HI, max_tokens=3)
        elif stream:
            response_events = await oai.responses.create(
                model=MODEL, input="hi", max_output_tokens=3, stream=True
            )
            _ = [event async for event in response_events]
        else:
            await oai.responses.create(model=MODEL, input="hi", max_output_tokens=3)


async def _post(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], body: bytes
) -> tuple[int, Any]:
    async with http.post(url, data=body, headers=headers) as response:
        raw = await response.read()
        return response.status, json.loads(raw) if raw else None


async def _every_record(kafka: KafkaSettings) -> list[tuple[str, bytes, bytes]]:
    """(topic, key, value) of every record of every topic under the test's prefix."""
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        topics = sorted(t for t in await consumer.topics() if t.startswith(kafka.topic_prefix))
        tps = [tp for t in topics for tp in await topic_partitions(consumer, t) or []]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[tuple[str, bytes, bytes]] = []
        async with asyncio.timeout(30):
            while await behind(consumer, end):
                for tp, messages in (await consumer.getmany(timeout_ms=300)).items():
                    for m in messages:
                        headers = b"".join(k.encode() + v for k, v in m.headers)
                        out.append((tp.topic, m.key or b"", (m.value or b"") + headers))
        return out
    finally:
        await consumer.stop()


def _opened(value: bytes) -> str:
    """The JSON blobs of a CallRecord, decompressed, as one string ('' for other records)."""
    try:
        record = AvroSerializer().decode(value)
    except Exception:
        return ""
    if not isinstance(record, CallRecord):
        return ""
    blobs = (record.harness_request, record.upstream_request, record.response)
    return json.dumps([decompress_json(b) for b in blobs if b is not None])


@dataclass
class Leaks:
    """Where secrets were found that should not be there."""

    found: list[str] = field(default_factory=list)
    records: int = 0

    def check_kafka(
        self, records: list[tuple[str, bytes, bytes]], events: str, secrets: Secrets
    ) -> None:
        self.records = len(records)
        for topic, key, value in records:
            opened = _opened(value)
            for secret in secrets.credentials:
                if secret.encode() in key + value or secret in opened:
                    self.found.append(f"credential in {topic}")
            for session in secrets.sessions:
                # As a record's session: its key, and once in the value (session_id).
                allowed = 1 if topic == events and key == session.encode() else 0
                if value.count(session.encode()) > allowed or session in opened:
                    self.found.append(f"session key {session[:20]}... in {topic} beyond its id")
                if key != session.encode() and session.encode() in key:
                    self.found.append(f"session key in a key of {topic}")

    def check_text(self, where: str, text: str, secrets: list[str]) -> None:
        self.found += [f"{s[:20]}... in {where}" for s in secrets if s in text]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def upstream(tokenizer: ChatTokenizer, tmp_path: Path) -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream(scripted_backend(tmp_path / "backend", tokenizer, 0)) as fake:
        yield fake


def _check_upstream(upstream: FaultyUpstream, upstream_key: str, secrets: list[str]) -> Leaks:
    leaks = Leaks()
    for seen in upstream.seen:
        headers = {k.lower(): v for k, v in seen.headers}
        if headers.get("authorization") != f"Bearer {upstream_key}":
            leaks.found.append(f"upstream got authorization {headers.get('authorization')!r}")
        for forbidden in ("x-api-key", "api-key", "x-rollstream-session"):
            if forbidden in headers:
                leaks.found.append(f"upstream got {forbidden}")
        text = json.dumps(seen.headers) + seen.path + seen.body.decode(errors="replace")
        leaks.check_text(f"upstream request {seen.path}", text, secrets)
    return leaks


async def test_no_credential_reaches_the_upstream_kafka_or_the_log(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    upstream: FaultyUpstream,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    secrets = Secrets()
    upstream_key = _secret("upstream")
    log = tmp_path / "interceptor.log"
    proxy = InterceptorProcess(
        upstream.url,
        kafka_settings,
        tmp_path / "state",
        log,
        options=["--upstream-api-key", upstream_key],
    )
    await proxy.start(log_level="DEBUG")
    statuses: list[int] = []
    try:
        # Streamed: a key its launcher registered, recorded as its session. Whole: a key
        # nobody registered, maybe a real credential: recorded only as its keyed hash.
        unregistered: list[str] = []
        for api in APIS:
            for stream in (False, True):
                key = secrets.session() if stream else secrets.credential()
                if stream:
                    await proxy.register(key)
                else:
                    unregistered.append(key)
                await _sdk_call(proxy.url, api, key, stream)
        chat = json.dumps({"model": MODEL, "messages": HI, "max_tokens": 3}).encode()
        claude = json.dumps({"model": MODEL, "messages": HI, "max_tokens": 3}).encode()
        json_type = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        header_session, path_session = secrets.session(), secrets.session()
        bad_json, throttled = secrets.session(), secrets.session()
        await proxy.register(bad_json, throttled)
        async with aiohttp.ClientSession(base_url=proxy.url) as http:
            requests = [
                # The session by header or by path: the key beside it is a real credential.
                (
                    "/v1/chat/completions",
                    {"x-rollstream-session": header_session}
                    | {"authorization": f"Bearer {secrets.credential()}"},
                    chat,
                ),
                (f"/s/{path_session}/v1/messages", {"x-api-key": secrets.credential()}, claude),
                # Bad calls, recorded under their session.
                ("/v1/chat/completions", {"authorization": f"Bearer {bad_json}"}, b"{not json"),
                (
                    "/v1/messages",
                    {"x-api-key": throttled},
                    claude.replace(MODEL.encode(), b"fault-429"),
                ),
                # Not LLM calls: forwarded unrecorded, without the credential.
                ("/v1/messages/count_tokens", {"x-api-key": secrets.credential()}, claude),
            ]
            for path, headers, body in requests:
                status, _ = await _post(http, path, headers | json_type, body)
                statuses.append(status)
            models = {"authorization": f"Bearer {secrets.credential()}"}
            async with http.get("/v1/models", headers=models) as response:
                statuses.append(response.status)
        recorded = 6 + 4  # the SDK calls; header, path, bad JSON and 429 calls
        await proxy.wait_metric("rollstream_records_published_total", recorded)
    finally:
        await proxy.stop()
    assert statuses == [200, 200, 400, 429, 200, 200]

    calls = await read_records(
        kafka_settings, rollstream_topics.events, CallRecord, recorded, settle_s=1.0
    )
    assert len(calls) == recorded
    sessions = Counter(c.session_id for c in calls)
    assert all(sessions[s] == 1 for s in secrets.sessions)  # the header and path ones too
    secret = (tmp_path / "state" / "sessions" / "hash.key").read_text().strip().encode()
    assert all(sessions[keyed_session(secret, key)] == 1 for key in unregistered)

    leaks = _check_upstream(upstream, upstream_key, secrets.sessions + secrets.credentials)
    everything = await _every_record(kafka_settings)
    leaks.check_kafka(everything, rollstream_topics.events, secrets)
    leaks.check_text("the log", log.read_text(), [*secrets.sessions, *secrets.credentials])
    leaks.check_text("the log", log.read_text(), [upstream_key])
    assert leaks.found == []
    assert len(upstream.seen) >= 9  # every call but the bad JSON, plus /tokenize and /models
    chaos_report(
        fault="credential leak check (3 APIs, whole and streamed, registered and unregistered"
        " keys, header and path sessions)",
        load=f"{len(statuses) + 6} calls; {leaks.records} Kafka records, "
        f"{len(upstream.seen)} upstream requests and the DEBUG log grepped",
        lost=recorded - len(calls),
        duplicated=len(calls) - len({c.call_id for c in calls}),
        errors="1 x 400, 1 x 429 (expected); 0 credentials found",
    )


def _is_auth_error(api: str, status: int, body: Any) -> bool:
    if status != 401 or not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return False
    if body["error"].get("type") != "authentication_error":
        return False
    return body.get("type") == "error" if api == "anthropic" else True


CALLER_SCRIPT = """
import json, os, urllib.error, urllib.request
body = {"model": "rollstream-tiny", "messages": [{"role": "user", "content": "hi"}]}
request = urllib.request.Request(
    os.environ["ROLLSTREAM_BASE_URL"] + "/v1/chat/completions",
    data=json.dumps(body | {"max_tokens": 3}).encode(),
    headers={"authorization": "Bearer " + os.environ["ROLLSTREAM_SESSION"],
             "content-type": "application/json"},
)
try:
    print("status", urllib.request.urlopen(request).status)
except urllib.error.HTTPError as exc:
    print("status", exc.code)
"""


async def test_strict_mode_refuses_unknown_sessions_with_a_401_in_the_callers_format(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    upstream: FaultyUpstream,
    producer_factory: ProducerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    unknown = [_secret("unknown") for _ in range(3)]
    registered = _secret("registered")
    log = tmp_path / "interceptor.log"
    proxy = InterceptorProcess(
        upstream.url,
        kafka_settings,
        tmp_path / "state",
        log,
        options=["--strict-sessions"],
    )
    await proxy.start(log_level="DEBUG")
    refused: list[tuple[str, int, Any]] = []
    admin = aiohttp.ClientSession(base_url=proxy.admin_url)
    try:
        async with aiohttp.ClientSession(base_url=proxy.url) as http:

            async def call(api: str, key: str | None, stream: bool = False) -> tuple[int, Any]:
                path = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
                body: dict[str, Any] = {"model": MODEL, "max_tokens": 3, "stream": stream}
                if api == "responses":
                    body = {"model": MODEL, "input": "hi", "stream": stream}
                else:
                    body["messages"] = HI
                headers = {"content-type": "application/json"}
                if key is not None:
                    headers |= (
                        {"x-api-key": key}
                        if api == "anthropic"
                        else {"authorization": f"Bearer {key}"}
                    )
                url = path.get(api, "/v1/messages")
                return await _post(http, url, headers, json.dumps(body).encode())

            for api, key in zip(APIS, unknown, strict=True):
                for stream in (False, True):
                    refused.append((api, *await call(api, key, stream)))
            refused.append(("chat", *await call("chat", None)))  # no key at all
            # The SDKs see an authentication error.
            with pytest.raises(openai.AuthenticationError):
                await _sdk_call(proxy.url, "chat", unknown[0], False)
            with pytest.raises(anthropic.AuthenticationError):
                await _sdk_call(proxy.url, "anthropic", unknown[2], True)

            # Registered: served, in every API; the registration survives a restart.
            assert (await admin.put(f"/sessions/{registered}")).status == 200
            for api in APIS:
                assert (await call(api, registered))[0] == 200
            await proxy.stop()
            await proxy.start(log_level="DEBUG")
            assert (await call("chat", registered))[0] == 200
            assert (await admin.delete(f"/sessions/{registered}")).status == 200
            refused.append(("chat", *await call("chat", registered)))  # forgotten: refused

            # A session the node runs is registered while it runs, forgotten after.
            script = tmp_path / "caller.py"
            script.write_text(CALLER_SCRIPT)
            node_settings = NodeSettings(
                port=0,
                node_id="strict-node",
                base_url=proxy.url,
                interceptor_admin=proxy.admin_url,
                work_root=tmp_path / "sessions",
            )
            paths = StatePaths(state_dir=tmp_path / "node-state")
            producer = await producer_factory()
            task = command_task(f"{sys.executable} {script}", task_id="strict-task")
            async with Node(node_settings, kafka_settings, PublisherSettings(), paths):
                await producer.send_and_wait(
                    rollstream_topics.tasks, AvroSerializer().encode(task), key=b"strict-task"
                )
                [ended] = await read_records(
                    kafka_settings,
                    rollstream_topics.events,
                    AvroRecord,
                    1,
                    where=lambda r: isinstance(r, SessionEnded),
                )
            assert isinstance(ended, SessionEnded)
            [stdout] = [a for a in ended.artifacts if a.name == "stdout"]
            assert stdout.content.strip() == b"status 200"  # registered during the run
            refused.append(("chat", *await call("chat", ended.session_id)))  # forgotten
    finally:
        await admin.close()
        await proxy.stop()

    wrong = [(api, s, b) for api, s, b in refused if not _is_auth_error(api, s, b)]
    assert wrong == []
    # Each refusal recorded as a rejected call, under no session: the key is not kept.
    rejections, served_calls, session_records = len(refused) + 2, 4 + 1, 2
    events = await read_records(
        kafka_settings,
        rollstream_topics.events,
        AvroRecord,
        rejections + served_calls + session_records,
        settle_s=1.0,
    )
    records = [r for r in events if isinstance(r, CallRecord)]
    assert len(records) == rejections + served_calls
    rejected = [r for r in records if r.error is not None and r.error.type == "unknown_session"]
    assert len(rejected) == rejections  # the raw calls and the two SDK calls
    assert all(r.session_id == "anonymous" and r.status is CallStatus.ERROR for r in rejected)
    assert all(r.error is not None and r.error.http_status == 401 for r in rejected)
    served = [r for r in records if r.status is CallStatus.OK]
    assert sorted(r.session_id for r in served) == sorted([registered] * 4 + [ended.session_id])

    secrets = Secrets(sessions=[registered], credentials=unknown)
    leaks = Leaks()
    leaks.check_kafka(await _every_record(kafka_settings), rollstream_topics.events, secrets)
    leaks.check_text("the log", log.read_text(), unknown)
    assert leaks.found == []
    chaos_report(
        fault="strict mode: unknown, missing and forgotten session keys (3 APIs)",
        load=f"{len(refused) + 2} refused, 5 registered calls (1 by a node-run harness)",
        lost=0,
        duplicated=0,
        errors=f"{len(refused) + 2} x 401 authentication_error in the caller's format "
        "(expected); recorded as rejected, keys nowhere",
    )
