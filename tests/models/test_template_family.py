"""The generic family's continuations against full renders: equal where the model sampled the
template's tokens, different (and keeping the sampled ones) where the template re-renders."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.family import AnsweredTurn, Continuation, ContinuationError, Verdict
from rollstream.models.template_family import TemplateFamily
from rollstream.models.tokenizer import ChatTokenizer

Message = dict[str, Any]
TOOLS: Any = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


def check_template(tok: ChatTokenizer) -> Verdict:
    return TemplateFamily(tok).check()


def continuation_text(
    tok: ChatTokenizer,
    history: list[Message],
    answer: Message,
    new: list[Message],
    tools: Any = None,
) -> str:
    return TemplateFamily(tok).continuation_text(AnsweredTurn(history, tools, answer, [], []), new)


def continue_prompt(
    tok: ChatTokenizer,
    prompt: list[int],
    completion: list[int],
    new: list[Message],
    answer: Message,
) -> tuple[list[int], Continuation]:
    turn = AnsweredTurn([{"role": "user", "content": "q"}], None, answer, prompt, completion)
    continuation = TemplateFamily(tok).continue_turn(turn, new)
    return continuation.prompt_ids, continuation


def canonical_completion(
    tok: ChatTokenizer, history: list[Message], answer: Message, tools: Any = None
) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) as if the model sampled exactly the template's tokens."""
    prompt = tok.encode(tok.render(history, tools, add_generation_prompt=True))
    closed = tok.encode(tok.render([*history, answer], tools, add_generation_prompt=False))
    assert closed[: len(prompt)] == prompt
    rest = closed[len(prompt) :]
    return prompt, rest[: rest.index(tok.eos_id) + 1]


def incremental(
    tok: ChatTokenizer,
    history: list[Message],
    answer: Message,
    new: list[Message],
    completion: list[int] | None = None,
    tools: Any = None,
) -> list[int]:
    prompt, canonical = canonical_completion(tok, history, answer, tools)
    sampled = canonical if completion is None else completion
    turn = AnsweredTurn(history, tools, answer, prompt, sampled)
    return TemplateFamily(tok).continue_turn(turn, new).prompt_ids


def test_the_shipped_template_can_be_split(tokenizer: ChatTokenizer) -> None:
    assert check_template(tokenizer).ok


words = st.text(alphabet="abcdefgh ijklm.,\n", min_size=1, max_size=40).filter(str.strip)


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.tuples(words, words), min_size=1, max_size=4), last=words)
def test_plain_turns_sampled_as_the_template_renders_them_agree_with_a_full_render(
    tokenizer: ChatTokenizer, turns: list[tuple[str, str]], last: str
) -> None:
    history: list[Message] = [{"role": "system", "content": "sys"}]
    for question, reply in turns[:-1]:
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    history.append({"role": "user", "content": turns[-1][0]})
    answer = {"role": "assistant", "content": turns[-1][1]}
    new = [{"role": "user", "content": last}]
    full = tokenizer.encode(tokenizer.render([*history, answer, *new], None, True))
    assert incremental(tokenizer, history, answer, new) == full


def test_tool_results_after_a_tool_call_agree_when_sampled_canonically(
    tokenizer: ChatTokenizer,
) -> None:
    history: list[Message] = [{"role": "user", "content": "list files"}]
    answer = {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [{"id": "c1", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}],
    }
    new = [{"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt"}]
    full = tokenizer.encode(tokenizer.render([*history, answer, *new], TOOLS, True))
    assert incremental(tokenizer, history, answer, new, tools=TOOLS) == full


def test_a_tool_call_sampled_in_another_spelling_keeps_the_sampled_tokens(
    tokenizer: ChatTokenizer,
) -> None:
    history: list[Message] = [{"role": "user", "content": "list files"}]
    answer = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}],
    }
    # What the model sampled: compact JSON; the template re-renders it with spaces.
    sampled_text = '<tool_call>\n{"name":"shell","arguments":{"cmd":"ls"}}\n</tool_call>'
    sampled = [*tokenizer.encode(sampled_text), tokenizer.eos_id]
    new = [{"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    ids = incremental(tokenizer, history, answer, new, completion=sampled, tools=TOOLS)
    full = tokenizer.encode(tokenizer.render([*history, answer, *new], TOOLS, True))
    assert ids != full  # the drift a re-render introduces
    prompt = tokenizer.encode(tokenizer.render(history, TOOLS, True))
    assert ids[: len(prompt) + len(sampled)] == prompt + sampled  # the model's own tokens
    assert ids[len(prompt) + len(sampled) :] == full[-len(ids) + len(prompt) + len(sampled) :]


def test_split_tokens_stay_split(tokenizer: ChatTokenizer) -> None:
    history: list[Message] = [{"role": "user", "content": "hi"}]
    answer = {"role": "assistant", "content": "polar bear"}
    canonical = tokenizer.encode("polar bear")
    pair = next(
        (i, s) for i, t in enumerate(canonical) if (s := tokenizer.split_token(t)) is not None
    )
    sampled = [*canonical[: pair[0]], *pair[1], *canonical[pair[0] + 1 :], tokenizer.eos_id]
    new = [{"role": "user", "content": "more"}]
    ids = incremental(tokenizer, history, answer, new, completion=sampled)
    full = tokenizer.encode(tokenizer.render([*history, answer, *new], None, True))
    assert ids != full and len(ids) == len(full) + 1
    assert tokenizer.decode(ids, False) == tokenizer.decode(full, False)  # same text


def test_a_completion_cut_by_length_gets_the_end_of_turn_it_did_not_sample(
    tokenizer: ChatTokenizer,
) -> None:
    answer = {"role": "assistant", "content": "a"}
    new = [{"role": "user", "content": "next"}]
    ids, continuation = continue_prompt(tokenizer, [1, 2], [5, 6], new, answer)
    assert continuation.appended_end_of_turn
    assert ids[:5] == [1, 2, 5, 6, tokenizer.eos_id]
    ids, continuation = continue_prompt(tokenizer, [1, 2], [5, tokenizer.eos_id], new, answer)
    assert not continuation.appended_end_of_turn and ids[:4] == [1, 2, 5, tokenizer.eos_id]


def _tokenizer_with_template(tmp_path: Path, template: str) -> ChatTokenizer:
    folder = tmp_path / "tok"
    shutil.copytree(default_tokenizer_dir(), folder)
    (folder / "chat_template.jinja").write_text(template)
    return ChatTokenizer(folder)


def test_a_template_that_rewrites_history_is_refused(tmp_path: Path) -> None:
    counting = (
        "{{- 'turns: ' ~ (messages | length) ~ '\\n' }}"
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') "
        "+ '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    tok = _tokenizer_with_template(tmp_path, counting)
    verdict = check_template(tok)
    assert not verdict.ok and "append-only" in verdict.reason
    with pytest.raises(ContinuationError):
        continuation_text(
            tok,
            [{"role": "user", "content": "a"}],
            {"role": "assistant", "content": "b"},
            [{"role": "user", "content": "c"}],
        )


def test_a_template_whose_glue_depends_on_the_answer_is_refused(tmp_path: Path) -> None:
    echoing = (
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') "
        "+ '<|im_end|>' }}{%- if m.role == 'assistant' %}{{- '[' ~ (m.content or '') | length "
        "~ ']' }}{%- endif %}{{- '\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    verdict = check_template(_tokenizer_with_template(tmp_path, echoing))
    assert not verdict.ok and "depends on its content" in verdict.reason
