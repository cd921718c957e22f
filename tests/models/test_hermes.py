"""Hermes tool-call parsing, whole and streamed."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from rollstream.models.hermes import (
    START,
    StreamingToolParser,
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


def _stream(text: str, cuts: list[int]) -> tuple[str, list[dict[str, object]]]:
    parser = StreamingToolParser()
    content, deltas = "", []
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    for a, b in itertools.pairwise(points):
        out = parser.feed(text[a:b])
        content += out.content
        deltas += out.tool_calls
    out = parser.finish()
    return content + out.content, deltas + out.tool_calls


def _calls_from_deltas(deltas: list[dict[str, object]]) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for d in deltas:
        index = int(d["index"])  # type: ignore[call-overload]
        function = d["function"]
        assert isinstance(function, dict)
        entry = calls.setdefault(index, ["", ""])
        entry[0] += function.get("name", "")
        entry[1] += function.get("arguments", "")
    return [(n, a) for _, (n, a) in sorted(calls.items())]


names = st.sampled_from(["bash", "Bash", "exec_command", "read_file"])
args = st.dictionaries(
    st.sampled_from(["command", "cmd", "path"]), st.text(max_size=20), max_size=2
)
content_text = st.text(alphabet=st.characters(blacklist_characters="<"), max_size=40)


@given(
    content=content_text,
    calls=st.lists(st.tuples(names, args, st.booleans()), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_streaming_matches_whole_parsing_for_any_chunking(
    content: str, calls: list[tuple[str, dict[str, object], bool]], cuts: list[int]
) -> None:
    text = content + "\n".join(_block(n, a, c) for n, a, c in calls)
    whole = parse_tool_calls(text)
    streamed_content, deltas = _stream(text, cuts)
    assert streamed_content == (whole.content or "")
    assert _calls_from_deltas(deltas) == [(c.name, c.arguments) for c in whole.tool_calls]


def test_streaming_holds_back_a_possible_tag_start() -> None:
    parser = StreamingToolParser()
    assert parser.feed("Hi <tool").content == "Hi "
    assert parser.feed("box>").content == "<toolbox>"


def test_streaming_first_delta_names_the_call_second_carries_arguments() -> None:
    parser = StreamingToolParser()
    out = parser.feed(_block("bash", {"command": "ls"}))
    first, second = out.tool_calls
    assert first["index"] == 0 and first["type"] == "function"
    assert first["function"] == {"name": "bash", "arguments": ""}
    assert second == {"index": 0, "function": {"arguments": '{"command": "ls"}'}}


def test_streaming_malformed_block_comes_out_as_content() -> None:
    parser = StreamingToolParser()
    text = START + "{oops}</tool_call>"
    out = parser.feed(text)
    assert out.tool_calls == [] and out.content == text
