"""A trajectory as the viewer gets it: tokens with text, mask and logprob; what is collapsed."""

from __future__ import annotations

import json

import pytest

from rollstream.consumers.console.fleet import CallFacts
from rollstream.consumers.console.trajectory_view import (
    OPEN_TAIL,
    TokenTexts,
    collapsed_range,
    trajectory_view,
)
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Logprobs, LossMask, Segment, Task, TokenIds, utcnow
from tests.consumers.console.records import scored

INSTRUCTION = "Create hello.txt containing the word polar, then run the tests."
SYSTEM = "You are a coding agent. Use the tools below. " * 40


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


def _segment(tokenizer: ChatTokenizer, system: str, answer: str) -> Segment:
    prompt = tokenizer.encode(
        tokenizer.render(
            [{"role": "system", "content": system}, {"role": "user", "content": INSTRUCTION}]
        )
    )
    completion = [*tokenizer.encode(answer), tokenizer.eos_id]
    return Segment(
        input_ids=TokenIds.from_list(prompt + completion),
        loss_mask=LossMask.from_list([0] * len(prompt) + [1] * len(completion)),
        logprobs=Logprobs.from_list([0.0] * len(prompt) + [-0.25] * len(completion)),
        call_ids=["call-a"],
    )


def _view(tokenizer: ChatTokenizer, segment: Segment, cap: int = 20_000) -> dict:  # type: ignore[type-arg]
    record = scored("t1", "g", 0, [segment], 1.0)
    task = Task(
        task_id="task-1", group_id="g", instruction=INSTRUCTION, harness="pi", submitted_at=utcnow()
    )
    record = record.model_copy(
        update={"trajectory": record.trajectory.model_copy(update={"task": task})}
    )
    return trajectory_view(record, TokenTexts(tokenizer), [], topic="p.scored", cap=cap)


def test_the_system_prompt_is_collapsed_up_to_the_instructions_message(
    tokenizer: ChatTokenizer,
) -> None:
    view = _view(tokenizer, _segment(tokenizer, SYSTEM, "I will write it."))
    [segment] = view["segments"]
    start, end = segment["collapsed"]
    texts = segment["tokens"]["text"]
    assert start == 0
    assert segment["tokens"]["special"][end]  # the message opens with a special token
    assert "".join(texts[end : end + 4]).strip().startswith("<|im_start|>user")
    assert "coding agent" in "".join(texts[:end])
    assert "polar" not in "".join(texts[:end]) and "polar" in "".join(texts[end:])


def test_tokens_carry_their_mask_and_only_sampled_ones_a_logprob(tokenizer: ChatTokenizer) -> None:
    segment = _segment(tokenizer, SYSTEM, "Done.")
    [shown] = _view(tokenizer, segment)["segments"]
    tokens = shown["tokens"]
    assert tokens["id"] == list(segment.input_ids)
    assert tokens["mask"] == list(segment.loss_mask)
    assert {lp for lp, m in zip(tokens["logprob"], tokens["mask"], strict=True) if m} == {-0.25}
    assert {lp for lp, m in zip(tokens["logprob"], tokens["mask"], strict=True) if not m} == {None}
    first = tokens["mask"].index(1)
    assert shown["call_starts"] == [{"at": first, "call_id": "call-a"}]
    assert shown["trainable_tokens"] == sum(tokens["mask"])
    # Decoded one by one, the tokens read back as the text they encode.
    assert "".join(tokens["text"][first:]).startswith("Done.")


def test_a_long_segment_is_cut_to_the_cap_and_says_so(tokenizer: ChatTokenizer) -> None:
    segment = _segment(tokenizer, SYSTEM, "word " * 300)
    [shown] = _view(tokenizer, segment, cap=200)["segments"]
    assert shown["truncated"] and len(shown["tokens"]["id"]) == 200
    assert shown["total_tokens"] == len(segment.input_ids)
    # The collapsed head went first: the sent tokens start at the instruction's message.
    assert shown["first"] > 0 and shown["collapsed"] is None


def test_a_head_longer_than_the_cap_gives_up_its_start_not_the_sampled_tokens(
    tokenizer: ChatTokenizer,
) -> None:
    # A real harness's instructions alone outgrow the cap (Claude Code's: 40,000 tokens in the
    # reference vocabulary): cut at the tail, the page would show no sampled token at all.
    segment = _segment(tokenizer, SYSTEM * 3, "I will write it.")
    whole = _view(tokenizer, segment)["segments"][0]
    head = whole["collapsed"][1]
    cap = len(segment.input_ids) - head + 50
    assert head > cap
    [shown] = _view(tokenizer, segment, cap=cap)["segments"]
    tokens, first = shown["tokens"], shown["first"]
    assert first == head - 50 and shown["truncated"]
    assert tokens["id"] == list(segment.input_ids)[first:] and len(tokens["id"]) == cap
    assert tokens["text"] == whole["tokens"]["text"][first:]
    assert sum(tokens["mask"]) == shown["trainable_tokens"] == sum(segment.loss_mask)
    assert tuple(shown["collapsed"]) == (0, 50)
    assert shown["call_starts"] == [{"at": tokens["mask"].index(1), "call_id": "call-a"}]
    # The instruction's message and what follows are all sent.
    assert INSTRUCTION.split()[0] in "".join(tokens["text"][50:])


def test_without_the_instruction_all_but_the_prompts_tail_is_collapsed() -> None:
    texts = ["x"] * 500
    special = [False] * 500
    assert collapsed_range(texts, special, 400, "words found nowhere") == (0, 400 - OPEN_TAIL)
    assert collapsed_range(texts, special, 400, None) == (0, 400 - OPEN_TAIL)
    assert collapsed_range(texts, special, 100, None) is None  # a short prompt stays open


def test_the_instruction_found_across_wrapped_lines() -> None:
    texts = ["<s>", "sys ", "prompt " * 200, "<u>", "Create hello.txt\n  containing", " the word"]
    special = [True, False, False, True, False, False]
    # Tokens stand for 1 each; the prompt's first sampled token is far enough to collapse.
    found = collapsed_range(texts * 1, special, 6 + 200, "Create hello.txt containing the word")
    assert found == (0, 3)


def test_calls_come_in_time_order(tokenizer: ChatTokenizer) -> None:
    def facts(call_id: str, at: float) -> CallFacts:
        return CallFacts(call_id, 0, "m", None, None, "ok", at, at + 0.1, at + 1, 10, 5, None)

    record = scored("t1", "g", 0, [_segment(tokenizer, "short", "ok")], 0.0)
    view = trajectory_view(
        record,
        TokenTexts(tokenizer),
        [facts("b", 20.0), facts("a", 10.0)],
        topic="p.scored",
        other_topics=["p.scored", "p.trajectories.exact"],
    )
    assert [c["call_id"] for c in view["calls"]] == ["a", "b"]
    assert view["other_topics"] == ["p.trajectories.exact"]
    assert view["segments"][0]["collapsed"] is None  # a short prompt


def test_numbers_json_cannot_carry_are_sent_as_none(tokenizer: ChatTokenizer) -> None:
    segment = _segment(tokenizer, "short", "ok")
    n = len(segment.input_ids)
    broken = segment.model_copy(update={"logprobs": Logprobs.from_list([float("-inf")] * n)})
    record = scored("t1", "g", 0, [broken], float("nan"))
    view = trajectory_view(record, TokenTexts(tokenizer), [], topic="p.scored")
    assert view["reward"] is None
    assert set(view["segments"][0]["tokens"]["logprob"]) == {None}
    json.dumps(view, allow_nan=False)  # what the report's page and the API send
