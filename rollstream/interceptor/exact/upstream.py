"""Exact-context mode in the interceptor: which calls go upstream as token ids, and their answers.

The addon asks :meth:`ExactUpstream.prepare` for each Chat request it is about to send. When the
call asked for exact context (the deployment's ``context`` setting, or the session's
``x-rollstream-context`` header) and continues a turn the session already had answered, the
request becomes a ``/v1/completions`` body whose prompt is token ids; otherwise it goes as Chat
Completions and the record's :class:`~rollstream.schemas.ContextInfo` says why. Answers from
``/v1/completions`` are turned back into Chat answers here, so everything after (capture,
records, the Responses, Anthropic and Gemini translators) is the same in both modes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from rollstream.errors import ConfigurationError
from rollstream.interceptor.exact import verify
from rollstream.interceptor.exact.completions import (
    CompletionStreamToChat,
    chat_from_completion,
    completion_request,
)
from rollstream.interceptor.exact.sessions import ExactContext
from rollstream.interceptor.recording import CallState, chat_answer
from rollstream.interceptor.sessions import affinity_key
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.families import detect_family, load_family
from rollstream.schemas import ContextInfo, ContextMode, TokenIds

log = logging.getLogger(__name__)

JSON = dict[str, Any]
#: How often an unverified upstream is asked again, at most (before an exact call).
RECHECK_S = 5.0
#: A session asks for (or out of) exact context per call with this header; never forwarded.
CONTEXT_HEADER = "x-rollstream-context"
Mode = Literal["ordinary", "exact"]


def _unsupported(chat: JSON) -> str | None:
    """Why a Chat request cannot be expressed as a completion of token ids, or None."""
    if int(chat.get("n") or 1) > 1:
        return "n > 1 is not continued token-wise"
    choice = chat.get("tool_choice")
    if choice not in (None, "auto") and chat.get("tools"):
        return f"tool_choice {choice!r} needs the server's Chat Completions"
    for key in _CHAT_ONLY:
        if chat.get(key) is not None:
            return f"{key} needs the server's Chat Completions"
    return None


#: Chat fields that change how the server renders the prompt or constrains the answer: a call
#: carrying one is left to the server.
_CHAT_ONLY = (
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "logit_bias",
    "chat_template",
    "chat_template_kwargs",
    "reasoning_effort",
    "continue_final_message",
)


class ExactUpstream:
    """Plans each call's context, converts completions back to Chat, remembers answered turns."""

    def __init__(
        self, settings: InterceptorSettings, chosen: Callable[[str], str | None] | None = None
    ) -> None:
        self.default: Mode = settings.context
        # The mode a session was registered with (the node passes its task's choice).
        self.chosen: Callable[[str], str | None] = chosen or (lambda _session: None)
        # One planner thread: rendering holds the GIL, and more threads would only take turns
        # with the event loop (and with the default executor's DNS lookups).
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exact-context")
        self.top_logprobs = settings.top_logprobs
        self.context: ExactContext | None = None
        self.unavailable = (
            "no tokenizer or model family configured (the interceptor's --tokenizer / --family)"
        )
        if settings.backend != "vllm":
            self.unavailable = f"exact context needs a vLLM upstream, not {settings.backend}"
        elif (
            settings.tokenizer is not None
            or settings.family is not None
            or detect_family(settings.upstream_model)
        ):
            try:
                name = settings.family
                if name is None and settings.tokenizer is None:
                    name = detect_family(settings.upstream_model)
                    log.info(
                        "model family %s, from the model name %s", name, settings.upstream_model
                    )
                family = load_family(name, settings.tokenizer)
                self.context = ExactContext(family)
            except ConfigurationError as exc:
                self.unavailable = f"exact context refused: {exc}"
        #: Until check_upstream has run: unverified, so no exact call goes out unchecked.
        self.verdict = verify.Verdict("unverified", "the upstream has not been checked yet")
        self._settings: InterceptorSettings | None = None
        self._checked_at = 0.0
        self._checking = asyncio.Lock()
        if self.context is None and self.default == "exact":
            # Not fatal: every call is still served and recorded, with this reason on it.
            log.warning("%s; calls are rendered by the server as usual", self.unavailable)

    async def check_upstream(self, settings: InterceptorSettings) -> None:
        """Verify that the upstream tokenizes and renders as our family does (verify.py).

        Refused: exact context is off, saying why. Unverified (the server is not up yet, or has
        no ``/tokenize``): exact calls are "not yet exact" and the check is made again before
        one, at most every RECHECK_S seconds.
        """
        if self.context is None:
            return
        self._settings = settings
        self._checked_at = time.monotonic()
        verdict = await verify.check(settings, self.context.family)
        self.verdict = verdict
        if verdict.state == "refused":
            self.context = None
            self.unavailable = f"exact context refused: {verdict.reason}"
            log.error("%s; calls are rendered by the server as usual", self.unavailable)
        elif verdict.state == "unverified":
            log.warning(
                "exact context not yet verified (%s): its calls are rendered by the server "
                "until the upstream answers",
                verdict.reason,
            )
        else:
            family = self.context.family.name
            log.info("the upstream tokenizes and renders as the %s family", family)

    async def _recheck(self) -> None:
        """Check an unverified upstream again, if the last check is old enough."""
        if self._settings is None or time.monotonic() - self._checked_at < RECHECK_S:
            return
        async with self._checking:
            if self.verdict.state == "unverified":
                await self.check_upstream(self._settings)

    def mode(self, asked: str | None, session: str | None = None) -> Mode:
        """The mode of one call.

        Its header if it names one, else the mode the session was registered with, else the
        deployment's.
        """
        mode = _mode(asked)
        if mode is None and session is not None:
            mode = _mode(self.chosen(session))
        return mode or self.default

    def prepare(
        self, session: str, chat: JSON, asked: str | None
    ) -> tuple[ContextInfo | None, JSON | None]:
        """The call's context info and, for a prompt built from tokens, the body to send.

        The info is None when exact context was not asked for; the body is a
        ``/v1/completions`` request to send instead of ``chat``, or None.
        """
        if self.mode(asked, session) != "exact":
            return None, None
        if self.context is None:
            return ContextInfo(note=self.unavailable), None
        if self.verdict.state != "verified":
            return ContextInfo(note=f"not yet exact: {self.verdict.reason}"), None
        reason = _unsupported(chat)
        if reason is not None:
            return ContextInfo(note=reason), None
        try:
            plan = self.context.plan(session, chat)
        except Exception as exc:  # a template error on this conversation: the server renders it
            log.warning("exact context failed for a call of session hash %s", _hash(session))
            return ContextInfo(note=f"exact context failed: {type(exc).__name__}: {exc}"), None
        if plan.prompt_ids is None:
            return ContextInfo(note=plan.note), None
        top = max(self.top_logprobs, int(chat.get("top_logprobs") or 0))
        body = completion_request(
            chat, plan.prompt_ids, str(chat.get("model")), top, self.verdict.max_model_len
        )
        info = ContextInfo(mode=ContextMode.EXACT, appended_end_of_turn=plan.appended_end_of_turn)
        return info, body

    async def prepare_off_loop(
        self, session: str, chat: JSON, asked: str | None
    ) -> tuple[ContextInfo | None, JSON | None]:
        """:meth:`prepare`, planning in a worker thread when a plan is to be made.

        Rendering a long conversation through the chat template takes milliseconds (17 ms at
        28k tokens here), which the event loop would otherwise stand still for, with every
        other stream behind it.
        """
        if self.context is None or self.mode(asked, session) != "exact":
            return self.prepare(session, chat, asked)
        if self.verdict.state == "unverified":
            await self._recheck()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._planner, self.prepare, session, chat, asked)

    def chat_answer(self, completion: JSON, state: CallState) -> JSON:
        """A whole ``/v1/completions`` answer as the Chat answer the rest of the addon expects.

        A completion the family's parser could not read is noted on the call's context.
        """
        assert self.context is not None  # only exact calls come here
        chat, parsed = chat_from_completion(
            completion, self.context.family, _prompt_tail(state), _tools(state)
        )
        note_parse(state, parsed.parse_error)
        return chat

    def stream(self, state: CallState) -> CompletionStreamToChat:
        """A converter of one completion stream into Chat chunks."""
        assert self.context is not None  # only exact calls come here
        return CompletionStreamToChat(self.context.family, _prompt_tail(state), _tools(state))

    def remember(self, state: CallState) -> None:
        """Keep a call answered in full, with its tokens, as a turn later calls may continue.

        Ordinary calls count too: the first call of a thread is always rendered by the server,
        and a session choosing per call may send one without the header in between.
        """
        if self.context is None or state.error is not None:
            return
        if state.context is None and state.session not in self.context:
            return  # a session that never asked for exact context: nothing kept for it
        capture = state.capture
        if not capture.has_tokens or capture.finish_reason is None:
            return
        if state.upstream_request is None:
            return
        answer = chat_answer(state)
        if answer is None:
            return
        message = (answer.get("choices") or [{}])[0].get("message")
        if not isinstance(message, dict):
            return
        if capture.packed_prompt_ids is not None:
            prompt = TokenIds(capture.packed_prompt_ids).to_list()
        else:
            prompt = list(capture.prompt_token_ids or [])
        self.context.remember(
            state.session, state.upstream_request, message, prompt, capture.completion_token_ids
        )

    def close(self) -> None:
        """Stop the planner thread (a plan under way finishes)."""
        self._planner.shutdown(wait=False, cancel_futures=True)

    def forget(self, session: str) -> None:
        """Drop what is kept for a session (it ended)."""
        if self.context is not None:
            self.context.forget(session)


def note_parse(state: CallState, error: str | None) -> None:
    """Put a parse failure of the family's parsers on the call's context note."""
    if error and state.context is not None:
        note = f"{state.context.note}; {error}" if state.context.note else error
        state.context = state.context.model_copy(update={"note": note})


def _prompt_tail(state: CallState) -> list[int]:
    """The end of the call's prompt: the parsers look there for reasoning the prompt opened."""
    capture = state.capture
    if capture.packed_prompt_ids is not None:
        return TokenIds(capture.packed_prompt_ids[-256:]).to_list()  # 64 ids, 4 bytes each
    return list((capture.prompt_token_ids or [])[-64:])


def _tools(state: CallState) -> Any:
    return (state.upstream_request or {}).get("tools")


def _mode(asked: str | None) -> Mode | None:
    """``exact`` or ``ordinary`` (any case, outer spaces ignored), else None."""
    value = (asked or "").strip().lower()
    if value == "exact":
        return "exact"
    return "ordinary" if value == "ordinary" else None


def _hash(session: str) -> str:
    return affinity_key(session)  # logs name sessions by hash: the id is a credential
