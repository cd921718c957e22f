"""Per-session memory of exact context: the recent turns a next call may continue.

A session's calls are not one line: side calls (titles, summaries) and sub-agents interleave
with the main conversation. Each session keeps its last few answered turns, and a call continues
whichever of them its conversation extends append-only; anything else is rendered by the
server as usual, and the record says why.
"""

from __future__ import annotations

import contextlib
import logging
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollstream.models.family import AnsweredTurn, ContinuationError, Family
from rollstream.models.threads import appended_messages

Message = dict[str, Any]
log = logging.getLogger(__name__)

#: Why a call was not built from tokens (the record's context note).
FIRST_CALL = "first call of its thread"
NOT_APPENDED = "history edited, another thread, or nothing appended"
TOOLS_CHANGED = "the tools changed"
NO_TOKENS = "the previous call returned no token ids"
UNKNOWN_TURN = "an answered turn in between is unknown (failed, or not kept)"
EVICTED = "its session's turns were evicted (more sessions open than the interceptor keeps)"


@dataclass(frozen=True)
class Plan:
    """How to send a call: ``prompt_ids`` for exact context, or None and the reason."""

    prompt_ids: list[int] | None
    note: str
    appended_end_of_turn: bool = False


class ExactContext:
    """Plans exact-context prompts from each session's recent turns (bounded memory)."""

    def __init__(self, family: Family, sessions: int = 4096, turns: int = 4) -> None:
        verdict = family.check()
        if not verdict.ok:
            raise ContinuationError(
                f"exact context refused for the {family.name} family "
                f"({family.tokenizer.path}): {verdict.reason}"
            )
        self.family = family
        # Kept turns hold packed ids (4 bytes a token): a session keeps a few whole contexts.
        self._sessions: OrderedDict[str, deque[AnsweredTurn]] = OrderedDict()
        self._max_sessions = sessions
        self._turns = turns
        #: Sessions whose turns were dropped for room (their ids only, as many as are kept),
        #: so their next call says so rather than look like a thread's first.
        self._evicted: OrderedDict[str, None] = OrderedDict()
        #: How many sessions lost their turns for room (the interceptor's metric).
        self.evicted = 0

    def plan(self, session: str, request: Message) -> Plan:
        """The prompt ids continuing one of the session's turns, or why there are none."""
        messages = request.get("messages") or []
        tools = request.get("tools") or None
        turns = self._sessions.get(session)
        if not turns:
            return Plan(None, EVICTED if session in self._evicted else FIRST_CALL)
        with contextlib.suppress(KeyError):  # forgotten meanwhile (another thread)
            self._sessions.move_to_end(session)
        reason = NOT_APPENDED
        # A copy: planning runs in a worker thread while the event loop may remember a turn.
        for turn in reversed(list(turns)):  # the most recent thread first
            new = appended_messages(turn.messages, turn.answer, messages)
            if new is None:
                continue
            if tools != turn.tools:
                reason = TOOLS_CHANGED
                continue
            if not turn.prompt_ids or not turn.completion_ids:
                reason = NO_TOKENS
                continue
            if any(m.get("role") == "assistant" for m in new):
                # A later answer was never remembered: rendering it would put the template's
                # tokens where the model sampled its own.
                reason = UNKNOWN_TURN
                continue
            try:
                continuation = self.family.continue_turn(turn, new)
            except ContinuationError as exc:
                reason = str(exc)
                continue
            return Plan(continuation.prompt_ids, "exact", continuation.appended_end_of_turn)
        return Plan(None, reason)

    def remember(
        self,
        session: str,
        request: Message,
        answer: Message,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
    ) -> None:
        """Keep an answered call as a turn later calls may continue."""
        turns = self._sessions.get(session)
        if turns is None:
            turns = self._sessions[session] = deque(maxlen=self._turns)
            self._evicted.pop(session, None)
            while len(self._sessions) > self._max_sessions:
                self._evict()
        self._sessions.move_to_end(session)
        messages = list(request.get("messages") or [])
        # A turn that extends one kept already replaces it: its thread moved on.
        for kept in list(turns):
            if appended_messages(kept.messages, kept.answer, messages) is not None:
                turns.remove(kept)
        tools = request.get("tools") or None
        turns.append(
            AnsweredTurn(
                messages, tools, answer, array("I", prompt_ids), array("I", completion_ids)
            )
        )

    def _evict(self) -> None:
        """Drop the least recently used session's turns, saying so."""
        oldest, _ = self._sessions.popitem(last=False)
        self._evicted[oldest] = None
        while len(self._evicted) > self._max_sessions:
            self._evicted.popitem(last=False)
        self.evicted += 1
        log.warning(
            "exact context: session %s evicted, more than %d sessions open; its next call is "
            "rendered by the server (rollstream_exact_sessions_evicted_total: %d)",
            oldest,
            self._max_sessions,
            self.evicted,
        )

    def forget(self, session: str) -> None:
        """Drop a session's turns (it ended)."""
        self._sessions.pop(session, None)
        self._evicted.pop(session, None)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)
