"""A streamed answer, read by read: upstream SSE in, the harness's events out, tokens captured.

mitmproxy calls the function :func:`stream_function` returns once per upstream read (and once
with ``b""`` at the end); each call parses the complete events, converts exact-context completion
chunks to Chat chunks, captures token ids and logprobs, and returns the translated bytes as one
write. This is the interceptor's hottest path: it runs for every read of every streamed call.

A Chat call passed through to a Chat harness takes its common reads (one event, one token)
through :func:`chunk_fast_path`, which gives what the general path gives at a fraction of its
cost: from the bytes against the answer's template where it has learnt one, else from the
parse; ``fast=False`` keeps every read on the general path, for the tests that compare the two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from rollstream.apis.adapters import ChatPassthrough, StreamTranslator
from rollstream.apis.chat_fast import FastPath, chunk_fast_path
from rollstream.apis.sse import DONE, SSEEvent, SSEParser
from rollstream.interceptor.exact.completions import CompletionStreamToChat
from rollstream.interceptor.exact.upstream import note_parse
from rollstream.interceptor.recording import CallState
from rollstream.schemas import ApiKind

log = logging.getLogger(__name__)

PROMPT_IDS_KEY = "prompt_token_ids"  # vLLM's, on a stream's first chunk


def stream_function(
    state: CallState,
    translator: StreamTranslator,
    converter: CompletionStreamToChat | None = None,
    fast: bool = True,
) -> Callable[[bytes], Iterable[bytes]]:
    """The per-read function of one streamed call (``converter``: exact context's answers).

    ``fast``: common chunks of a Chat passthrough take the fast path (the same result).
    """
    # The prompt's ids go straight into packed bytes where the harness never sees them: the
    # Chat Completions passthrough drops them unless the harness asked for them, and the
    # other translators read them (Anthropic counts them).
    takes_ids = (
        state.api is ApiKind.CHAT_COMPLETIONS and not state.asked.token_ids and not converter
    )
    parser = SSEParser(take_ids=PROMPT_IDS_KEY if takes_ids else None)
    capture = state.capture
    common: FastPath | None = None
    # Exactly the passthrough: the fast path does what its feed does, and a subclass may not.
    if fast and converter is None and type(translator) is ChatPassthrough:
        assert isinstance(translator, ChatPassthrough)  # for the type checker
        common = chunk_fast_path(capture, translator.asked, translator.harness_model)

    def stream(data: bytes) -> Iterable[bytes]:
        # Encoded as each translator call returns: an event that cannot be encoded stops the
        # read there, before later chunks are captured or the translator finishes.
        out: list[bytes] = []
        try:
            if common is None or not data:
                events = parser.feed(data) if data else parser.flush()
            elif (
                (template := common.template) is not None
                and parser.idle
                and (sent := template(data)) is not None
            ):
                # Learnt from a chunk with output: the first token's time is already set.
                return [sent]
            elif (single := parser.single(data)) is None:
                events = parser.feed_general(data)
            else:
                # Before the fast path strips the chunk: its token ids count as output.
                if state.first_token_at is None and _has_output(single):
                    state.first_token_at = datetime.now(UTC)
                sent = common.parsed(single, data)
                if sent is not None:
                    return [sent]
                events = [SSEEvent(single)]  # what parser.feed gives for this read
            for event in events:
                payload = event.data
                if payload == DONE:
                    out += [e.encode() for e in translator.finish()]
                    _delivered(state)
                elif isinstance(payload, dict):
                    if "error" in payload and not payload.get("choices"):
                        message = str(payload["error"])
                        state.fail("upstream_stream_error", message, 502, True)
                        out += [e.encode() for e in translator.error(502, message)]
                        continue
                    if event.token_ids is not None:
                        capture.set_packed_prompt_ids(event.token_ids)
                    for chunk in converter.feed(payload) if converter else (payload,):
                        if state.first_token_at is None and _has_output(chunk):
                            state.first_token_at = datetime.now(UTC)
                        capture.add_chunk(chunk)
                        out += [e.encode() for e in translator.feed(chunk)]
            if not data:  # end of the upstream stream
                state.ended_at = datetime.now(UTC)
                if capture.finish_reason is None and state.error is None:
                    state.fail("upstream_stream_broken", "stream ended without a finish", 502, True)
                    out += [
                        e.encode() for e in translator.error(502, "upstream stream ended early")
                    ]
                out += [e.encode() for e in translator.finish()]
                _delivered(state)
                if converter is not None and converter.parsed is not None:
                    note_parse(state, converter.parsed.parse_error)
        except Exception as exc:  # never let a translation bug break the harness's stream
            log.exception("stream translation failed")
            state.fail("translation_error", str(exc), 500, False)
            failed = translator.error(500, "rollstream could not translate the stream")
            out += [e.encode() for e in failed]
        # One write per upstream read: mitmproxy frames and sends each item separately, and an
        # empty item would end a chunked answer early.
        body = b"".join(out)
        return [body] if body else []

    return stream


def _delivered(state: CallState) -> None:
    """The terminal event is in this write: a finished answer is the harness's from now on."""
    if state.capture.finish_reason is not None and state.error is None:
        state.delivered = True
        state.ended_at = state.ended_at or datetime.now(UTC)


def _has_output(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or choice.get("token_ids"):
            return True
    return False
