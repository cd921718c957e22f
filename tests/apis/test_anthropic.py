"""Anthropic Messages <-> Chat Completions: requests, whole answers, errors, token counting."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.anthropic import (
    anthropic_count_tokens_request,
    anthropic_error,
    anthropic_to_chat,
    chat_to_anthropic,
)
from rollstream.apis.errors import TranslationError
from tests.apis.strategies import json_values_of, names
from tests.apis.vllm_chunks import CAPTURE_FIELDS, UPSTREAM, chat_response

JSON = dict[str, Any]


def request(messages: list[JSON], **extra: Any) -> JSON:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages, **extra}


def chat(messages: list[JSON], **extra: Any) -> JSON:
    return anthropic_to_chat(request(messages, **extra), UPSTREAM)


def user(content: Any) -> JSON:
    return {"role": "user", "content": content}


def assistant(content: Any) -> JSON:
    return {"role": "assistant", "content": content}


def tool_use(call_id: str, name: str, input_: JSON) -> JSON:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input_}


def tool_result(call_id: str, content: Any, **extra: Any) -> JSON:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def text(value: str) -> JSON:
    return {"type": "text", "text": value}


# --- requests ---------------------------------------------------------------------------


def test_model_replaced_and_sampling_copied() -> None:
    out = chat([user("hi")], temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END", "##"])
    assert out == {
        "model": UPSTREAM,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1024,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END", "##"],
    }


def test_anthropic_only_settings_never_forwarded() -> None:
    out = chat(
        [user("hi")],
        metadata={"user_id": "secret-user"},
        thinking={"type": "enabled", "budget_tokens": 2048},
        service_tier="auto",
    )
    assert set(out) == {"model", "messages", "max_tokens"}
    assert "secret-user" not in json.dumps(out)


def test_stream_asks_for_usage() -> None:
    out = chat([user("hi")], stream=True)
    assert out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}
    assert "stream" not in chat([user("hi")], stream=False)


def test_system_string() -> None:
    out = chat([user("hi")], system="You are terse.")
    assert out["messages"][0] == {"role": "system", "content": "You are terse."}
    assert out["messages"][1] == {"role": "user", "content": "hi"}


def test_system_blocks_joined_cache_control_ignored() -> None:
    system = [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        text("Be terse."),
    ]
    out = chat([user("hi")], system=system)
    assert out["messages"][0] == {"role": "system", "content": "You are Claude Code.\nBe terse."}


def test_system_messages_mid_conversation_kept_in_place() -> None:
    """Claude Code sends them to models it does not know (not in Anthropic's own API)."""
    messages = [user("task"), {"role": "system", "content": [text("Agent types:"), text("- a")]}]
    out = chat(messages, system="You are Claude Code.")
    assert [m["role"] for m in out["messages"]] == ["system", "user", "system"]
    assert out["messages"][2]["content"] == "Agent types:\n- a"
    plain = chat([user("task"), {"role": "system", "content": "Be brief."}])
    assert plain["messages"][1] == {"role": "system", "content": "Be brief."}


def test_text_blocks_joined() -> None:
    content = [text("first"), {**text("second"), "cache_control": {"type": "ephemeral"}}]
    assert chat([user(content)])["messages"] == [{"role": "user", "content": "first\nsecond"}]


def test_images_make_content_parts() -> None:
    content = [
        text("what is this?"),
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    assert chat([user(content)])["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]


def test_parallel_tool_use_in_one_assistant_message() -> None:
    content = [
        text("Reading both."),
        tool_use("toolu_1", "read", {"path": "a.py"}),
        tool_use("toolu_2", "read", {"path": "b/ü.py"}),
    ]
    assert chat([user("go"), assistant(content)])["messages"][1] == {
        "role": "assistant",
        "content": "Reading both.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "a.py"}'},
            },
            {
                "id": "toolu_2",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "b/ü.py"}'},
            },
        ],
    }


def test_tool_use_without_text_has_no_content() -> None:
    message = chat([user("go"), assistant([tool_use("t", "ls", {})])])["messages"][1]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"]["arguments"] == "{}"


def test_thinking_becomes_reasoning_content_redacted_dropped() -> None:
    content = [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "Done.", "signature": "sig2"},
        text("Answer."),
    ]
    assert chat([user("q"), assistant(content)])["messages"][1] == {
        "role": "assistant",
        "content": "Answer.",
        "reasoning_content": "Let me think.\nDone.",
        "reasoning": "Let me think.\nDone.",  # the name vLLM 0.20+ reads in history
    }


def test_assistant_without_text_or_calls_has_empty_content() -> None:
    content = [{"type": "thinking", "thinking": "hm", "signature": ""}]
    message = chat([user("q"), assistant(content)])["messages"][1]
    assert message == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "hm",
        "reasoning": "hm",
    }


def test_tool_results_come_first_then_user_text() -> None:
    calls = [tool_use("toolu_a", "read", {"path": "a"}), tool_use("toolu_b", "read", {"path": "b"})]
    results = [
        text("Here you go."),
        tool_result("toolu_a", "contents of a"),
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        tool_result("toolu_b", [text("line 1"), text("line 2")], is_error=True),
    ]
    messages = chat([user("go"), assistant(calls), user(results)])["messages"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "toolu_a", "content": "contents of a"},
        {"role": "tool", "tool_call_id": "toolu_b", "content": "line 1\nline 2"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here you go."},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
    ]


def test_tool_result_only_makes_no_user_message() -> None:
    messages = chat(
        [user("go"), assistant([tool_use("t", "ls", {})]), user([tool_result("t", "")])]
    )
    assert messages["messages"][2:] == [{"role": "tool", "tool_call_id": "t", "content": ""}]


def test_tool_result_image_follows_in_user_message() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": "Zm"},
    }
    result = tool_result("t", [text("screenshot:"), image])
    messages = chat([user("go"), assistant([tool_use("t", "shot", {})]), user([result])])
    assert messages["messages"][2:] == [
        {"role": "tool", "tool_call_id": "t", "content": "screenshot:"},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,Zm"}}],
        },
    ]


def test_tools_translated_and_server_tools_dropped() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    tools = [
        {"name": "read", "description": "Read a file", "input_schema": schema},
        {"type": "custom", "name": "ls", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        {"type": "bash_20250124", "name": "bash"},
    ]
    assert chat([user("hi")], tools=tools)["tools"] == [
        {
            "type": "function",
            "function": {"name": "read", "description": "Read a file", "parameters": schema},
        },
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
    ]


TOOLS = [{"name": "read", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "read"},
            {"tool_choice": {"type": "function", "function": {"name": "read"}}},
        ),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
        (
            {"type": "any", "disable_parallel_tool_use": False},
            {"tool_choice": "required"},
        ),
    ],
)
def test_tool_choice(choice: JSON, expected: JSON) -> None:
    out = chat([user("hi")], tools=TOOLS, tool_choice=choice)
    assert {k: v for k, v in out.items() if k in ("tool_choice", "parallel_tool_calls")} == expected


def test_tool_choice_dropped_when_no_tool_is_left() -> None:
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    out = chat([user("hi")], tools=tools, tool_choice={"type": "any"})
    assert "tools" not in out
    assert "tool_choice" not in out


def test_request_not_mutated() -> None:
    body = request(
        [
            user([text("a")]),
            assistant([tool_use("t", "f", {"x": 1})]),
            user([tool_result("t", "r")]),
        ],
        system=[text("s")],
        tools=TOOLS,
        tool_choice={"type": "auto"},
        stream=True,
    )
    before = copy.deepcopy(body)
    anthropic_to_chat(body, UPSTREAM)
    assert body == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"model": "m"}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": ["hi"]}, "messages.0"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0"),
        ({"messages": [user(42)]}, "messages.0.content"),
        ({"messages": [user([{"text": "no type"}])]}, "messages.0.content.0"),
        ({"messages": [user([{"type": "document", "source": {}}])]}, "messages.0.content.0"),
        ({"messages": [user([{"type": "image", "source": {"type": "file"}}])]}, None),
        ({"messages": [user([{"type": "tool_result", "content": "x"}])]}, None),
        ({"messages": [assistant([{"type": "image", "source": {}}])]}, "messages.0.content.0"),
        ({"messages": [assistant([{"type": "tool_use", "name": "f"}])]}, "messages.0.content.0"),
        ({"messages": [user("hi")], "system": 3}, "system"),
        ({"messages": [user("hi")], "system": [{"type": "image"}]}, "system.0"),
        ({"messages": [user("hi")], "tools": {"name": "f"}}, "tools"),
        ({"messages": [user("hi")], "tools": [{"description": "no name"}]}, "tools.0.name"),
        ({"messages": [user("hi")], "tools": TOOLS, "tool_choice": "auto"}, "tool_choice"),
        ({"messages": [user("hi")], "tools": TOOLS, "tool_choice": {"type": "x"}}, "tool_choice"),
        ({"messages": [user("hi")], "stop_sequences": "END"}, "stop_sequences"),
    ],
)
def test_malformed_requests_raise(body: Any, param: str | None) -> None:
    with pytest.raises(TranslationError) as info:
        anthropic_to_chat(body, UPSTREAM)
    assert info.value.retriable is False
    if param is not None:
        assert info.value.param == param


def test_error_param_points_at_the_block() -> None:
    body = request([user("hi"), assistant("ok"), user([text("a"), {"type": "audio"}])])
    with pytest.raises(TranslationError, match="audio") as info:
        anthropic_to_chat(body, UPSTREAM)
    assert info.value.param == "messages.2.content.1"


def test_count_tokens_request() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": "sys",
        "messages": [user("hi")],
        "tools": TOOLS,
        "tool_choice": {"type": "any"},
    }
    assert anthropic_count_tokens_request(body, UPSTREAM) == {
        "model": UPSTREAM,
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "read", "parameters": TOOLS[0]["input_schema"]},
            }
        ],
        "add_generation_prompt": True,
    }
    no_tools = anthropic_count_tokens_request({"messages": [user("hi")]}, UPSTREAM)
    assert no_tools == {
        "model": UPSTREAM,
        "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": True,
    }


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_error(status: int, kind: str) -> None:
    assert anthropic_error(status, "boom") == {
        "type": "error",
        "error": {"type": kind, "message": "boom"},
    }


# --- whole answers ----------------------------------------------------------------------


ORIGINAL = request([user("hi")], stop_sequences=["END", "\n\nHuman:"])


def test_text_answer() -> None:
    out = chat_to_anthropic(chat_response({"content": "Hello!"}, stop_reason=None), ORIGINAL)
    assert out == {
        "id": "msg_chatcmpl-abc123",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 21,
            "output_tokens": 3,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    assert not any(field in json.dumps(out) for field in CAPTURE_FIELDS)


def test_thinking_text_and_parallel_tool_calls_in_order() -> None:
    message = {
        "reasoning_content": "Two files.",
        "content": "Reading.",
        "tool_calls": [
            {
                "id": "chatcmpl-tool-1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "a.py"}'},
            },
            {
                "id": "chatcmpl-tool-2",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"pattern": "ü", "n": [1, 2]}'},
            },
        ],
    }
    out = chat_to_anthropic(chat_response(message, "tool_calls"), ORIGINAL)
    assert out["content"] == [
        {"type": "thinking", "thinking": "Two files.", "signature": ""},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "chatcmpl-tool-1", "name": "read", "input": {"path": "a.py"}},
        {
            "type": "tool_use",
            "id": "chatcmpl-tool-2",
            "name": "grep",
            "input": {"pattern": "ü", "n": [1, 2]},
        },
    ]
    assert out["stop_reason"] == "tool_use"


def test_reasoning_field_and_empty_content() -> None:
    out = chat_to_anthropic(chat_response({"reasoning": "hm", "content": ""}), ORIGINAL)
    assert out["content"] == [{"type": "thinking", "thinking": "hm", "signature": ""}]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1', {"_raw": '{"a": 1'}),  # broken JSON is kept, not lost
        ("[1, 2]", {"_raw": "[1, 2]"}),  # Anthropic's input must be an object
        ("", {}),
    ],
)
def test_tool_arguments_that_are_not_an_object(arguments: str, expected: JSON) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    out = chat_to_anthropic(chat_response({"content": None, "tool_calls": [call]}), ORIGINAL)
    assert out["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": expected}]


@pytest.mark.parametrize(
    ("finish_reason", "matched", "stop_reason", "stop_sequence"),
    [
        ("stop", None, "end_turn", None),
        ("stop", "END", "stop_sequence", "END"),
        ("stop", "\n\nHuman:", "stop_sequence", "\n\nHuman:"),
        ("stop", "OTHER", "end_turn", None),  # not one of the request's stop sequences
        ("stop", 151645, "end_turn", None),  # vLLM reports a stop token id as an int
        ("length", None, "max_tokens", None),
        ("tool_calls", None, "tool_use", None),
        ("abort", None, "end_turn", None),
        (None, None, "end_turn", None),
    ],
)
def test_stop_reasons(
    finish_reason: str | None, matched: Any, stop_reason: str, stop_sequence: str | None
) -> None:
    response = chat_response({"content": "x"}, finish_reason, stop_reason=matched)
    out = chat_to_anthropic(response, ORIGINAL)
    assert (out["stop_reason"], out["stop_sequence"]) == (stop_reason, stop_sequence)


def test_forced_tool_call_with_finish_stop_is_tool_use() -> None:
    # vLLM answers a named tool_choice with finish_reason "stop".
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = chat_to_anthropic(chat_response({"content": None, "tool_calls": [call]}), ORIGINAL)
    assert out["stop_reason"] == "tool_use"


def test_answer_without_id_or_usage() -> None:
    response = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    out = chat_to_anthropic(response, ORIGINAL)
    assert out["id"].startswith("msg_")
    assert len(out["id"]) > len("msg_")
    assert out["usage"]["input_tokens"] == 0
    assert out["usage"]["output_tokens"] == 0


def test_usage_falls_back_to_capture_fields() -> None:
    response = chat_response({"content": "x"})
    del response["usage"]
    assert chat_to_anthropic(response, ORIGINAL)["usage"] == {
        "input_tokens": 21,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


@pytest.mark.parametrize("response", [{}, {"choices": []}, {"choices": ["x"]}])
def test_answer_without_choices_raises(response: JSON) -> None:
    with pytest.raises(TranslationError):
        chat_to_anthropic(response, ORIGINAL)


# --- properties -------------------------------------------------------------------------

ids = st.text(min_size=1, max_size=24)
texts = st.text(max_size=60)
json_values = json_values_of(texts)
json_objects = st.dictionaries(texts, json_values, max_size=4)
calls = st.lists(st.tuples(ids, names, json_objects), min_size=1, max_size=3)


@st.composite
def conversations(draw: st.DrawFn) -> list[JSON]:
    """User/assistant turns with text, parallel tool calls and their results."""
    messages: list[JSON] = [user(draw(texts))]
    for _ in range(draw(st.integers(0, 3))):
        turn = draw(calls)
        said = draw(st.lists(texts, max_size=2))
        messages.append(assistant([text(t) for t in said] + [tool_use(*c) for c in turn]))
        results = [tool_result(c[0], draw(texts)) for c in turn]
        messages.append(user(results + [text(t) for t in draw(st.lists(texts, max_size=2))]))
    return messages


@given(conversations())
def test_property_request_keeps_ids_names_arguments_text(messages: list[JSON]) -> None:
    out = anthropic_to_chat(request(messages), UPSTREAM)["messages"]
    expected: list[tuple[str, Any]] = []
    for message in messages:
        blocks = message["content"]
        blocks = [text(blocks)] if isinstance(blocks, str) else blocks
        said = "\n".join(b["text"] for b in blocks if b["type"] == "text")
        results = [
            ("tool", (b["tool_use_id"], b["content"])) for b in blocks if b.get("tool_use_id")
        ]
        uses = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
        has_text = any(b["type"] == "text" for b in blocks)
        if message["role"] == "assistant":
            expected.append(("assistant", (said if has_text else None, uses)))
        else:
            expected += results + ([("user", said)] if has_text else [])
    got: list[tuple[str, Any]] = []
    for m in out:
        if m["role"] == "assistant":
            uses = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in m["tool_calls"]
            ]
            got.append(("assistant", (m["content"], uses)))
        elif m["role"] == "tool":
            got.append(("tool", (m["tool_call_id"], m["content"])))
        else:
            got.append((m["role"], m["content"]))
    assert got == expected


@given(texts, st.lists(st.tuples(ids, names, json_objects), max_size=3))
def test_property_answer_keeps_text_and_calls(content: str, turn: list[Any]) -> None:
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in turn
    ]
    response = chat_response({"content": content, "tool_calls": tool_calls}, "tool_calls")
    blocks = chat_to_anthropic(response, ORIGINAL)["content"]
    assert [b["text"] for b in blocks if b["type"] == "text"] == ([content] if content else [])
    uses = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    assert uses == [tuple(c) for c in turn]
