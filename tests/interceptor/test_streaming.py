"""The per-read stream function: what the harness gets when a read cannot be translated whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import Asked
from rollstream.interceptor.recording import CallState
from rollstream.interceptor.streaming import stream_function
from rollstream.schemas import ApiKind

REQUESTS: dict[ApiKind, dict[str, Any]] = {
    ApiKind.CHAT_COMPLETIONS: {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ApiKind.RESPONSES: {"model": "m", "input": "hi"},
    ApiKind.ANTHROPIC_MESSAGES: {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    },
    ApiKind.GEMINI: {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}

# What ends a stream with an error, in each API's own events.
ERROR_MARKERS = {
    ApiKind.CHAT_COMPLETIONS: b'"error"',
    ApiKind.RESPONSES: b"response.failed",
    ApiKind.ANTHROPIC_MESSAGES: b"event: error",
    ApiKind.GEMINI: b'"error"',
}


def _function(api: ApiKind) -> tuple[CallState, Any]:
    body = REQUESTS[api]
    state = CallState(api, "s", body, stream=True, asked=Asked())
    return state, stream_function(state, ADAPTER_BY_KIND[api].stream(body, state.asked))


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _delta(content: str, **choice: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}, **choice}], "model": "m"}


@pytest.mark.parametrize("api", list(REQUESTS), ids=lambda a: a.value)
def test_an_event_that_cannot_be_encoded_ends_the_stream_with_an_error_there(
    api: ApiKind,
) -> None:
    state, stream = _function(api)
    # A lone surrogate: only the standard library parses it, and it cannot be written as UTF-8.
    broken = b'data: {"choices": [{"index": 0, "delta": {"content": "x\\ud800"}}]}\n\n'
    read = broken + _event(_delta("", finish_reason="stop")) + b"data: [DONE]\n\n"
    sent = b"".join(stream(b"".join([_event(_delta("ok")), read])))
    assert ERROR_MARKERS[api] in sent, sent
    assert state.error is not None and state.error.type == "translation_error"
    # Nothing after the broken event was captured or translated: the stream did not finish.
    assert state.capture.finish_reason is None
    assert state.capture.content == "okx\ud800"


@pytest.mark.parametrize("api", list(REQUESTS), ids=lambda a: a.value)
def test_a_read_with_nothing_to_send_gives_no_item(api: ApiKind) -> None:
    """An empty item would be sent as an empty chunk: the end of a chunked answer."""
    state, stream = _function(api)
    assert stream(_event({"error": {"message": "upstream failed"}})) != []
    assert state.error is not None and state.error.type == "upstream_stream_error"
    # A chunk the capture cannot read, after the stream already ended in an error: the
    # translator has nothing more to say, and the read gives no empty item.
    assert b"" not in stream(_event({"choices": [1]}))
    assert stream(b": keep-alive comment\n\n") == []
    assert stream(b'data: {"choi') == []  # half an event: nothing complete yet
