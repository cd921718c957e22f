"""The addon's fast paths change nothing: a stream's prompt ids parsed straight into packed bytes
(the harness and the record see exactly what the ordinary parse gives), and the request's
headers read in one pass."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.flows import headers_dict
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.schemas import CallRecord, jsonfast
from tests.interceptor.published import Published

REQUEST = {"model": "harness-model", "messages": [{"role": "user", "content": "hi"}]}


def _chunk(delta: dict[str, Any], ids: list[int], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": ids}
    if ids:
        choice["logprobs"] = {"content": [{"token": "x", "logprob": -0.5} for _ in ids]}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "served", "choices": [choice]}
    return chunk | extra


def _stream(prompt_ids: list[int], separators: tuple[str, str]) -> bytes:
    chunks = [
        _chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=prompt_ids),
        _chunk({"content": "Hel"}, [11]),
        _chunk({"content": "lo"}, [12]),
        _chunk({}, []) | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": len(prompt_ids)}},
    ]
    events = [b"data: " + json.dumps(c, separators=separators).encode() for c in chunks]
    return b"\n\n".join([*events, b"data: [DONE]", b""])


async def _call(
    stream: bytes, cuts: list[int], body: dict[str, Any]
) -> tuple[list[bytes], CallRecord]:
    published = Published()
    records = published.records
    addon = RollstreamAddon(InterceptorSettings(), published, hash_key=b"test-hash-key")
    flow = tflow.tflow(
        req=tutils.treq(
            method=b"POST",
            path=b"/v1/chat/completions",
            content=jsonfast.dumps(body),
            headers=http.Headers(host="x", authorization="Bearer s1"),
        )
    )
    await addon.request(flow)
    flow.response = tutils.tresp(headers=http.Headers(content_type="text/event-stream"))
    addon.responseheaders(flow)
    stream_function = flow.response.stream
    assert callable(stream_function)

    def forward(read: bytes) -> bytes:
        out = stream_function(read)
        assert not isinstance(out, bytes)
        return b"".join(out)

    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    # Reads are never empty: an empty one is mitmproxy's end of stream.
    reads = [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    sent = [forward(read) for read in reads]
    sent.append(forward(b""))
    addon.response(flow)
    (record,) = records
    return sent, record


def _comparable(record: CallRecord) -> dict[str, Any]:
    return record.model_dump(exclude={"call_id", "timings"})


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt_ids=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300),
    separators=st.sampled_from([(",", ":"), (", ", ": ")]),
    cuts=st.lists(st.integers(0, 10**5), max_size=5),
    asked_ids=st.booleans(),
)
async def test_the_fast_path_changes_nothing_the_harness_or_the_record_sees(
    monkeypatch: pytest.MonkeyPatch,
    prompt_ids: list[int],
    separators: tuple[str, str],
    cuts: list[int],
    asked_ids: bool,
) -> None:
    body = REQUEST | {"stream": True} | ({"return_token_ids": True} if asked_ids else {})
    stream = _stream(prompt_ids, separators)
    taken: list[bool] = []
    real = jsonfast.loads_taking_ids

    def spy(data: bytes, key: str) -> tuple[dict[str, Any], bytes] | None:
        result = real(data, key)
        taken.append(result is not None)
        return result

    with monkeypatch.context() as patched:
        patched.setattr(jsonfast, "loads_taking_ids", spy)
        fast = await _call(stream, cuts, body)
    assert taken == ([] if asked_ids else [True])  # taken where the harness did not ask for them
    with monkeypatch.context() as patched:
        patched.setattr(jsonfast, "loads_taking_ids", lambda data, key: None)
        slow = await _call(stream, cuts, body)
    assert fast[0] == slow[0]  # byte for byte, at the same reads
    assert _comparable(fast[1]) == _comparable(slow[1])
    record = fast[1]
    assert record.prompt is not None and record.prompt.suffix.to_list() == prompt_ids
    assert record.completion_token_ids is not None
    assert record.completion_token_ids.to_list() == [11, 12]
    harness_saw = b"".join(fast[0])
    assert (b"prompt_token_ids" in harness_saw) is asked_ids


header_names = st.sampled_from(
    [b"Authorization", b"authorization", b"X-Api-Key", b"x-api-key", b"Host", b"\xc3\x89t\xc3\xa9"]
)
header_values = st.binary(max_size=6).filter(lambda v: b"\r" not in v and b"\n" not in v)


@given(st.lists(st.tuples(header_names, header_values), max_size=8))
def test_headers_are_read_as_mitmproxy_gives_them(fields: list[tuple[bytes, bytes]]) -> None:
    """Names case-insensitive (first spelling kept), repeated ones folded with ", "."""
    headers = http.Headers(fields)
    assert headers_dict(headers) == dict(headers)
