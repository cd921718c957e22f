"""Compaction: the harness replaced its context with a summary the policy wrote.

Claude Code, Codex, opencode and others compact a long conversation: one call asks the model for
a summary, and the thread goes on from a new, shorter prompt holding that summary. Both are one
rollout in several physical traces (NeMo RL#3910): the trajectory keeps every trace and marks
where the thread went on from a summary, so that a trainer can tell a compaction from a harness
that edited its history.

Told by tokens, as every break is, whatever the harness or its API: call M *resumes from* an
earlier call S when

- S answered in text, calling no tool (a summary is text),
- M's prompt does not continue S (S's prompt and answer are not a prefix of it),
- M's prompt holds S's answer: a quarter at least of its tokens lie in runs of it found there
  (the summary as the harness placed it, re-tokenized from its text, with its ends
  re-formatted), and
- M's prompt does not hold the end of S's prompt (what asked for the summary).

The last rule tells a compaction from a harness that pruned its history (old tool output
cleared): there the previous answer stands in the new prompt too, but after the message it
answered. The first keeps the summary's own request, which writes the history out as text
(opencode), from being taken for a thread going on from the turns it quotes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.errors import SerializationError
from rollstream.schemas.blobs import decompress_json
from rollstream.schemas.packed import TokenIds

#: A summary shorter than this is not told apart from a short acknowledgement ("OK.").
MIN_SUMMARY_TOKENS = 12
#: Tokens compared: a run this long found by chance in an unrelated prompt is implausible.
WINDOW = 8
#: Tokens left off the end of a prompt before its last window: the generation prompt (the
#: assistant header, a thinking prefix) and the end of the message before it.
PROMPT_END = 8
#: At least 1 / HELD of the answer's tokens must be in runs found in the prompt.
HELD = 4
#: Answers up to this long are compared at every offset when their disjoint runs fall short.
EVERY_OFFSET_UP_TO = 4096
#: Earlier calls tried, most recent first: a summary is written just before the thread resumes.
LOOKBACK = 8


def resumed_from(call: ResolvedCall, earlier: Sequence[ResolvedCall]) -> str | None:
    """The id of the call whose summary ``call`` went on from, or None (see the module)."""
    prompt = call.prompt
    if prompt is None:
        return None
    for candidate in reversed(earlier[-LOOKBACK:]):
        if _resumes(prompt, candidate):
            return candidate.call_id
    return None


def _resumes(prompt: TokenIds, summary: ResolvedCall) -> bool:
    answer, asked = summary.completion, summary.prompt
    if answer is None or asked is None or len(answer) < MIN_SUMMARY_TOKENS:
        return False
    context = summary.context()
    if context is not None and prompt.startswith(context):
        return False  # it continues the call: an ordinary turn
    if not held(prompt, answer):
        return False
    end = len(asked) - PROMPT_END
    if end >= WINDOW and holds(prompt, asked[end - WINDOW : end]):
        return False
    return not _called_tools(summary)


def held(prompt: TokenIds, answer: TokenIds) -> bool:
    """Whether a quarter at least of ``answer``'s tokens lie in runs of it that ``prompt`` holds.

    Not all of them: the harness sends text back, and where the model sampled a token split
    unlike the tokenizer's, the prompt has other ids; a thinking block or tags the harness
    strips are not there at all. The disjoint runs are tried first (one search in eight
    tokens). A split breaks the run it falls in, so a short summary with a few splits can have
    too few whole ones (about 1 in 70 of the scripted policy's, at its split rate): then the runs at
    every offset are tried, counting the tokens they cover. That costs a search a token, so a
    long answer is left to its disjoint runs, which are then too many for chance splits to tip.
    """
    size = len(answer)
    if size < WINDOW:
        return False
    disjoint = range(0, size - WINDOW + 1, WINDOW)
    if sum(holds(prompt, answer[i : i + WINDOW]) for i in disjoint) * HELD >= len(disjoint):
        return True
    if size > EVERY_OFFSET_UP_TO:
        return False
    covered = reach = 0
    for start in range(size - WINDOW + 1):
        if holds(prompt, answer[start : start + WINDOW]):
            covered += start + WINDOW - max(reach, start)
            reach = start + WINDOW
            if covered * HELD >= size:
                return True
    return False


def _called_tools(call: ResolvedCall) -> bool:
    """Whether the call's answer, as the harness got it, called a tool (read last: it decodes)."""
    if call.record.response is None:
        return False
    try:
        message = decompress_json(call.record.response)["choices"][0]["message"]
    except (SerializationError, LookupError, TypeError):
        return False
    return isinstance(message, dict) and bool(message.get("tool_calls"))


def holds(haystack: TokenIds, needle: TokenIds) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as a run of whole tokens."""
    data, part, size = haystack.data, needle.data, TokenIds.itemsize
    found = data.find(part)
    while found >= 0:
        if found % size == 0:
            return True
        found = data.find(part, found + 1)
    return False
