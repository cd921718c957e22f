"""Synthetic load for the Kafka benchmarks: sessions in several encodings, many of them cheaply.

:func:`synthetic_session` draws every token with Python's ``random`` (about 60 ms for a 50-call
session of 32k tokens); the benchmarks need hundreds of sessions, so they draw a small pool and
copy it under new session ids (:func:`renamed`), which costs one model copy per record.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import numpy as np

from rollstream.dev.synthetic import SyntheticSession
from rollstream.interceptor.sessions import SessionLedger
from rollstream.schemas import AvroRecord, CallRecord, compress_json
from rollstream.schemas.calls import PromptTokens
from rollstream.schemas.packed import TokenIds


class Encoding(StrEnum):
    """How a session's CallRecords carry their prompts."""

    #: Every call's full prompt token ids (what delta encoding is measured against).
    NAIVE = "naive"
    #: Prompts delta-encoded against the previous call (the design's encoding); the harness's
    #: request is the synthetic stub of :func:`synthetic_session` (a few bytes).
    DELTA = "delta"
    #: Delta-encoded prompts plus the harness's and the upstream request, each carrying the
    #: whole conversation as text and delta-encoded against the session's previous requests,
    #: as the interceptor records them (``harness_request``, ``upstream_request``).
    DELTA_WITH_REQUEST = "delta_with_request"


# 32 symbols: three of them (15 bits) name any id of a vocabulary up to 32,768 tokens.
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz012345", dtype=np.uint8)


def render_text(ids: TokenIds) -> str:
    """Text standing for ``ids``: four characters a token, as much information as the ids.

    Real text compresses better than this (it is not uniformly random); the ids of
    :func:`synthetic_session` are, so the text compresses about as well as the ids do.
    """
    values = np.frombuffer(ids.data, dtype="<u4")
    out = np.empty((len(values), 4), dtype=np.uint8)
    out[:, 0] = _ALPHABET[(values >> 10) & 31]
    out[:, 1] = _ALPHABET[(values >> 5) & 31]
    out[:, 2] = _ALPHABET[values & 31]
    out[:, 3] = ord(" ")
    return out.tobytes().decode("ascii")


def conversation_requests(session: SyntheticSession) -> dict[str, dict[str, Any]]:
    """Per call id, the fields the interceptor records for the Chat request a harness sent.

    The system message is the first prompt; each earlier call adds its completion (assistant)
    and the tool result that follows it in the next prompt. Both requests are delta-encoded
    through the interceptor's own session ledger, as it writes them.
    """
    calls = session.calls
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": render_text(session.prompts[calls[0].call_id])}
    ]
    ledger = SessionLedger()
    out: dict[str, dict[str, Any]] = {}
    for k, call in enumerate(calls):
        request = {"model": call.model, "messages": messages, "stream": True}
        upstream = request | {"return_token_ids": True, "logprobs": True}
        update = ledger.begin("s", call.call_id)
        harness, harness_base = ledger.encode_request(update, "harness", request)
        sent, sent_base = ledger.encode_request(update, "upstream", upstream)
        ledger.commit(update)
        out[call.call_id] = {
            "harness_request": compress_json(harness),
            "harness_request_base": harness_base,
            "upstream_request": compress_json(sent),
            "upstream_request_base": sent_base,
        }
        if k + 1 < len(calls):
            completion = call.completion_token_ids or TokenIds()
            shared = len(session.prompts[call.call_id]) + len(completion)
            tool = session.prompts[calls[k + 1].call_id][shared:]
            messages = [
                *messages,
                {"role": "assistant", "content": render_text(completion)},
                {"role": "tool", "tool_call_id": f"tool-{k}", "content": render_text(tool)},
            ]
    return out


def encoded(session: SyntheticSession, encoding: Encoding) -> list[AvroRecord]:
    """The session's records with its CallRecords in ``encoding``."""
    if encoding is Encoding.DELTA:
        return list(session.records)
    if encoding is Encoding.NAIVE:
        return [
            r.model_copy(update={"prompt": PromptTokens(suffix=session.prompts[r.call_id])})
            if isinstance(r, CallRecord)
            else r
            for r in session.records
        ]
    requests = conversation_requests(session)
    return [
        r.model_copy(update=requests[r.call_id]) if isinstance(r, CallRecord) else r
        for r in session.records
    ]


def renamed(records: list[AvroRecord], old: str, new: str) -> list[AvroRecord]:
    """A copy of one session's records under session id ``new`` (and group id ``g-<new>``).

    Call ids (and the prompt bases naming them) start with the session id in synthetic sessions;
    they are renamed with it, so a copy's calls reference each other, not the original's.
    """

    def call_id(value: str) -> str:
        return new + value[len(old) :] if value.startswith(old) else value

    out: list[AvroRecord] = []
    for record in records:
        update: dict[str, Any] = {"session_id": new}
        if isinstance(record, CallRecord):
            update["call_id"] = call_id(record.call_id)
            if record.prompt is not None and record.prompt.base_call_id is not None:
                base = call_id(record.prompt.base_call_id)
                update["prompt"] = record.prompt.model_copy(update={"base_call_id": base})
        else:
            update["group_id"] = f"g-{new}"
        out.append(record.model_copy(update=update))
    return out
