"""Completions answers as Chat answers: sampled ids split into content and tool calls, ids kept."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.exact.completions import (
    CompletionStreamToChat,
    chat_from_completion,
    completion_request,
)
from rollstream.models.hermes import parse_tool_calls
from rollstream.models.template_family import TemplateFamily

EOT = "<|im_end|>"
FAMILY = TemplateFamily.load(default_tokenizer_dir())  # the toy model: hermes calls


def test_the_request_keeps_sampling_and_asks_for_ids() -> None:
    chat = {
        "model": "m",
        "messages": [],
        "temperature": 0.7,
        "max_completion_tokens": 64,
        "stop": ["X"],
        "seed": 3,
        "tools": [{"type": "function"}],
        "stream": True,
    }
    body = completion_request(chat, [1, 2, 3], "served", top_logprobs=2)
    assert body["prompt"] == [1, 2, 3] and body["model"] == "served"
    assert body["return_token_ids"] is True and body["logprobs"] == 2
    assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (
        0.7,
        64,
        ["X"],
        3,
    )
    assert body["stream_options"] == {"include_usage": True}
    assert "tools" not in body and "messages" not in body
    # No limit in Chat means the rest of the context; /v1/completions' own default is 16, and
    # vLLM 0.32 takes null for 16 too: the rest of the context the upstream reported is sent.
    unlimited = completion_request({"messages": []}, [1, 2, 3], "served", 0, max_model_len=1000)
    assert unlimited["max_tokens"] == 997
    unknown = completion_request({"messages": []}, [1], "served", top_logprobs=0)
    assert "max_tokens" in unknown and unknown["max_tokens"] is None


calls = st.lists(
    st.tuples(
        st.sampled_from(["shell", "read_file", "edit"]),
        st.dictionaries(st.sampled_from(["a", "path", "cmd"]), st.text(max_size=8), max_size=2),
    ),
    max_size=2,
)
content = st.text(alphabet="abc xyz.\n{}\"'", max_size=30).filter(lambda s: "<" not in s)


def completion_text(text: str, tool_calls: list[tuple[str, dict[str, str]]]) -> str:
    blocks = "".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>"
        for n, a in tool_calls
    )
    return text + blocks + EOT


@settings(max_examples=60, deadline=None)
@given(text=content, tool_calls=calls, cuts=st.lists(st.integers(0, 200), max_size=6))
def test_streamed_and_whole_answers_agree_with_the_parser(
    text: str, tool_calls: list[tuple[str, dict[str, str]]], cuts: list[int]
) -> None:
    full = completion_text(text, tool_calls)
    ids = FAMILY.tokenizer.encode(full)
    expected = parse_tool_calls(full[: -len(EOT)])
    whole, _ = chat_from_completion(
        {"id": "cmpl-1", "choices": [{"text": full, "finish_reason": "stop", "token_ids": ids}]},
        FAMILY,
    )
    message = whole["choices"][0]["message"]
    assert message["content"] == expected.content
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls", [])
    ] == [(n, a) for n, a in tool_calls]
    assert whole["choices"][0]["finish_reason"] == ("tool_calls" if tool_calls else "stop")

    bounds = sorted({min(c, len(ids)) for c in cuts} | {0, len(ids)})
    pieces = [FAMILY.tokenizer.decode(ids[a:b]) for a, b in itertools.pairwise(bounds)]
    translator = CompletionStreamToChat(FAMILY)
    chunks: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        body = {
            "id": "cmpl-1",
            "choices": [
                {
                    "text": piece,
                    "finish_reason": "stop" if last else None,
                    "token_ids": ids[bounds[i] : bounds[i + 1]],
                    **({"prompt_token_ids": [7, 8]} if i == 0 else {}),
                }
            ],
        }
        chunks += list(translator.feed(body))
    streamed_text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert streamed_text == (expected.content or "")
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    names = [d["function"]["name"] for d in deltas if "id" in d]
    arguments = [json.loads(d["function"]["arguments"]) for d in deltas if "id" not in d]
    assert list(zip(names, arguments, strict=True)) == [(n, a) for n, a in tool_calls]
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == ids
    assert chunks[0]["prompt_token_ids"] == [7, 8]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == ("tool_calls" if tool_calls else "stop")


def test_logprobs_become_chat_logprobs_and_usage_passes() -> None:
    body = {
        "id": "cmpl-9",
        "choices": [
            {
                "text": "hi",
                "finish_reason": "length",
                "logprobs": {
                    "tokens": ["h", "i"],
                    "token_logprobs": [-0.5, -1.0],
                    "top_logprobs": [{"h": -0.5}, {"i": -1.0, "j": -2.0}],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    chat, _ = chat_from_completion(body, FAMILY)
    [first, second] = chat["choices"][0]["logprobs"]["content"]
    assert first == {
        "token": "h",
        "logprob": -0.5,
        "top_logprobs": [{"token": "h", "logprob": -0.5}],
    }
    assert second["top_logprobs"][1] == {"token": "j", "logprob": -2.0}
    assert (
        chat["choices"][0]["finish_reason"] == "length" and chat["usage"]["completion_tokens"] == 2
    )
    assert chat["id"] == "chatcmpl-9"
    usage = list(
        CompletionStreamToChat(FAMILY).feed({"id": "cmpl-9", "choices": [], "usage": {"x": 1}})
    )
    assert usage[0]["usage"] == {"x": 1} and usage[0]["choices"] == []
