"""Gemini: whole answers, errors and countTokens; properties of answers sent back as history."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import Asked
from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini import (
    gemini_count_tokens_answer,
    gemini_count_tokens_request,
    gemini_error,
)
from rollstream.apis.gemini_answer import chat_to_gemini, include_thoughts
from rollstream.schemas import ApiKind
from tests.apis.gemini_samples import (
    FUNCTIONS,
    UPSTREAM,
    call,
    messages,
    model,
    result,
    text,
    tool_call,
    user,
)
from tests.apis.strategies import json_values_of, names
from tests.apis.vllm_chunks import CAPTURE_FIELDS, chat_response

JSON = dict[str, Any]
ids = st.text(min_size=1, max_size=24).map("fc-".__add__)
texts = st.text(max_size=60)
json_values = json_values_of(texts)
json_objects = st.dictionaries(texts, json_values, max_size=4)

# --- countTokens and errors ---------------------------------------------------------------


def test_count_tokens_request_from_contents_and_from_a_whole_request() -> None:
    contents = [user(text("hi")), model(call("f", {"a": 1}, "c"))]
    assert gemini_count_tokens_request({"contents": contents}, UPSTREAM) == {
        "model": UPSTREAM,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [tool_call("c", "f", {"a": 1})]},
        ],
        "add_generation_prompt": True,
    }
    whole = {
        "generateContentRequest": {
            "model": "models/gemini-2.5-pro",
            "contents": contents,
            "systemInstruction": {"parts": [text("sys")]},
            "tools": FUNCTIONS,
            "generationConfig": {"temperature": 0},
        }
    }
    out = gemini_count_tokens_request(whole, UPSTREAM)
    assert set(out) == {"model", "messages", "tools", "add_generation_prompt"}
    assert out["messages"][0] == {"role": "system", "content": "sys"}
    assert [t["function"]["name"] for t in out["tools"]] == ["a", "b", "c"]
    with pytest.raises(TranslationError):
        gemini_count_tokens_request({"generateContentRequest": []}, UPSTREAM)
    assert gemini_count_tokens_answer(42) == {"totalTokens": 42}


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (413, "INVALID_ARGUMENT"),
        (422, "INVALID_ARGUMENT"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (502, "UNAVAILABLE"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
        (507, "INTERNAL"),
    ],
)
def test_gemini_error(status: int, name: str) -> None:
    assert gemini_error(status, "boom") == {
        "error": {"code": status, "message": "boom", "status": name}
    }
    assert ADAPTER_BY_KIND[ApiKind.GEMINI].error(status, "boom") == gemini_error(status, "boom")


# --- whole answers ------------------------------------------------------------------------


ORIGINAL: JSON = {"model": "gemini-2.5-pro", "contents": [user(text("hi"))]}


def test_text_answer() -> None:
    adapter = ADAPTER_BY_KIND[ApiKind.GEMINI]
    out = adapter.answer(chat_response({"content": "Hello!"}), ORIGINAL, Asked())
    assert out == {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hello!"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 21, "candidatesTokenCount": 3, "totalTokenCount": 24},
        "modelVersion": "gemini-2.5-pro",
        "responseId": "chatcmpl-abc123",
    }
    assert not any(field in json.dumps(out) for field in CAPTURE_FIELDS)


def test_thoughts_are_asked_for_in_either_spelling() -> None:
    # google-genai sends the proto field name (include_thoughts); Google's API takes both.
    for key in ("includeThoughts", "include_thoughts"):
        assert include_thoughts({"generationConfig": {"thinkingConfig": {key: True}}})
    assert not include_thoughts({"generationConfig": {"thinkingConfig": {"includeThoughts": 1}}})
    assert not include_thoughts({"generationConfig": {"thinkingConfig": None}})


def test_thought_text_and_parallel_calls_in_order() -> None:
    message = {
        "reasoning_content": "Two files.",
        "content": "Reading.",
        "tool_calls": [
            tool_call("chatcmpl-tool-1", "read", {"path": "a.py"}),
            tool_call("chatcmpl-tool-2", "grep", {"pattern": "ü", "n": [1, 2]}),
        ],
    }
    thinking = {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    # Thoughts only when asked for (Google's default leaves them out).
    plain = chat_to_gemini(chat_response(message, "tool_calls"), ORIGINAL)
    assert not any(p.get("thought") for p in plain["candidates"][0]["content"]["parts"])
    out = chat_to_gemini(chat_response(message, "tool_calls"), ORIGINAL | thinking)
    [candidate] = out["candidates"]
    assert candidate["content"]["parts"] == [
        {"text": "Two files.", "thought": True},
        {"text": "Reading."},
        {"functionCall": {"id": "chatcmpl-tool-1", "name": "read", "args": {"path": "a.py"}}},
        {
            "functionCall": {
                "id": "chatcmpl-tool-2",
                "name": "grep",
                "args": {"pattern": "ü", "n": [1, 2]},
            }
        },
    ]
    assert candidate["finishReason"] == "STOP"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [("", {}), ("not json", {"_raw": "not json"}), ("[1, 2]", {"_raw": "[1, 2]"})],
)
def test_tool_arguments_that_are_not_an_object(arguments: str, expected: JSON) -> None:
    message = {
        "content": None,
        "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": arguments}}],
    }
    out = chat_to_gemini(chat_response(message, "tool_calls"), ORIGINAL)
    assert out["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"id": "t", "name": "f", "args": expected}}
    ]


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("stop", "STOP"),
        ("tool_calls", "STOP"),
        (None, "STOP"),
        ("length", "MAX_TOKENS"),
        ("content_filter", "SAFETY"),
        ("abort", "OTHER"),
    ],
)
def test_finish_reasons(finish: str | None, reason: str) -> None:
    out = chat_to_gemini(chat_response({"content": "x"}, finish), ORIGINAL)
    assert out["candidates"][0]["finishReason"] == reason


def test_answer_without_ids_usage_or_model() -> None:
    response = chat_response({"content": None, "tool_calls": [{"function": {"name": "f"}}]})
    del response["id"], response["usage"]
    out = chat_to_gemini(response, {"contents": []})
    call_id = out["candidates"][0]["content"]["parts"][0]["functionCall"]["id"]
    assert call_id.startswith("call_") and len(call_id) > 10
    # Counts from the capture fields; the upstream's model when the request names none.
    assert out["usageMetadata"] == {
        "promptTokenCount": 21,
        "candidatesTokenCount": 3,
        "totalTokenCount": 24,
    }
    assert out["modelVersion"] == UPSTREAM and out["responseId"]


@pytest.mark.parametrize("response", [{}, {"choices": []}, {"choices": ["x"]}])
def test_answer_without_choices_raises(response: JSON) -> None:
    with pytest.raises(TranslationError):
        chat_to_gemini(response, ORIGINAL)


# --- properties ---------------------------------------------------------------------------


@given(texts, st.lists(st.tuples(ids, names, json_objects), max_size=3))
def test_property_answer_keeps_text_and_calls(content: str, turn: list[Any]) -> None:
    calls = [tool_call(i, n, a) for i, n, a in turn]
    response = chat_response({"content": content, "tool_calls": calls}, "tool_calls")
    parts = chat_to_gemini(response, ORIGINAL)["candidates"][0]["content"]["parts"]
    assert [p["text"] for p in parts if "text" in p] == ([content] if content else [])
    got = [
        (p["functionCall"]["id"], p["functionCall"]["name"], p["functionCall"]["args"])
        for p in parts
        if "functionCall" in p
    ]
    assert got == [tuple(c) for c in turn]


@given(texts, st.lists(st.tuples(ids, names, json_objects), min_size=1, max_size=3), texts)
def test_property_an_answer_sent_back_as_history_renders_the_same_calls(
    content: str, turn: list[Any], output: str
) -> None:
    """What the harness gets back and echoes next turn becomes the Chat message it came from."""
    calls = [tool_call(i, n, a) for i, n, a in turn]
    answer = chat_to_gemini(
        chat_response({"content": content, "tool_calls": calls}, "tool_calls"), ORIGINAL
    )
    echoed = answer["candidates"][0]["content"]
    results = [
        result(p["functionCall"]["name"], {"output": output}, p["functionCall"]["id"])
        for p in echoed["parts"]
        if "functionCall" in p
    ]
    out = messages([user(text("go")), echoed, user(*results)])
    assert out[1] == {"role": "assistant", "content": content or None, "tool_calls": calls}
    assert [m["tool_call_id"] for m in out[2:]] == [i for i, _, _ in turn]
