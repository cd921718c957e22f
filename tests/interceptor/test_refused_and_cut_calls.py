"""Calls refused (strict mode, too large) or cut (a stop, a broken upstream); no network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.connection import ConnectionState
from mitmproxy.test import tflow

from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.registry import RegistryError, SessionRegistry
from rollstream.interceptor.sessions import (
    SESSION_HEADER,
    affinity_key,
    keyed_session,
    named_session,
)
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.schemas import CallRecord, CallStatus
from tests.interceptor.published import Published

CHAT: Any = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CLAUDE: Any = CHAT | {"max_tokens": 5}


def _flow(path: str, headers: dict[str, str], body: Any, method: str = "POST") -> http.HTTPFlow:
    content = json.dumps(body).encode()
    fields = http.Headers([(k.encode(), v.encode()) for k, v in headers.items()])
    request = http.Request.make(method, f"http://127.0.0.1:8100{path}", content, fields)
    return tflow.tflow(req=request)


def _addon(
    strict: bool, registry: SessionRegistry | None = None
) -> tuple[RollstreamAddon, list[CallRecord]]:
    published = Published()
    settings = InterceptorSettings(strict_sessions=strict)
    return RollstreamAddon(settings, published, registry), published.records


def test_the_registry_journals_registrations_and_compacts_on_load(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "interceptor-8100.txt"
    registry = SessionRegistry(path)
    assert not path.exists()  # nothing written until something is registered
    for session in ("a", "b", "c"):
        registry.register(session)
    registry.register("a")  # twice: once in the journal
    registry.forget("b")
    registry.forget("never")
    assert path.read_text() == "+a\n+b\n+c\n-b\n"
    reloaded = SessionRegistry(path)
    assert "a" in reloaded and "c" in reloaded and "b" not in reloaded and len(reloaded) == 2
    assert path.read_text() == "+a\n+c\n"  # compacted


@pytest.mark.parametrize("session", ["", " padded", "two\nlines", "cr\r"])
def test_the_registry_refuses_ids_it_could_not_journal(session: str) -> None:
    with pytest.raises(RegistryError):
        SessionRegistry().register(session)


def test_a_journal_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    registry = SessionRegistry(blocker / "sessions.txt")  # its folder is a file
    with pytest.raises(RegistryError, match="cannot write"):
        registry.register("a")
    assert "a" not in registry


@pytest.mark.parametrize(
    ("path", "headers", "body", "anthropic"),
    [
        ("/v1/chat/completions", {"authorization": "Bearer sk-live-1"}, CHAT, False),
        ("/v1/responses", {"authorization": "Bearer sk-live-1"}, {"input": "hi"}, False),
        ("/v1/messages", {"x-api-key": "sk-live-1"}, CLAUDE, True),
        ("/s/sk-live-1/v1/messages", {}, CLAUDE, True),
    ],
)
async def test_strict_mode_answers_an_unknown_session_401_in_its_format(
    path: str, headers: dict[str, str], body: Any, anthropic: bool
) -> None:
    addon, records = _addon(strict=True)
    flow = _flow(path, headers, body)
    await addon.request(flow)
    assert flow.response is not None and flow.response.status_code == 401
    answer = json.loads(flow.response.content or b"")
    assert answer["error"]["type"] == "authentication_error"
    assert (answer.get("type") == "error") is anthropic
    [record] = records
    assert record.session_id == "anonymous" and record.status is CallStatus.ERROR
    assert record.error is not None and record.error.type == "unknown_session"
    assert record.error.http_status == 401
    # The key may be a real secret: only its hash is named.
    dumped = json.dumps(record.model_dump(mode="json")) + json.dumps(answer)
    assert "sk-live-1" not in dumped and affinity_key("sk-live-1") in dumped


async def test_strict_mode_lets_registered_sessions_and_other_paths_through() -> None:
    registry = SessionRegistry()
    registry.register("sess-1")
    addon, records = _addon(strict=True, registry=registry)
    flow = _flow("/v1/chat/completions", {"authorization": "Bearer sess-1"}, CHAT)
    await addon.request(flow)
    assert flow.response is None and flow.request.path == "/v1/chat/completions"
    assert "authorization" not in flow.request.headers
    models = _flow("/v1/models", {"authorization": "Bearer unknown"}, {}, "GET")
    await addon.request(models)
    assert models.response is None  # not an LLM call: forwarded (without the key)
    registry.forget("sess-1")
    again = _flow("/v1/chat/completions", {"authorization": "Bearer sess-1"}, CHAT)
    await addon.request(again)
    assert again.response is not None and again.response.status_code == 401
    assert len(records) == 1


async def test_without_strict_mode_any_session_is_served() -> None:
    addon, records = _addon(strict=False)
    flow = _flow("/v1/chat/completions", {"authorization": "Bearer anyone"}, CHAT)
    await addon.request(flow)
    assert flow.response is None and records == []


async def test_an_oversized_body_is_refused_413_and_not_kept() -> None:
    published = Published()
    records = published.records
    addon = RollstreamAddon(InterceptorSettings(max_body_bytes=1024), published)
    flow = _flow("/v1/messages", {"x-api-key": "s"}, CLAUDE | {"padding": "x" * 2048})
    await addon.request(flow)
    assert flow.response is not None and flow.response.status_code == 413
    assert json.loads(flow.response.content or b"")["error"]["type"] == "request_too_large"
    # A finished flow waits for the cyclic GC: its body must not wait with it.
    assert flow.request.raw_content == b""
    [record] = records
    assert record.error is not None and record.error.http_status == 413


async def test_calls_in_flight_at_a_stop_are_recorded_once_as_failed() -> None:
    addon, records = _addon(strict=False)
    flows = [_flow("/v1/chat/completions", {SESSION_HEADER: f"s{i}"}, CHAT) for i in (1, 2)]
    for flow in flows:
        await addon.request(flow)
    assert addon.record_unfinished("stopping") == 2
    assert sorted(r.session_id for r in records) == ["s1", "s2"]
    assert all(r.error is not None and r.error.type == "interceptor_stopped" for r in records)
    assert addon.in_flight == {} and addon.live == {}
    addon.error(flows[0])  # a hook that still runs afterwards: no second record
    assert len(records) == 2 and addon.record_unfinished("again") == 0


@pytest.mark.parametrize(
    ("client", "status", "kind"),
    [
        (ConnectionState.OPEN, CallStatus.ERROR, "upstream_stream_broken"),
        (ConnectionState.CLOSED, CallStatus.CANCELLED, "cancelled"),
    ],
)
async def test_a_stream_cut_is_blamed_on_the_side_that_went_away(
    client: ConnectionState, status: CallStatus, kind: str
) -> None:
    addon, records = _addon(strict=False)
    flow = _flow("/v1/chat/completions", {"authorization": "Bearer s"}, CHAT | {"stream": True})
    await addon.request(flow)
    flow.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    flow.client_conn.state = client
    flow.error = tflow.terr("peer closed connection")
    addon.error(flow)
    [record] = records
    assert record.status is status and record.error is not None and record.error.type == kind


@pytest.mark.parametrize(
    ("client", "status", "kind"),
    [
        (ConnectionState.OPEN, CallStatus.ERROR, "upstream_unreachable"),
        (ConnectionState.CLOSED, CallStatus.CANCELLED, "cancelled"),
    ],
)
async def test_a_whole_answer_never_given_is_blamed_on_the_side_that_went_away(
    client: ConnectionState, status: CallStatus, kind: str
) -> None:
    addon, records = _addon(strict=False)
    flow = _flow("/v1/chat/completions", {"authorization": "Bearer s"}, CHAT)
    await addon.request(flow)
    flow.client_conn.state = client  # the harness hung up while waiting, or is still there
    flow.error = tflow.terr(
        "Client disconnected." if client is ConnectionState.CLOSED else "refused"
    )
    addon.error(flow)
    [record] = records
    assert record.status is status and record.error is not None and record.error.type == kind


async def test_outside_strict_mode_an_unregistered_key_is_recorded_only_as_its_keyed_hash() -> None:
    published = Published()
    secret = b"deployment-secret"
    addon = RollstreamAddon(InterceptorSettings(), published, hash_key=secret)
    addon.sessions.register("registered-1", None)
    calls = [
        ("/v1/chat/completions", {"authorization": "Bearer sk-live-abc"}),
        ("/v1/messages", {"x-api-key": "sk-live-abc"}),  # the same key: the same session
        ("/v1/chat/completions", {"authorization": "Bearer registered-1"}),
        ("/v1/chat/completions", {SESSION_HEADER: "named-1", "authorization": "Bearer sk-x"}),
        ("/s/path-1/v1/chat/completions", {"authorization": "Bearer sk-y"}),
    ]
    for path, headers in calls:
        body = CLAUDE if path.endswith("/messages") else CHAT
        await addon.request(_flow(path, headers, body))
    assert addon.record_unfinished("done") == len(calls)
    hashed = keyed_session(secret, "sk-live-abc")
    assert hashed.startswith("key-") and len(hashed) == 4 + 24
    assert [r.session_id for r in published.records] == [
        hashed,
        hashed,
        "registered-1",
        "named-1",
        "path-1",
    ]
    dumped = json.dumps([r.model_dump(mode="json") for r in published.records])
    for key in ("sk-live-abc", "sk-x", "sk-y"):
        assert key not in dumped
    # Keyed: another deployment's secret names the same key otherwise.
    assert keyed_session(b"another-secret", "sk-live-abc") != hashed


def test_a_named_session_is_one_a_launcher_chose() -> None:
    assert named_session({}, "/s/abc/v1/chat/completions")
    assert named_session({"X-Rollstream-Session": "abc"}, "/v1/chat/completions")
    assert not named_session({"Authorization": "Bearer abc"}, "/v1/chat/completions")
    assert not named_session({}, "/s//v1/chat/completions")
    assert not named_session({SESSION_HEADER: ""}, "/v1/chat/completions")


def _chunk(delta: dict[str, Any], ids: list[int], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "token_ids": ids}
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return f"data: {json.dumps(chunk | extra)}\n\n".encode()


#: A vLLM stream: prompt ids on the first chunk, text, the finish, usage, then [DONE].
_STREAM = [
    _chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=[1, 2, 3]),
    _chunk({"content": "Hel"}, [10]),
    _chunk({"content": "lo"}, [11], "stop"),
    b'data: {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [], '
    b'"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}\n\n',
    b"data: [DONE]\n\n",
]
_HUNG_UP = {
    "/v1/chat/completions": (CHAT | {"stream": True}, b"[DONE]"),
    "/v1/responses": ({"model": "m", "input": "hi", "stream": True}, b"response.completed"),
    "/v1/messages": (CLAUDE | {"stream": True}, b"message_stop"),
}


@pytest.mark.parametrize("path", list(_HUNG_UP))
@pytest.mark.parametrize("reads", [len(_STREAM), len(_STREAM) - 1])
async def test_a_harness_that_hangs_up_on_the_last_event_has_a_complete_call(
    path: str, reads: int
) -> None:
    # Codex closes on response.completed while vLLM is still ending its chunked body: the call
    # was recorded cancelled, its answer lost to training. Before [DONE] it is cancelled.
    addon, records = _addon(strict=False)
    body, terminal = _HUNG_UP[path]
    flow = _flow(path, {"authorization": "Bearer s"}, body)
    await addon.request(flow)
    flow.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    addon.responseheaders(flow)
    stream = flow.response.stream
    assert callable(stream)
    sent = b""
    for data in _STREAM[:reads]:
        out = stream(data)
        sent += out if isinstance(out, bytes) else b"".join(out)
    flow.client_conn.state = ConnectionState.CLOSED
    flow.error = tflow.terr("Client disconnected.")
    addon.error(flow)
    [record] = records
    if reads == len(_STREAM):
        assert terminal in sent
        assert record.status is CallStatus.OK and record.error is None
        assert record.completion_token_ids is not None
        assert record.completion_token_ids.to_list() == [10, 11]
        assert record.finish_reason == "stop"
    else:
        assert terminal not in sent
        assert record.status is CallStatus.CANCELLED
