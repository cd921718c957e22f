"""The report page's content, parsed: trajectories, token spans by loss mask, rewards, groups."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rollstream.dev.report import facts_of, render_report
from rollstream.dev.report.facts import Reportable, trajectory_of
from rollstream.dev.report.tokens import completion_starts, shown_ranges
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Logprobs, LossMask, Scored, Segment, TokenIds
from tests.dev.report.records import (
    Element,
    conversation,
    parse,
    prompt_only,
    scored,
    trajectory,
    unglyph,
)

TOOL_CALL = (
    'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "cat main.py"}}\n'
    "</tool_call>"
)


def _two_calls(tokenizer: ChatTokenizer, user: str = "Fix the failing test.") -> Segment:
    return conversation(
        tokenizer,
        user,
        [(TOOL_CALL, "print(1)"), ("The fix is done.", "")],
        call_ids=["call-a", "call-b"],
    )


def _run(tokenizer: ChatTokenizer) -> list[Reportable]:
    seg = _two_calls(tokenizer)
    return [
        scored("t-high", "g-1", 1, [seg], 1.0),
        scored("t-failed", "g-1", 0, [seg, prompt_only(tokenizer, "hello")], None, "boom"),
        scored("t-low", "g-2", 0, [seg], 0.25),
        trajectory("t-unscored", "g-2", 1, [seg]),
    ]


def _articles(root: Element) -> dict[str, Element]:
    return {a.attrs["data-trajectory-id"]: a for a in root.find_all("article", "trajectory")}


def _facts(article: Element) -> dict[str, str]:
    keys = [dt.text for dt in article.find_all("dt")]
    values = [dd.text for dd in article.find_all("dd")]
    return dict(zip(keys, values, strict=True))


def test_every_trajectory_is_shown_by_group_and_sample(tokenizer: ChatTokenizer) -> None:
    records = _run(tokenizer)
    root, _ = parse(render_report(records, tokenizer))
    order = [a.attrs["data-trajectory-id"] for a in root.find_all("article", "trajectory")]
    assert order == ["t-failed", "t-high", "t-low", "t-unscored"]
    sections = root.find_all("section", "group")
    assert [len(s.find_all("article")) for s in sections] == [2, 2]
    facts = _facts(_articles(root)["t-high"])
    assert facts["session"] == "sess-t-high" and facts["group"] == "g-1"
    assert facts["sample index"] == "1" and facts["harness"] == "claude-code"
    assert facts["strategy"] == "prefix_merge" and facts["reward"] == "1"
    assert facts["status"] == "incomplete (session completed)"
    assert facts["segments"] == "1" and facts["policy versions"] == "6, 7"
    seg = trajectory_of(records[0]).segments[0]
    assert facts["tokens / trainable"] == f"{len(seg.input_ids)} / {seg.trainable_tokens}"


def test_rewards_errors_and_unscored(tokenizer: ChatTokenizer) -> None:
    articles = _articles(parse(render_report(_run(tokenizer), tokenizer))[0])
    assert _facts(articles["t-low"])["reward"] == "0.25"
    assert _facts(articles["t-failed"])["reward"] == "evaluation failed: boom"
    assert _facts(articles["t-unscored"])["reward"] == "not scored"
    assert _facts(articles["t-unscored"])["evaluator"] == "\u2013"
    assert articles["t-failed"].find_all("h3")[0].text == "t-failedevaluation failed"
    assert articles["t-high"].find_all("h3")[0].text == "t-highreward 1"


def test_token_spans_follow_the_loss_mask_and_decode_to_the_segment(
    tokenizer: ChatTokenizer,
) -> None:
    records = _run(tokenizer)
    articles = _articles(parse(render_report(records, tokenizer))[0])
    failed = records[1]
    assert isinstance(failed, Scored)
    boxes = articles["t-failed"].find_all("div", "tokens")
    assert len(boxes) == 2
    for box, segment in zip(boxes, failed.trajectory.segments, strict=True):
        spans = box.find_all("span", "t")
        mask = segment.loss_mask.to_list()
        assert len(spans) == len(segment.input_ids)
        assert [1 if "m1" in s.classes else 0 for s in spans] == mask
        assert sum("m0" in s.classes for s in spans) == mask.count(0)
        assert "".join(unglyph(s.text) for s in spans) == tokenizer.decode(
            segment.input_ids.to_list(), skip_special_tokens=False
        )
        for span, token_id, logprob in zip(spans, segment.input_ids, segment.logprobs, strict=True):
            assert span.attrs["title"] == f"id {token_id} \u00b7 logprob {logprob:.4f}"
    # The sampled tokens of the first segment are both completions, nothing else.
    first = boxes[0].find_all("span", "m1")
    assert (
        unglyph("".join(s.text for s in first))
        == f"{TOOL_CALL}<|im_end|>The fix is done.<|im_end|>"
    )
    assert boxes[1].find_all("span", "m1") == []


def test_special_tokens_are_marked(tokenizer: ChatTokenizer) -> None:
    root, _ = parse(render_report(_run(tokenizer)[:1], tokenizer))
    box = root.find_all("div", "tokens")[0]
    special = {s.text for s in box.find_all("span", "sp")}
    assert special == {"<|im_start|>", "<|im_end|>"}
    plain = {s.text for s in box.find_all("span", "t") if "sp" not in s.classes}
    assert "<tool_call>" in plain  # an added token, not a special one
    assert not any("<|im_" in text for text in plain)


def test_each_completion_starts_with_its_call_marker(tokenizer: ChatTokenizer) -> None:
    root, _ = parse(render_report(_run(tokenizer)[:1], tokenizer))
    box = root.find_all("div", "tokens")[0]
    markers = box.find_all("span", "call")
    assert [m.text for m in markers] == ["call-a", "call-b"]
    # Each marker comes right before the first token of a run of mask 1.
    spans = box.children
    for marker in markers:
        after = spans[spans.index(marker) + 1]
        before = spans[spans.index(marker) - 1]
        assert "m1" in after.classes and "m0" in before.classes
    assert len(box.find_all("span", "call")) == len(
        completion_starts(
            np.array([1 if "m1" in s.classes else 0 for s in spans if "t" in s.classes], np.uint8)
        )
    )


def test_more_runs_than_call_ids_are_labelled_and_noted(tokenizer: ChatTokenizer) -> None:
    seg = conversation(tokenizer, "x", [("a", "r"), ("b", "r"), ("c", "")], call_ids=["only"])
    root, _ = parse(render_report([scored("t", "g", 0, [seg], 1.0)], tokenizer))
    markers = [m.text for m in root.find_all("span", "call")]
    assert markers[0] == "call id"  # the legend's
    assert markers[1:] == ["only", "call #2 (unnamed)", "call #3 (unnamed)"]
    assert "3 completions for 1 calls" in root.find_all("div", "segment-head")[0].text


def test_group_table(tokenizer: ChatTokenizer) -> None:
    records = _run(tokenizer)
    root, _ = parse(render_report(records, tokenizer))
    rows = root.find_all("tr", "group-row")
    assert [r.attrs["data-group-id"] for r in rows] == ["g-1", "g-2"]
    cells = [[td.text for td in r.find_all("td")] for r in rows]
    trainable = trajectory_of(records[0]).trainable_tokens
    assert cells[0] == ["g-1", "task-1", "2 / 4", "error, 1", "1", f"{2 * trainable:,}"]
    assert cells[1] == ["g-2", "task-1", "2 / 4", "0.25, \u2013", "0.25", f"{2 * trainable:,}"]
    links = [a.attrs["href"] for a in root.find_all("table")[0].find_all("a")]
    sections = [s.attrs["id"] for s in root.find_all("section", "group")]
    assert links == [f"#{s}" for s in sections]


def test_summary_counts_what_is_not_shown(tokenizer: ChatTokenizer) -> None:
    records = _run(tokenizer)
    extra = scored("t-hidden", "g-3", 0, [_two_calls(tokenizer)], 0.75)
    root, _ = parse(render_report(records, tokenizer, more=[facts_of(extra)], notes=["n1"]))
    summary = _facts(root.find_all("section", "summary")[0])
    assert summary["trajectories"] == "5 (4 shown below)"
    assert summary["groups"] == "3"
    assert summary["scored"] == "4 (1 evaluation errors)"
    assert summary["mean reward"] == f"{(1.0 + 0.25 + 0.75) / 3:.4g} over 3"
    assert summary["segments"] == "6"
    assert [r.attrs["data-group-id"] for r in root.find_all("tr", "group-row")][-1] == "g-3"
    assert "t-hidden" not in _articles(root)
    assert root.find_all("table")[0].find_all("a")[-1].attrs["href"] != "#group-2"
    assert root.find_all("p", "notes")[0].text == "n1"


def test_text_is_escaped(tokenizer: ChatTokenizer) -> None:
    attack = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    seg = conversation(tokenizer, attack, [(attack, "")])
    record = scored('t-<script>"', "g-<b>", 0, [seg], None, error="<script>x</script>")
    page = render_report([record], tokenizer)
    _, tags = parse(page)
    assert "script" not in tags and "img" not in tags and "b" not in tags
    root, _ = parse(page)
    box = root.find_all("div", "tokens")[0]
    assert attack in "".join(s.text for s in box.find_all("span", "t"))
    assert list(_articles(root)) == ['t-<script>"']
    assert (
        _facts(_articles(root)['t-<script>"'])["reward"] == "evaluation failed: <script>x</script>"
    )


def test_the_page_is_self_contained(tokenizer: ChatTokenizer) -> None:
    page = render_report(_run(tokenizer), tokenizer)
    _, tags = parse(page)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(tags)
    assert tags.count("style") == 1
    assert not re.search(r"url\(|@import|https?://|src=", page)


def test_long_segments_are_capped_with_a_note(tokenizer: ChatTokenizer) -> None:
    n, cap = 10_000, 200
    mask = [(i // 50) % 2 for i in range(n)]  # runs of 50: starts at 50, 150, ...
    seg = Segment(
        input_ids=TokenIds.from_list([(7 * i) % 4000 + 3 for i in range(n)]),
        loss_mask=LossMask.from_list(mask),
        logprobs=Logprobs.from_list([-0.1 * m for m in mask]),
        call_ids=[f"c{k}" for k in range(n // 100)],
    )
    root, _ = parse(
        render_report([scored("t", "g", 0, [seg], 1.0)], tokenizer, tokens_per_segment=cap)
    )
    box = root.find_all("div", "tokens")[0]
    spans = box.find_all("span", "t")
    assert len(spans) == cap
    kept = [int(s.attrs["title"].split()[1]) for s in spans]
    ids = seg.input_ids.to_list()
    assert kept == ids[:100] + ids[-100:]
    omitted = sum(mask[100:-100])
    assert [o.text for o in box.find_all("span", "omitted")] == [
        f"\u2026 9,800 tokens omitted here (positions 100\u20139,899, {omitted:,} trainable) \u2026"
    ]
    # The run starting at 9,950 is the 100th completion: its label counts the omitted runs.
    assert [m.text for m in box.find_all("span", "call")] == ["c0", "c99"]
    head = root.find_all("div", "segment-head")[0].text
    assert "10,000 tokens" in head and f"{sum(mask):,} trainable" in head
    assert "100 calls c0, c1, c2, \u2026, c97, c98, c99" in head


@pytest.mark.parametrize(("n", "cap"), [(0, 10), (5, 10), (10, 10), (11, 10), (11, 2), (100, 3)])
def test_shown_ranges_keep_cap_tokens(n: int, cap: int) -> None:
    ranges = shown_ranges(n, cap)
    shown = [i for start, end in ranges for i in range(start, end)]
    assert len(shown) == min(n, cap) and shown == sorted(set(shown))
    if n > cap:
        assert shown[0] == 0 and shown[-1] == n - 1


def test_unknown_ids_and_control_characters(tokenizer: ChatTokenizer) -> None:
    control = next(i for i in range(tokenizer.vocab_size) if tokenizer.token_text(i) == "\x05")
    seg = Segment(
        input_ids=TokenIds.from_list([control, tokenizer.vocab_size + 5]),
        loss_mask=LossMask.from_list([0, 1]),
        logprobs=Logprobs.from_list([0.0, -1.0]),
        call_ids=["c"],
    )
    root, _ = parse(render_report([scored("t", "g", 0, [seg], 1.0)], tokenizer))
    spans = root.find_all("div", "tokens")[0].find_all("span", "t")
    assert [s.text for s in spans] == ["\\x05", f"\u27e8{tokenizer.vocab_size + 5}?\u27e9"]
    assert "unk" in spans[1].classes and "unk" not in spans[0].classes


def test_no_segments(tokenizer: ChatTokenizer) -> None:
    root, _ = parse(render_report([scored("t", "g", 0, [], None, error="empty")], tokenizer))
    article = _articles(root)["t"]
    assert article.find_all("div", "tokens") == [] and "no segments" in article.text
    assert _facts(article)["tokens / trainable"] == "0 / 0"
