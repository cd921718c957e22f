"""The Responses API over WebSocket, through the interceptor to the scripted backend, with Kafka.

A client speaks as Codex does: a warm-up, then creates naming the last response with only the
items after it. Every call is recorded by the HTTP path, whole, marked as sent over WebSocket;
what cannot be served is answered with an ``error`` event (or a refused upgrade) and recorded,
and the connection goes on serving.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rollstream.dev.bench.fidelity_serving import TASK
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.websocket import TICKET_HEADER, TRANSPORT_HEADER
from rollstream.schemas import CallRecord, CallStatus, TopicNames
from rollstream.schemas.calls import SessionRequests
from rollstream.settings import KafkaSettings
from tests.harness_stack import MODEL, register, scripted_interceptor
from tests.kafka_reading import read_records
from tests.waiting import until

pytestmark = pytest.mark.integration

SHELL = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}


def create(**fields: Any) -> dict[str, Any]:
    """A ``response.create`` message as Codex sends one."""
    return {"type": "response.create", "model": MODEL, "tools": [SHELL], "store": False} | fields


async def answer(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    """The events of one answer, up to its last (completed, or an error)."""
    events = []
    while True:
        message = await ws.receive(timeout=60)
        assert message.type is aiohttp.WSMsgType.TEXT, message
        events.append(json.loads(message.data))
        if events[-1]["type"] in ("response.completed", "response.failed", "error"):
            return events


def output_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items an answer gave, as its client keeps them."""
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


def tool_output(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": item["call_id"], "output": "ok"}


async def session_records(kafka: KafkaSettings, session: str, count: int) -> list[CallRecord]:
    return await read_records(
        kafka,
        TopicNames(kafka.topic_prefix).events,
        CallRecord,
        count,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=1.0,
    )


@pytest.fixture
async def proxy(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Interceptor]:
    async with scripted_interceptor(kafka_settings, tmp_path / "state") as interceptor:
        yield interceptor


async def test_a_codex_like_client_is_served_and_each_call_recorded_whole(
    proxy: Interceptor, kafka_settings: KafkaSettings
) -> None:
    register(proxy, "ws-whole")
    headers = {"authorization": "Bearer ws-whole", "session-id": "codex-session"}
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(f"{proxy.url}/v1/responses", headers=headers) as ws,
    ):
        # The warm-up: answered at once, empty, and no call.
        await ws.send_json(create(generate=False, input=[USER]))
        warm = await answer(ws)
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == []
        previous = warm[-1]["response"]["id"]
        history = [USER]
        sent: list[dict[str, Any]] = []
        for _ in range(3):  # the solve scenario: two commands, then its answer
            await ws.send_json(create(previous_response_id=previous, input=sent))
            history += sent
            whole = list(history)  # what this call would have sent by HTTP
            events = await answer(ws)
            assert events[-1]["type"] == "response.completed", events[-1]
            await ws.send_json({"type": "response.processed", "response_id": previous})
            output = output_of(events)
            calls = [item for item in output if item["type"] == "function_call"]
            history += output
            sent = [tool_output(item) for item in calls]
            previous = events[-1]["response"]["id"]
        assert not calls and "Done." in json.dumps(output)
    records = await session_records(kafka_settings, "ws-whole", 3)
    assert [(r.status, r.transport) for r in records] == [(CallStatus.OK, "websocket")] * 3
    assert all(r.caller is not None and r.caller.session == "codex-session" for r in records)
    assert all(r.completion_token_ids for r in records)
    # The last call's request is the client's whole history, as it would have sent it by HTTP.
    last = SessionRequests(records).harness(records[-1].call_id)
    assert _plain(last["input"]) == _plain(whole)
    assert proxy.websockets.counts["calls"] == 3 and proxy.websockets.counts["warmups"] == 1


def _plain(items: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


async def test_what_a_websocket_cannot_serve_is_refused_recorded_and_nothing_else_lost(
    proxy: Interceptor, kafka_settings: KafkaSettings
) -> None:
    register(proxy, "ws-bad")
    headers = {"authorization": "Bearer ws-bad"}
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(f"{proxy.url}/v1/responses", headers=headers) as ws,
    ):
        await ws.send_str("not json")
        await ws.send_json({"type": "response.append", "input": []})
        await ws.send_bytes(b"{}")
        await ws.send_json(create(previous_response_id="resp_unknown", input=[USER]))
        errors = [(await answer(ws))[-1] for _ in range(4)]
        assert [e["status"] for e in errors] == [400] * 4
        messages = [e["error"]["message"] for e in errors]
        assert "must be JSON" in messages[0]
        assert "unknown WebSocket message type 'response.append'" in messages[1]
        assert "must be text" in messages[2]
        assert "previous_response_id is not supported" in messages[3]
        # The connection still serves a call.
        await ws.send_json(create(input=[USER]))
        assert (await answer(ws))[-1]["type"] == "response.completed"
    records = await session_records(kafka_settings, "ws-bad", 5)
    failed = [r for r in records if r.status is CallStatus.ERROR]
    assert len(failed) == 4 and all(r.error and r.error.http_status == 400 for r in failed)
    assert all(r.transport == "websocket" for r in records)
    assert proxy.websockets.counts["refused"] == 3


async def test_an_upgrade_the_proxy_would_not_serve_is_refused(
    proxy: Interceptor, kafka_settings: KafkaSettings
) -> None:
    register(proxy, "ws-refused")
    async with aiohttp.ClientSession() as client:
        # Only the Responses route speaks WebSocket.
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(
                f"{proxy.url}/v1/chat/completions", headers={"authorization": "Bearer ws-refused"}
            )
        assert refused.value.status == 405
        # The bridge takes no connection that did not come through the proxy's checks.
        bridge = f"http://127.0.0.1:{proxy.websockets.port}/"
        for ticket in ({}, {TICKET_HEADER: "made-up"}):
            with pytest.raises(aiohttp.WSServerHandshakeError) as direct:
                await client.ws_connect(bridge, headers=ticket)
            assert direct.value.status == 403
        # A harness cannot claim to have come over WebSocket.
        body = {"model": MODEL, "input": TASK, "tools": [SHELL]}
        headers = {"authorization": "Bearer ws-refused", TRANSPORT_HEADER: "guess"}
        async with client.post(f"{proxy.url}/v1/responses", json=body, headers=headers) as got:
            assert got.status == 200
    records = await session_records(kafka_settings, "ws-refused", 2)
    assert [(r.status, r.transport) for r in records] == [
        (CallStatus.ERROR, "http"),
        (CallStatus.OK, "http"),
    ]
    assert records[0].error is not None and "WebSocket" in records[0].error.message


async def test_strict_mode_refuses_the_upgrade_of_an_unknown_session(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    async with (
        scripted_interceptor(kafka_settings, tmp_path / "state", strict=True) as proxy,
        aiohttp.ClientSession() as client,
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(
                f"{proxy.url}/v1/responses", headers={"authorization": "Bearer nobody"}
            )
        assert refused.value.status == 401
        assert proxy.websockets.counts["opened"] == 0


async def test_a_stopping_proxy_closes_its_websockets_as_going_away(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    """Codex reconnects on a close; the proxy's calls were drained first, none is lost."""
    async with aiohttp.ClientSession() as client:
        async with scripted_interceptor(kafka_settings, tmp_path / "state") as proxy:
            register(proxy, "ws-stop")
            ws = await client.ws_connect(
                f"{proxy.url}/v1/responses", headers={"authorization": "Bearer ws-stop"}
            )
            await ws.send_json(create(input=[USER]))
            assert (await answer(ws))[-1]["type"] == "response.completed"
            assert len(proxy.websockets.open) == 1
        closed = await ws.receive(timeout=10)
        assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1001)
        await ws.close()
    [record] = await session_records(kafka_settings, "ws-stop", 1)
    assert record.status is CallStatus.OK and record.transport == "websocket"


async def test_a_harness_gone_mid_answer_leaves_its_call_recorded_cancelled(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    async with (
        scripted_interceptor(kafka_settings, tmp_path / "state", tpot_ms=100) as proxy,
        aiohttp.ClientSession() as client,
    ):
        register(proxy, "ws-gone")
        ws = await client.ws_connect(
            f"{proxy.url}/v1/responses", headers={"authorization": "Bearer ws-gone"}
        )
        await ws.send_json(create(input=[USER]))
        first = json.loads((await ws.receive(timeout=30)).data)
        assert first["type"] == "response.created"
        await ws.close()  # mid-answer: the model is still sampling
        [record] = await session_records(kafka_settings, "ws-gone", 1)
        assert (record.status, record.transport) == (CallStatus.CANCELLED, "websocket")
        await until(lambda: not proxy.websockets.open, 10, "the bridge let the connection go")
