"""Hermes tool-call parsing, whole and streamed."""

from __future__ import annotations

import json

from rollstream.models.hermes import (
    parse_tool_calls,
)


def _block(name: str, args: dict[str, object], compact: bool = False) -> str:
    seps = (",", ":") if compact else (", ", ": ")
    body = json.dumps({"name": name, "arguments": args}, separators=seps)
    return f"<tool_call>\n{body}\n</tool_call>"


def test_plain_text_has_no_calls() -> None:
    parsed = parse_tool_calls("Hello there.")
    assert parsed.content == "Hello there." and parsed.tool_calls == []


def test_one_call_with_content_before() -> None:
    parsed = parse_tool_calls("Let me look.\n" + _block("bash", {"command": "ls"}))
    assert parsed.content == "Let me look.\n"
    [call] = parsed.tool_calls
    assert call.name == "bash"
    assert json.loads(call.arguments) == {"command": "ls"}
    assert call.id.startswith("chatcmpl-tool-")
    assert call.to_openai()["type"] == "function"


def test_parallel_calls_keep_order() -> None:
    text = _block("a", {"x": 1}) + "\n" + _block("b", {"y": [1, 2]}, compact=True)
    parsed = parse_tool_calls(text)
    assert parsed.content is None
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("a", {"x": 1}),
        ("b", {"y": [1, 2]}),
    ]
    assert len({c.id for c in parsed.tool_calls}) == 2


def test_arguments_are_re_serialised_json() -> None:
    [call] = parse_tool_calls(_block("bash", {"command": "é"}, compact=True)).tool_calls
    assert call.arguments == '{"command": "é"}'


def test_malformed_block_returns_everything_as_content() -> None:
    text = _block("a", {"x": 1}) + "<tool_call>\n{not json}\n</tool_call>"
    parsed = parse_tool_calls(text)
    assert parsed.tool_calls == [] and parsed.content == text


def test_block_without_name_is_malformed() -> None:
    text = '<tool_call>{"arguments": {}}</tool_call>'
    assert parse_tool_calls(text).tool_calls == []


def test_unclosed_final_block_is_parsed() -> None:
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n'
    [call] = parse_tool_calls(text).tool_calls
    assert call.name == "bash"


def test_parameters_alias() -> None:
    [call] = parse_tool_calls(
        '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>'
    ).tool_calls
    assert json.loads(call.arguments) == {"a": 1}
