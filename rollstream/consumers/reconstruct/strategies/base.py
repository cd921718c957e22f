"""What every strategy shares: its signature, the preprocessing of calls, segment building."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.compaction import LOOKBACK, resumed_from
from rollstream.models.family import Family
from rollstream.models.template_family import TemplateFamily
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas.calls import CallStatus
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds, common_prefix
from rollstream.schemas.trajectories import Compaction, Segment, TrajectoryStats

_ID_SIZE = TokenIds.itemsize
_LOGPROB_SIZE = Logprobs.itemsize
MISSING_LOGPROB = Logprobs.from_list([float("nan")]).data
"""A sampled token's logprob the server did not return: NaN, never a plausible value."""

# Break reasons (TrajectoryStats.break_reasons).
DRIFT = "drift"
TRUNCATED = "truncated"
RETRY = "retry"
EDITED_HISTORY = "edited_history"
BRANCH = "branch"
UNSPLICEABLE = "unspliceable"
#: The call went on from a summary the policy wrote (reconstruct/compaction.py).
COMPACTION = "compaction"


@dataclass(frozen=True)
class StrategyContext:
    """What a strategy may need beyond the calls.

    ``tokenizer`` is the served model: its family, or a tokenizer folder with its own template
    (the generic family); only ``retokenize`` needs it. ``calls_reported`` is how many calls
    the interceptor reported for the session.
    """

    tokenizer: Family | ChatTokenizer | None = None
    calls_reported: int = 0

    @property
    def family(self) -> Family | None:
        """The served model's family (a bare tokenizer is the generic family)."""
        if self.tokenizer is None or isinstance(self.tokenizer, Family):
            return self.tokenizer
        return TemplateFamily(self.tokenizer)


class StrategyResult(NamedTuple):
    """A strategy's output: the segments of one trajectory and what was done to get them."""

    segments: list[Segment]
    stats: TrajectoryStats


Strategy = Callable[[Sequence[ResolvedCall], StrategyContext], StrategyResult]
"""Ordered calls of one session (as :func:`resolve_calls` gives them) to segments + stats."""


@dataclass
class Tally:
    """Mutable statistics while a strategy runs; :meth:`stats` freezes them."""

    calls: int
    calls_reported: int
    calls_used: int = 0
    merges: int = 0
    breaks: int = 0
    break_reasons: Counter[str] = field(default_factory=Counter)
    failed_calls: int = 0
    duplicate_calls: int = 0
    superseded_calls: int = 0
    calls_without_tokens: int = 0
    missing_token_reasons: Counter[str] = field(default_factory=Counter)
    invariant_relaxed: bool = False
    notes: list[str] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    #: The usable calls in order and each one's place: where a break looks for a summary.
    usable: list[ResolvedCall] = field(default_factory=list)
    _place: dict[str, int] = field(default_factory=dict)

    def add_break(self, reason: str, call: ResolvedCall | None = None) -> None:
        """Count one segment started because ``call`` could not extend an existing one.

        A break that left the history (``edited_history``, ``branch``) is a ``compaction``
        when the call went on from a summary an earlier call wrote; the pair is recorded.
        """
        if call is not None and reason in (EDITED_HISTORY, BRANCH):
            if not self._place:
                self._place = {c.call_id: i for i, c in enumerate(self.usable)}
            at = self._place.get(call.call_id, 0)
            summary = resumed_from(call, self.usable[max(0, at - LOOKBACK) : at])
            if summary is not None:
                reason = COMPACTION
                self.compactions.append(
                    Compaction(summary_call_id=summary, resumed_call_id=call.call_id)
                )
        self.breaks += 1
        self.break_reasons[reason] += 1

    def stats(self) -> TrajectoryStats:
        """The frozen statistics."""
        return TrajectoryStats(
            calls=self.calls,
            calls_reported=self.calls_reported,
            calls_used=self.calls_used,
            merges=self.merges,
            breaks=self.breaks,
            break_reasons=dict(sorted(self.break_reasons.items())),
            failed_calls=self.failed_calls,
            duplicate_calls=self.duplicate_calls,
            superseded_calls=self.superseded_calls,
            calls_without_tokens=self.calls_without_tokens,
            missing_token_reasons=dict(sorted(self.missing_token_reasons.items())),
            invariant_relaxed=self.invariant_relaxed,
            notes=list(self.notes),
            compactions=list(self.compactions),
        )


def usable_calls(
    calls: Sequence[ResolvedCall], context: StrategyContext
) -> tuple[list[ResolvedCall], Tally]:
    """The calls a strategy may place, in order, and the tally counting the others.

    Every call lands in exactly one bucket, so ``calls == failed_calls + superseded_calls +
    calls_without_tokens + duplicate_calls + calls_used`` (before a strategy changes
    ``calls_used``):

    - failed: status other than ``ok`` (errors, cancellations, unknown endings), tokens or not;
      its answer did not (fully) reach the harness, so the rollout did not go on from it;
    - superseded: an ``ok`` call the harness sent again after it had ended (a retry,
      ``ResolvedCall.superseded_by``): the rollout went on from the retry's answer;
    - without tokens: an ``ok`` call whose ids are missing or unresolvable, by reason;
    - duplicate: same prompt and same completion ids as an earlier usable call (a retried
      request answered identically); the first is kept, training on it twice would double it;
    - usable: the rest.
    """
    tally = Tally(calls=len(calls), calls_reported=context.calls_reported)
    usable: list[ResolvedCall] = []
    # Duplicates share prompt length and completion: only calls alike in both are compared
    # token by token, so no call's whole prompt is kept for the comparison.
    alike: dict[tuple[int, bytes], list[ResolvedCall]] = {}
    without_logprobs = 0
    for call in calls:
        if call.status is not CallStatus.OK:
            tally.failed_calls += 1
            continue
        if call.superseded_by is not None:
            tally.superseded_calls += 1
            continue
        if call.prompt_len is None or call.completion is None:
            tally.calls_without_tokens += 1
            tally.missing_token_reasons[call.missing_reason or "no_token_ids"] += 1
            continue
        earlier = alike.setdefault((call.prompt_len, call.completion.data), [])
        if earlier and _same_prompt(call, earlier):
            tally.duplicate_calls += 1
            continue
        earlier.append(call)
        if call.logprobs is None:
            without_logprobs += 1
        usable.append(call)
    tally.calls_used = len(usable)
    tally.usable = usable
    if without_logprobs:
        # The invariant asks for the call's logprobs and there are none: the tokens are still
        # sampled (mask 1), with logprob NaN (missing; 0.0 would claim probability 1), and the
        # checker expects exactly that.
        tally.notes.append(
            f"{without_logprobs} call(s) without logprobs: their completion tokens have "
            "loss mask 1 and logprob NaN (missing)"
        )
    return usable, tally


def _same_prompt(call: ResolvedCall, earlier: list[ResolvedCall]) -> bool:
    prompt = call.prompt
    assert prompt is not None
    return any(other.prompt == prompt for other in earlier)


def completion_logprobs(call: ResolvedCall) -> bytes:
    """The call's packed completion logprobs; NaN (:data:`MISSING_LOGPROB`) when it has none."""
    assert call.completion is not None
    if call.logprobs is not None:
        return call.logprobs.data
    return MISSING_LOGPROB * len(call.completion)


class SegmentBuilder:
    """A segment under construction: packed arrays that grow by appending.

    Appending to bytearrays keeps a 50-call merge O(total tokens); concatenating immutable
    arrays would copy the whole context at every call.
    """

    __slots__ = (
        "call_ids",
        "ids",
        "last_call",
        "last_completion_start",
        "logprobs",
        "mask",
        "parent",
    )

    def __init__(self, parent: int | None = None) -> None:
        self.ids = bytearray()
        self.mask = bytearray()
        self.logprobs = bytearray()
        self.call_ids: list[str] = []
        self.parent = parent
        self.last_call: ResolvedCall | None = None
        self.last_completion_start = 0

    def __len__(self) -> int:
        return len(self.ids) // _ID_SIZE

    def is_prefix_of(self, ids: TokenIds) -> bool:
        """Whether every token of the segment so far starts ``ids``."""
        data, n = ids.data, len(self.ids)
        # The last token first: a prompt that re-rendered the segment's last turn differs
        # there, and comparing the whole context of every segment would cost O(context) each.
        if len(data) < n or data[n - _ID_SIZE : n] != self.ids[n - _ID_SIZE :]:
            return False
        return data.startswith(self.ids)

    def common_prefix_len(self, ids: TokenIds) -> int:
        """How many leading tokens the segment shares with ``ids``."""
        return common_prefix(self.ids, ids.data)

    def add_context(self, ids: bytes) -> None:
        """Append tokens the policy did not sample (mask 0, logprob 0.0)."""
        n = len(ids) // _ID_SIZE
        self.ids += ids
        self.mask += bytes(n)
        self.logprobs += bytes(n * _LOGPROB_SIZE)

    def add_completion(self, call: ResolvedCall) -> None:
        """Append the call's sampled tokens (mask 1, its logprobs) and record the call."""
        assert call.completion is not None
        self.last_completion_start = len(self)
        self.ids += call.completion.data
        self.mask += b"\x01" * len(call.completion)
        self.logprobs += completion_logprobs(call)
        self.call_ids.append(call.call_id)
        self.last_call = call

    def place(self, call: ResolvedCall, prompt: TokenIds | None = None) -> None:
        """Append the call where its prompt extends the segment: the gap, then its completion.

        ``prompt`` is the call's prompt when the caller has it at hand (saves building it).
        """
        prompt = prompt if prompt is not None else call.prompt
        assert prompt is not None
        self.add_context(prompt.data[len(self.ids) :])
        self.add_completion(call)

    def build(self) -> Segment:
        """The finished segment."""
        return Segment(
            input_ids=TokenIds(self.ids),
            loss_mask=LossMask(self.mask),
            logprobs=Logprobs(self.logprobs),
            call_ids=list(self.call_ids),
            parent=self.parent,
        )


def classify_break(segment: SegmentBuilder, prompt: TokenIds, shared: int) -> str:
    """Why ``prompt`` does not extend ``segment``, given the ``shared`` leading tokens.

    - ``retry``: the prompt is exactly the segment's last prompt (a new sample of the same
      request, with a different completion: identical ones were deduplicated);
    - ``truncated``: the prompt leaves the segment inside (or at the start of) its last
      completion, which ended at the token limit (finish ``length``);
    - ``drift``: the same, after a completion that ended normally: the harness re-rendered
      the assistant turn differently from the sampled tokens;
    - ``edited_history``: the prompt leaves the segment earlier, or stops inside it (history
      rolled back, compacted, a side call or a sub-agent).
    """
    last = segment.last_call
    start = segment.last_completion_start
    if last is None:
        return EDITED_HISTORY
    if len(prompt) <= shared:  # the prompt lies wholly inside the segment
        return RETRY if len(prompt) == start else EDITED_HISTORY
    if shared >= start:
        return TRUNCATED if last.finish_reason == "length" else DRIFT
    return EDITED_HISTORY


Recency = dict[int, None]
"""Segment indexes in order of use, least recently used first (a dict: O(1) moves)."""


def touch(order: Recency, index: int) -> None:
    """Mark segment ``index`` as the most recently used."""
    order.pop(index, None)
    order[index] = None
