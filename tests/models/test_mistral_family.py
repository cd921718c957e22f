"""The mistral family: mistral-common's v3 tekken format, parsed as vLLM's ``mistral`` parser does,
continued token-wise through tool cycles and refused where a new user message re-renders history."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from mistral_common.exceptions import InvalidAssistantMessageException

from rollstream.errors import ConfigurationError
from rollstream.models.families import load_family
from rollstream.models.family import AnsweredTurn, ContinuationError, Verdict
from rollstream.models.mistral_family import MistralFamily, mistral_call_id
from tests.models.test_families import HISTORY, TOOLS

Message = dict[str, Any]
NINE = re.compile(r"[A-Za-z0-9]{9}")
TOOLS_TEXT = (
    '[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "bash", "description": '
    '"Run a shell command.", "parameters": {"type": "object", "properties": {"command": '
    '{"type": "string"}}, "required": ["command"]}}}][/AVAILABLE_TOOLS]'
)


@pytest.fixture(scope="module")
def family() -> MistralFamily:
    f = load_family("mistral")
    assert isinstance(f, MistralFamily)
    return f


def call(call_id: str, command: str = "echo polar > hello.txt") -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }
        ],
    }


def result(call_id: str, text: str = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": "bash", "content": text}


def text(f: MistralFamily, ids: list[int]) -> str:
    return f.tokenizer.decode(ids, skip_special_tokens=False)


def turn_of(f: MistralFamily, history: list[Message], answer: Message) -> AnsweredTurn:
    prompt = f.render_ids(history, TOOLS)
    return AnsweredTurn(history, TOOLS, answer, prompt, f.completion_ids(history, answer, TOOLS))


def test_the_format_is_v3_tekken_with_tools_and_system_before_the_last_user(
    family: MistralFamily,
) -> None:
    assert family.version == "v3" and not family.thinks
    assert text(family, family.render_ids(HISTORY, TOOLS)) == (
        f"<s>{TOOLS_TEXT}[INST]You are a coding agent.\n\nCreate hello.txt containing polar.[/INST]"
    )
    assert family.stop_ids == {family.end_of_turn_id} == {family.tokenizer.special_id("</s>")}


def test_the_tokenizer_gives_mistral_commons_ids(family: MistralFamily) -> None:
    ids = family.render_ids([*HISTORY, call("call00000"), result("call00000", "é 世界")], TOOLS)
    assert family.tokenizer.encode(text(family, ids)) == ids


def test_render_then_parse_gives_the_call_and_the_text_back(family: MistralFamily) -> None:
    call_id = family.call_id("bash", 0)
    assert NINE.fullmatch(call_id)
    prompt = family.render_ids(HISTORY, TOOLS)
    completion = family.completion_ids(HISTORY, call(call_id), TOOLS)
    assert text(family, completion) == (
        '[TOOL_CALLS][{"name": "bash", "arguments": {"command": "echo polar > hello.txt"}, '
        f'"id": "{call_id}"}}]</s>'
    )
    parsed = family.parse(completion, prompt, TOOLS)
    assert parsed.parse_error is None and parsed.content is None
    # The id the model wrote is kept, so the tool result names the call in its tokens.
    assert [(c.name, json.loads(c.arguments), c.id) for c in parsed.tool_calls] == [
        ("bash", {"command": "echo polar > hello.txt"}, call_id)
    ]
    answer: Message = {"role": "assistant", "content": "Done. hello.txt contains polar."}
    completion = family.completion_ids(HISTORY, answer, TOOLS)
    assert text(family, completion) == "Done. hello.txt contains polar.</s>"
    done = family.parse(completion, prompt, TOOLS)
    assert (done.content, done.tool_calls, done.parse_error) == (answer["content"], [], None)


def test_content_before_the_call_and_ids_the_model_did_not_write_well(
    family: MistralFamily,
) -> None:
    sampled = family.tokenizer.encode(
        'Let me write it.[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}}, '
        '{"name": "bash", "arguments": {"command": "pwd"}, "id": "no"}] trailing'
    )
    parsed = family.parse([*sampled, family.end_of_turn_id])
    assert parsed.content == "Let me write it." and parsed.parse_error is None
    assert [json.loads(c.arguments)["command"] for c in parsed.tool_calls] == ["ls", "pwd"]
    assert all(NINE.fullmatch(c.id) for c in parsed.tool_calls)
    assert family.call_started(sampled) and not family.call_started(sampled[:3])


def test_an_id_the_conversation_already_holds_is_replaced(family: MistralFamily) -> None:
    history = [*HISTORY, call("call00000"), result("call00000")]
    prompt = family.render_ids(history, TOOLS)
    completion = family.completion_ids(history, call("call00000", "cat hello.txt"), TOOLS)
    assert '"id": "call00000"' in text(family, completion)
    (parsed,) = family.parse(completion, prompt, TOOLS).tool_calls
    # A harness would see two calls with one id (Claude Code then loops): a new one is drawn.
    assert parsed.id != "call00000" and NINE.fullmatch(parsed.id)


def test_an_answer_with_text_and_calls_is_written_as_its_calls(family: MistralFamily) -> None:
    answer = {**call("call00000"), "content": "I will create the file."}
    completion = family.completion_ids(HISTORY, answer, TOOLS)
    assert completion == family.completion_ids(HISTORY, call("call00000"), TOOLS)
    # mistral-common (hence vLLM) refuses such a turn in history: v3 has no text in a call turn.
    with pytest.raises(InvalidAssistantMessageException, match="either content or tool_calls"):
        family.render_ids([*HISTORY, answer, result("call00000")], TOOLS)


@pytest.mark.parametrize(
    "written",
    [
        '[TOOL_CALLS][{"name": "bash", "arguments": {oops}]',
        '[TOOL_CALLS]{"name": "bash", "arguments": {}}',
        '[TOOL_CALLS][{"arguments": {}}]',
        '[TOOL_CALLS][{"name": "bash", "arguments": {}}][TOOL_CALLS][]',
    ],
)
def test_a_malformed_call_stays_content(family: MistralFamily, written: str) -> None:
    parsed = family.parse([*family.tokenizer.encode("Sure. " + written), family.end_of_turn_id])
    assert not parsed.tool_calls and parsed.parse_error is not None
    assert parsed.content == "Sure. " + written  # as the model wrote it, [TOOL_CALLS] included


def test_harness_ids_map_to_nine_alphanumerics_as_vllm_truncates_them(
    family: MistralFamily,
) -> None:
    assert mistral_call_id("chatcmpl-tool-0123456789abcdef") == "789abcdef"
    assert mistral_call_id("toolu_01AbCdEfGhIjKlMnOpQr") == "jKlMnOpQr"
    assert mistral_call_id("abcDEF123") == "abcDEF123"
    hashed = mistral_call_id("call_ab-cd_ef")  # vLLM would refuse it: a stable hash instead
    assert NINE.fullmatch(hashed) and hashed == mistral_call_id("call_ab-cd_ef")
    for harness_id in ("chatcmpl-tool-0123456789abcdef", "toolu_01AbCdEfGhIjKlMnOpQr", "c-1"):
        messages = [*HISTORY, call(harness_id), result(harness_id)]
        rendered = text(family, family.render_ids(messages, TOOLS))
        mapped = mistral_call_id(harness_id)
        assert f'"id": "{mapped}"' in rendered and f'"call_id": "{mapped}"' in rendered


def test_harness_shaped_messages_render(family: MistralFamily) -> None:
    messages: list[Message] = [
        {"role": "system", "content": "You are Codex."},
        {"role": "system", "content": [{"type": "text", "text": "Sandbox: none."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Create"}, {"type": "text", "text": "x"}],
        },
        {**call("chatcmpl-tool-0123456789abcdef"), "reasoning_content": None, "refusal": None},
        result("chatcmpl-tool-0123456789abcdef", "done"),
    ]
    rendered = text(family, family.render_ids(messages, TOOLS))
    assert "[INST]You are Codex.\n\nSandbox: none.\n\nCreate\n\nx[/INST]" in rendered


def test_a_tool_turn_continues_with_the_sampled_tokens_as_the_full_render(
    family: MistralFamily,
) -> None:
    answer = call("chatcmpl-tool-0123456789abcdef")
    turn = turn_of(family, HISTORY, answer)
    new = [result("chatcmpl-tool-0123456789abcdef", "a.txt")]
    continued = family.continue_turn(turn, new)
    head = [*turn.prompt_ids, *turn.completion_ids]
    assert continued.prompt_ids[: len(head)] == head and not continued.appended_end_of_turn
    # Append-only: exact context is what mistral-common (the server) renders.
    assert continued.prompt_ids == family.render_ids([*HISTORY, answer, *new], TOOLS)
    # The sampled tokens are kept, whatever they are (a non-canonical split here).
    split = family.tokenizer.split_token(turn.completion_ids[3])
    assert split is not None
    sampled = [*turn.completion_ids[:3], *split, *turn.completion_ids[4:]]
    other = AnsweredTurn(HISTORY, TOOLS, answer, turn.prompt_ids, sampled)
    assert family.continue_turn(other, new).prompt_ids[: len(turn.prompt_ids) + len(sampled)] == [
        *turn.prompt_ids,
        *sampled,
    ]


def test_a_turn_cut_by_length_is_closed(family: MistralFamily) -> None:
    turn = turn_of(family, HISTORY, call("call00000"))
    cut = AnsweredTurn(HISTORY, TOOLS, turn.answer, turn.prompt_ids, turn.completion_ids[:-1])
    continued = family.continue_turn(cut, [result("call00000")])
    assert continued.appended_end_of_turn
    assert continued.prompt_ids == family.continue_turn(turn, [result("call00000")]).prompt_ids


def test_a_new_user_message_moves_system_and_tools_so_it_is_not_continued(
    family: MistralFamily,
) -> None:
    answer: Message = {"role": "assistant", "content": "Done."}
    follow_up: Message = {"role": "user", "content": "Now delete it."}
    full = text(family, family.render_ids([*HISTORY, answer, follow_up], TOOLS))
    assert full == (
        "<s>[INST]Create hello.txt containing polar.[/INST]Done.</s>"
        f"{TOOLS_TEXT}[INST]You are a coding agent.\n\nNow delete it.[/INST]"
    )
    with pytest.raises(ContinuationError, match=r"before the last user message.*not append-only"):
        family.continue_turn(turn_of(family, HISTORY, answer), [follow_up])
    # Without system prompt and tools nothing moves: the same conversation continues exactly.
    plain = [HISTORY[1]]
    prompt = family.render_ids(plain)
    turn = AnsweredTurn(plain, None, answer, prompt, family.completion_ids(plain, answer, None))
    assert family.continue_turn(turn, [follow_up]).prompt_ids == family.render_ids(
        [*plain, answer, follow_up]
    )


def test_an_answer_mistral_common_cannot_render_is_not_continued(family: MistralFamily) -> None:
    turn = turn_of(family, HISTORY, call("call00000"))
    both = {**turn.answer, "content": "Let me write it."}  # v3 refuses text and calls together
    mixed = AnsweredTurn(HISTORY, TOOLS, both, turn.prompt_ids, turn.completion_ids)
    with pytest.raises(ContinuationError, match="mistral-common cannot render"):
        family.continue_turn(mixed, [result("call00000")])


def test_check_accepts_exact_context(family: MistralFamily) -> None:
    assert family.check() == Verdict(True)


def test_stream_parser_agrees_with_the_whole_parse(family: MistralFamily) -> None:
    written = (
        'Sure.[TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}, "id": "abcDEF123"}]'
    )
    completion = [*family.tokenizer.encode(written), family.end_of_turn_id]
    parser = family.stream_parser((), TOOLS)
    pieces = [parser.feed([token]) for token in completion] + [parser.finish()]
    assert "".join(p.content for p in pieces) == "Sure."
    assert [d["id"] for p in pieces for d in p.tool_calls if "id" in d] == ["abcDEF123"]


def test_a_vocabulary_that_does_not_fit_is_refused() -> None:
    from rollstream.models.vocabularies import vocabulary_dir

    with pytest.raises(ConfigurationError, match="does not fit the mistral family"):
        load_family("mistral", vocabulary_dir("qwen3"))
