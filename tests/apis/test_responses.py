"""Responses API <-> Chat Completions: requests, whole answers and error bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.errors import TranslationError
from rollstream.apis.responses import responses_error, responses_to_chat
from rollstream.apis.responses_answer import chat_to_responses

JSON = dict[str, Any]
UPSTREAM = "Qwen/Qwen3-8B"


def messages(body: JSON) -> list[JSON]:
    result: list[JSON] = responses_to_chat({"model": "gpt-5-codex", **body}, UPSTREAM)["messages"]
    return result


def call(call_id: str, name: str, arguments: str) -> JSON:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def tool_call(call_id: str, name: str, arguments: str) -> JSON:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- request ----------------------------------------------------------------------------------


def test_instructions_and_string_input() -> None:
    chat = responses_to_chat(
        {"model": "gpt-5", "instructions": "Be terse.", "input": "hi"}, UPSTREAM
    )
    assert chat == {
        "model": UPSTREAM,
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
    }


def test_message_items_with_text_parts_and_developer_role() -> None:
    got = messages(
        {
            "input": [
                {"type": "message", "role": "developer", "content": "rules"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "a"},
                        {"type": "text", "text": "b"},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "c"},
                        {"type": "refusal", "refusal": "no"},
                    ],
                },
                {"role": "system", "content": []},
            ]
        }
    )
    assert got == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "c\nno"},
        {"role": "system", "content": ""},
    ]


def test_image_part_makes_a_parts_list() -> None:
    content = [
        {"type": "input_text", "text": "what is"},
        {"type": "input_text", "text": "this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        {"type": "input_text", "text": "thanks"},
    ]
    assert messages({"input": [{"role": "user", "content": content}]}) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is\nthis?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "thanks"},
            ],
        }
    ]


@pytest.mark.parametrize(
    "part",
    [{"type": "input_image", "file_id": "file-1"}, {"type": "input_file", "file_id": "file-1"}],
)
def test_parts_needing_the_file_store_raise(part: JSON) -> None:
    with pytest.raises(TranslationError, match=part["type"]) as info:
        messages({"input": [{"role": "user", "content": [part]}]})
    assert info.value.param == "input[0].content[0]"


def test_consecutive_function_calls_merge_into_the_preceding_assistant_message() -> None:
    got = messages(
        {
            "input": [
                {"role": "user", "content": "list and read"},
                {"role": "assistant", "content": "On it."},
                call("call_1", "shell", '{"cmd": ["ls"]}'),
                call("call_2", "read", '{"path": "a.txt"}'),
                {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "hello"}],
                },
                call("call_3", "shell", "{}"),
            ]
        }
    )
    assert got == [
        {"role": "user", "content": "list and read"},
        {
            "role": "assistant",
            "content": "On it.",
            "tool_calls": [
                tool_call("call_1", "shell", '{"cmd": ["ls"]}'),
                tool_call("call_2", "read", '{"path": "a.txt"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_2", "content": "hello"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("call_3", "shell", "{}")]},
    ]


def test_reasoning_goes_on_the_next_assistant_message() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "think"}],
        "encrypted_content": "opaque",
    }
    got = messages(
        {
            "input": [
                {"role": "user", "content": "q"},
                reasoning,
                call("call_1", "shell", "{}"),
                {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
                reasoning,
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "again"},
                reasoning,  # nothing follows: dropped
            ]
        }
    )
    assert got == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "think",
            "reasoning": "think",
            "tool_calls": [tool_call("call_1", "shell", "{}")],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {
            "role": "assistant",
            "content": "done",
            "reasoning_content": "think",
            "reasoning": "think",
        },
        {"role": "user", "content": "again"},
    ]


def test_reasoning_without_summary_falls_back_to_its_content() -> None:
    reasoning = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "r"}],
    }
    got = messages({"input": [reasoning, {"role": "assistant", "content": "a"}]})
    assert got == [
        {"role": "assistant", "content": "a", "reasoning_content": "r", "reasoning": "r"}
    ]


def test_reasoning_between_message_and_call_starts_a_new_assistant_message() -> None:
    got = messages(
        {
            "input": [
                {"role": "assistant", "content": "first"},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
                call("call_1", "f", "{}"),
            ]
        }
    )
    assert [m.get("reasoning_content") for m in got] == [None, "hmm"]
    assert got[1]["tool_calls"] == [tool_call("call_1", "f", "{}")]


@pytest.mark.parametrize(
    "item",
    [{"type": "local_shell_call"}, {"type": "custom_tool_call"}, {"type": "web_search_call"}],
)
def test_unsupported_item_types_raise(item: JSON) -> None:
    with pytest.raises(TranslationError, match=item["type"]) as info:
        messages({"input": [{"role": "user", "content": "x"}, item]})
    assert info.value.param == "input[1]"
    assert not info.value.retriable


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 3}, "input"),
        ({"input": ["text"]}, "input[0]"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0]"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0]"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": {}}]},
            "input[0].output",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"instructions": ["x"], "input": "hi"}, "instructions"),
        ({"input": "hi", "tools": {"type": "function"}}, "tools"),
    ],
)
def test_malformed_input_raises(body: JSON, param: str) -> None:
    with pytest.raises(TranslationError) as info:
        messages(body)
    assert info.value.param == param


def test_function_call_output_with_an_image_raises() -> None:
    output = [{"type": "input_image", "image_url": "https://example.com/a.png"}]
    with pytest.raises(TranslationError) as info:
        messages({"input": [{"type": "function_call_output", "call_id": "c", "output": output}]})
    assert info.value.param == "input[0].output"


def test_body_must_be_an_object() -> None:
    with pytest.raises(TranslationError, match="JSON object"):
        responses_to_chat([], UPSTREAM)  # type: ignore[arg-type]


def test_previous_response_id_raises() -> None:
    with pytest.raises(TranslationError, match="does not store responses") as info:
        messages({"input": "hi", "previous_response_id": "resp_1"})
    assert info.value.param == "previous_response_id"


def test_function_tools_translated_and_hosted_tools_dropped() -> None:
    schema = {"type": "object", "properties": {"cmd": {"type": "string"}}}
    chat = responses_to_chat(
        {
            "model": "gpt-5",
            "input": "hi",
            "tools": [
                {"type": "function", "name": "shell", "description": "Run", "parameters": schema},
                {"type": "function", "name": "noop", "strict": False},
                {"type": "web_search"},
                {"type": "local_shell"},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                {"type": "file_search", "vector_store_ids": []},
                {"type": "image_generation"},
            ],
            "tool_choice": "required",
            "parallel_tool_calls": False,
        },
        UPSTREAM,
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "shell", "description": "Run", "parameters": schema},
        },
        {
            "type": "function",
            "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert chat["tool_choice"] == "required"
    assert chat["parallel_tool_calls"] is False


def test_tool_settings_are_not_sent_without_tools() -> None:
    chat = responses_to_chat(
        {
            "model": "gpt-5",
            "input": "hi",
            "tools": [{"type": "web_search"}],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        },
        UPSTREAM,
    )
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & chat.keys()


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "shell"},
            {"type": "function", "function": {"name": "shell"}},
        ),
        ({"type": "web_search_preview"}, "auto"),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "auto"),
        ("sometimes", "auto"),
    ],
)
def test_tool_choice_forms(choice: Any, expected: Any) -> None:
    tools = [{"type": "function", "name": "shell"}]
    body = {"model": "m", "input": "hi", "tools": tools, "tool_choice": choice}
    assert responses_to_chat(body, UPSTREAM)["tool_choice"] == expected


def test_sampling_limits_and_streaming_options() -> None:
    chat = responses_to_chat(
        {
            "model": "gpt-5",
            "input": "hi",
            "max_output_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "stream": True,
        },
        UPSTREAM,
    )
    assert chat["model"] == UPSTREAM
    assert chat["max_tokens"] == 256
    assert "max_output_tokens" not in chat
    assert (chat["temperature"], chat["top_p"]) == (0.2, 0.9)
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}


def test_not_streaming_sends_no_stream_options() -> None:
    chat = responses_to_chat({"model": "gpt-5", "input": "hi", "stream": False}, UPSTREAM)
    assert "stream" not in chat
    assert "stream_options" not in chat


def test_ignored_fields_are_never_forwarded() -> None:
    ignored = {
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "k",
        "reasoning": {"effort": "high", "summary": "auto"},
        "text": {"verbosity": "low"},
        "truncation": "auto",
        "metadata": {"a": "b"},
        "service_tier": "auto",
        "user": "u",
        "background": False,
        "safety_identifier": "s",
        "client_metadata": {"x": 1},
        "something_new": 1,
    }
    chat = responses_to_chat({"model": "gpt-5", "input": "hi", **ignored}, UPSTREAM)
    assert set(chat) == {"model", "messages"}


_texts = st.text(max_size=20)
_ids = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12).map("call_".__add__)
_names = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
_arguments = st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)).map(
    json.dumps
)
_items = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, _texts),
    st.builds(lambda t: {"role": "user", "content": [{"type": "input_text", "text": t}]}, _texts),
    st.builds(lambda t: {"type": "message", "role": "assistant", "content": t}, _texts),
    st.builds(call, _ids, _names, _arguments),
    st.builds(
        lambda c, t: {"type": "function_call_output", "call_id": c, "output": t}, _ids, _texts
    ),
)


@given(st.lists(_items, max_size=12))
def test_property_calls_outputs_and_texts_survive(items: list[JSON]) -> None:
    got = messages({"input": items})
    calls = [
        (i["call_id"], i["name"], i["arguments"]) for i in items if i.get("type") == "function_call"
    ]
    sent_calls = [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in got
        for c in m.get("tool_calls", [])
    ]
    assert sent_calls == calls
    outputs = [
        (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
    ]
    assert [(m["tool_call_id"], m["content"]) for m in got if m["role"] == "tool"] == outputs

    def text(item: JSON) -> str:
        content = item["content"]
        return content if isinstance(content, str) else str(content[0]["text"])

    texts = [(i["role"], text(i)) for i in items if "role" in i]
    sent_texts = [
        (m["role"], m["content"]) for m in got if m["role"] != "tool" and m["content"] is not None
    ]
    assert sent_texts == texts
    # One assistant message per run of calls, unless an assistant message opens the run.
    runs = sum(
        1
        for k, i in enumerate(items)
        if i.get("type") == "function_call"
        and not (
            k > 0
            and (
                items[k - 1].get("type") == "function_call"
                or items[k - 1].get("role") == "assistant"
            )
        )
    )
    expected = runs + sum(1 for i in items if i.get("role") == "assistant")
    assert sum(1 for m in got if m["role"] == "assistant") == expected


# --- whole answer -----------------------------------------------------------------------------

REQUEST: JSON = {
    "model": "gpt-5-codex",
    "instructions": "Be terse.",
    "input": "hi",
    "tools": [{"type": "function", "name": "shell"}],
    "max_output_tokens": 100,
    "temperature": 0.5,
}


def chat_answer(message: JSON, finish_reason: str = "stop") -> JSON:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": UPSTREAM,
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
                "token_ids": [4, 5],
                "logprobs": {"content": [{"token": "a", "logprob": -0.1}]},
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42},
    }


def test_text_answer() -> None:
    response = chat_to_responses(chat_answer({"content": "Hello."}), REQUEST)
    assert response["id"].startswith("resp_")
    assert isinstance(response["created_at"], int)
    [item] = response["output"]
    assert item["id"].startswith("msg_")
    assert item == {
        "type": "message",
        "id": item["id"],
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
    }
    expected = {
        "object": "response",
        "status": "completed",
        "incomplete_details": None,
        "error": None,
        "model": "gpt-5-codex",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": REQUEST["tools"],
        "usage": {
            "input_tokens": 30,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 12,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 42,
        },
        "instructions": "Be terse.",
        "temperature": 0.5,
        "top_p": None,
        "max_output_tokens": 100,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": {},
    }
    assert {k: response[k] for k in expected} == expected
    assert set(response) == set(expected) | {"id", "created_at", "output"}


def test_parallel_tool_calls_and_reasoning() -> None:
    arguments = '{"cmd":  ["ls", "-la"]}'  # odd spacing must survive untouched
    message = {
        "content": None,
        "reasoning_content": "List first.",
        "tool_calls": [
            tool_call("chatcmpl-tool-a", "shell", arguments),
            tool_call("chatcmpl-tool-b", "read", '{"path": "a"}'),
        ],
    }
    output = chat_to_responses(chat_answer(message, "tool_calls"), REQUEST)["output"]
    assert [o["type"] for o in output] == ["reasoning", "function_call", "function_call"]
    assert output[0]["id"].startswith("rs_")
    assert output[0]["summary"] == [{"type": "summary_text", "text": "List first."}]
    assert [(o["call_id"], o["name"], o["arguments"], o["status"]) for o in output[1:]] == [
        ("chatcmpl-tool-a", "shell", arguments, "completed"),
        ("chatcmpl-tool-b", "read", '{"path": "a"}', "completed"),
    ]
    assert all(o["id"].startswith("fc_") for o in output[1:])
    assert len({o["id"] for o in output}) == 3


def test_text_with_a_tool_call_keeps_the_order() -> None:
    message = {"content": "Looking.", "tool_calls": [tool_call("c1", "shell", "{}")]}
    output = chat_to_responses(chat_answer(message, "tool_calls"), REQUEST)["output"]
    assert [o["type"] for o in output] == ["message", "function_call"]


def test_length_is_incomplete() -> None:
    response = chat_to_responses(chat_answer({"content": "Hel"}, "length"), REQUEST)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_capture_fields_never_reach_the_harness() -> None:
    response = chat_to_responses(chat_answer({"content": "x"}), REQUEST)
    text = json.dumps(response)
    for field in ("token_ids", "prompt_token_ids", "logprobs"):
        assert field not in text


def test_answer_without_choices_raises() -> None:
    with pytest.raises(TranslationError, match="no choices"):
        chat_to_responses({"choices": []}, REQUEST)


@given(
    text=st.text(max_size=40),
    calls=st.lists(st.tuples(_ids, _names, _arguments), max_size=4, unique_by=lambda c: c[0]),
)
def test_property_answer_keeps_text_and_calls(text: str, calls: list[tuple[str, str, str]]) -> None:
    message = {"content": text, "tool_calls": [tool_call(*c) for c in calls]}
    output = chat_to_responses(chat_answer(message), REQUEST)["output"]
    texts = [o["content"][0]["text"] for o in output if o["type"] == "message"]
    assert texts == ([text] if text else [])
    got = [
        (o["call_id"], o["name"], o["arguments"]) for o in output if o["type"] == "function_call"
    ]
    assert got == calls


# --- error bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "server_error"),
        (503, "server_error"),
    ],
)
def test_error_body(status: int, kind: str) -> None:
    assert responses_error(status, "nope", "input") == {
        "error": {"message": "nope", "type": kind, "param": "input", "code": None}
    }


#: Codex's sub-agent tools, as Codex 0.171 sends them: a namespace of functions.
AGENTS = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools for spawning and managing sub-agents.",
    "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
        {"type": "function", "name": "wait_agent", "description": "Wait for it"},
    ],
}


def test_a_namespace_s_functions_go_upstream_and_its_calls_come_back_named_in_it() -> None:
    """Codex groups its sub-agent tools in a namespace; dropped, the model never saw them, and a
    call of one without its namespace is refused by Codex ('unsupported call')."""
    request = {
        "model": "gpt-5",
        "input": "delegate",
        "tools": [{"type": "function", "name": "shell"}, AGENTS, {"type": "web_search"}],
    }
    chat = responses_to_chat(request, UPSTREAM)
    assert [t["function"]["name"] for t in chat["tools"]] == ["shell", "spawn_agent", "wait_agent"]
    assert chat["tools"][2]["function"]["description"] == "Wait for it"
    answer = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "spawn_agent", "arguments": "{}"}},
                        {"id": "c2", "function": {"name": "shell", "arguments": "{}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    calls = [
        i for i in chat_to_responses(answer, request)["output"] if i["type"] == "function_call"
    ]
    assert [(c["name"], c.get("namespace")) for c in calls] == [
        ("spawn_agent", "multi_agent_v1"),
        ("shell", None),  # a plain function names none
    ]
    # Sent back as Codex sends it (with its namespace), it reads as the same call.
    again = messages({"input": [{**calls[0], "type": "function_call"}], "tools": request["tools"]})
    assert again[0]["tool_calls"][0]["function"]["name"] == "spawn_agent"


def test_a_function_name_in_two_namespaces_is_refused() -> None:
    twin = {**AGENTS, "name": "other_v1"}
    with pytest.raises(TranslationError, match="unique across namespaces") as info:
        responses_to_chat({"model": "m", "input": "hi", "tools": [AGENTS, twin]}, UPSTREAM)
    assert info.value.param == "tools"
