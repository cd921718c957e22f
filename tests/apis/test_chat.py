"""Chat Completions capture: fields asked upstream, removed from answers, gathered for records."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.chat import (
    Asked,
    Capture,
    CaptureOptions,
    prepare_chat_request,
    strip_chunk,
    strip_response,
)
from rollstream.apis.errors import TranslationError

JSON = dict[str, Any]
REQUEST = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_capture_fields_are_added_and_the_model_rewritten() -> None:
    upstream, asked = prepare_chat_request(
        REQUEST, CaptureOptions(top_logprobs=3, upstream_model="served")
    )
    assert upstream["model"] == "served"
    assert upstream["return_token_ids"] is True
    assert upstream["logprobs"] is True and upstream["top_logprobs"] == 3
    assert upstream["stream_options"] == {"include_usage": True}
    assert asked == Asked()
    assert REQUEST["model"] == "qwen" and "return_token_ids" not in REQUEST  # not mutated


def test_what_the_harness_asked_for_is_remembered() -> None:
    body = REQUEST | {
        "return_token_ids": True,
        "logprobs": True,
        "top_logprobs": 5,
        "stream_options": {"include_usage": True},
    }
    upstream, asked = prepare_chat_request(body, CaptureOptions(top_logprobs=1))
    assert asked == Asked(token_ids=True, logprobs=True, usage_in_stream=True)
    assert upstream["top_logprobs"] == 5


def test_sglang_fields() -> None:
    upstream, _ = prepare_chat_request(REQUEST, CaptureOptions(backend="sglang"))
    assert upstream["return_prompt_token_ids"] is True and upstream["return_meta_info"] is True
    assert "return_token_ids" not in upstream


def test_a_request_without_messages_is_rejected() -> None:
    with pytest.raises(TranslationError, match="messages"):
        prepare_chat_request({"model": "x"}, CaptureOptions())


RESPONSE = {
    "id": "chatcmpl-1",
    "model": "served",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "token_ids": [7, 8],
            "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.5}]},
            "finish_reason": "stop",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}


def test_answers_lose_the_fields_the_harness_did_not_ask_for() -> None:
    out = strip_response(RESPONSE, Asked(), harness_model="qwen")
    assert "prompt_token_ids" not in out and "token_ids" not in out["choices"][0]
    assert out["choices"][0]["logprobs"] is None
    assert out["model"] == "qwen"
    kept = strip_response(RESPONSE, Asked(token_ids=True, logprobs=True), None)
    assert kept["prompt_token_ids"] == [1, 2, 3] and kept["choices"][0]["token_ids"] == [7, 8]
    assert kept["model"] == "served"


def test_usage_chunk_is_dropped_unless_asked() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 3}}
    assert strip_chunk(usage, Asked(), None) is None
    assert strip_chunk(usage, Asked(usage_in_stream=True), None) == usage


def test_capture_from_a_whole_answer() -> None:
    capture = Capture()
    capture.add_response(RESPONSE)
    assert capture.has_tokens
    assert capture.prompt_token_ids == [1, 2, 3]
    assert capture.completion_token_ids == [7, 8]
    assert capture.logprobs == [-0.5, -1.5]
    assert capture.finish_reason == "stop" and capture.content == "hi"
    assert (capture.prompt_tokens, capture.completion_tokens) == (3, 2)


@given(
    pieces=st.lists(
        st.tuples(st.lists(st.integers(0, 50_000), max_size=3), st.text(max_size=5)), max_size=30
    )
)
def test_capture_from_chunks_concatenates_in_order(pieces: list[tuple[list[int], str]]) -> None:
    capture = Capture()
    capture.add_chunk(
        {
            "choices": [{"index": 0, "delta": {"role": "assistant"}, "token_ids": []}],
            "prompt_token_ids": [9],
        }
    )
    for ids, text in pieces:
        capture.add_chunk(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": text},
                        "token_ids": ids,
                        "logprobs": {"content": [{"logprob": -float(i)} for i in ids]},
                    }
                ]
            }
        )
    capture.add_chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    assert capture.completion_token_ids == [i for ids, _ in pieces for i in ids]
    assert capture.logprobs == [-float(i) for ids, _ in pieces for i in ids]
    assert capture.content == "".join(text for _, text in pieces)
    assert capture.finish_reason == "length" and capture.has_tokens


def test_tool_calls_are_assembled_from_fragments() -> None:
    capture = Capture()
    capture.add_chunk(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "bash", "arguments": ""},
                            }
                        ]
                    },
                }
            ]
        }
    )
    for fragment in ('{"comm', 'and": "ls"}'):
        capture.add_chunk(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": fragment}}]
                        },
                    }
                ]
            }
        )
    assert capture.tool_calls == {0: {"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}}


def test_missing_ids_or_logprobs_are_visible() -> None:
    capture = Capture()
    capture.add_response({"choices": [{"index": 0, "message": {"content": "x"}}]})
    assert not capture.has_tokens
    partial = Capture()
    partial.add_response({"prompt_token_ids": [1], "choices": [{"index": 0, "token_ids": [2]}]})
    assert partial.has_tokens and partial.logprobs is None


def test_a_logprob_entry_without_a_number_is_missing_not_probability_one() -> None:
    capture = Capture()
    entries = [{"token": "a", "logprob": -0.5}, {"token": "b"}, {"token": "c", "logprob": None}]
    capture.add_response(
        {
            "prompt_token_ids": [1],
            "choices": [{"index": 0, "token_ids": [2, 3, 4], "logprobs": {"content": entries}}],
        }
    )
    logprobs = capture.logprobs
    assert logprobs is not None and logprobs[0] == -0.5
    assert all(math.isnan(value) for value in logprobs[1:])


def test_sglang_meta_info() -> None:
    capture = Capture()
    capture.add_response(
        {
            "prompt_token_ids": [1],
            "choices": [
                {
                    "index": 0,
                    "meta_info": {"output_token_logprobs": [[-0.1, 5, "a"], [-0.2, 6, "b"]]},
                }
            ],
        }
    )
    assert capture.completion_token_ids == [5, 6] and capture.logprobs == [-0.1, -0.2]


def _text_chunk(text: Any = None, arguments: Any = None, name: str = "") -> JSON:
    delta: JSON = {"content": text}
    if arguments is not None:
        delta["tool_calls"] = [{"index": 0, "function": {"name": name, "arguments": arguments}}]
    return {"choices": [{"index": 0, "delta": delta}]}


def test_text_is_kept_in_pieces_and_read_whole_however_it_was_cut() -> None:
    cut, whole = Capture(), Capture()
    for i, piece in enumerate(["a", "", "b", "c"]):
        cut.add_chunk(_text_chunk(piece, piece, "f" if i == 0 else ""))
    whole.add_chunk(_text_chunk("abc", "abc", "f"))
    assert cut == whole
    assert cut.content == "abc" and cut.content == "abc"  # read again: the same text
    assert cut.tool_calls == {0: {"id": None, "name": "f", "arguments": "abc"}}
    cut.add_chunk(_text_chunk("d"))
    assert cut.content == "abcd" and cut != whole


@pytest.mark.parametrize("arguments", [7, ["x"], {"a": 1}])
def test_tool_call_arguments_that_are_not_text_fail_as_they_always_did(arguments: Any) -> None:
    with pytest.raises(TypeError) as failed:
        Capture().add_chunk(_text_chunk(None, arguments))
    with pytest.raises(TypeError) as before:
        text = ""
        text += arguments  # what the capture did before it kept pieces
    assert str(failed.value) == str(before.value)
