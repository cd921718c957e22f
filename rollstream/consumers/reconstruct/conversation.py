"""The conversation a trajectory keeps beside its tokens: the last answer, and its messages.

Scoring reads the final answer's text (exact_match, regex) and export writes the messages for
SFT; both would otherwise need the tokenizer and the chat template to get text back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rollstream.errors import SerializationError
from rollstream.schemas import CallRecord, CallStatus, compress_json, decompress_json
from rollstream.schemas.calls import SessionRequests


def last_answered(calls: Iterable[CallRecord]) -> CallRecord | None:
    """The session's latest call (by seq) that the server answered."""
    answered = [c for c in calls if c.status is CallStatus.OK and c.response is not None]
    return max(answered, key=lambda c: c.seq, default=None)


def _answer_message(response: Any) -> dict[str, Any] | None:
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def message_text(message: dict[str, Any] | None) -> str:
    """The text of a Chat message's content, whether a string or a list of text parts."""
    if message is None:
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def conversation(calls: Iterable[CallRecord]) -> tuple[bytes | None, str]:
    """(compressed messages, final text) of the last answered call; (None, "") without one.

    The messages are the call's upstream Chat messages followed by the answer, so a session
    whose last call came through Responses or Anthropic Messages is kept in one format.
    """
    calls = list(calls)
    call = last_answered(calls)
    if call is None:
        return None, ""
    try:
        response = decompress_json(call.response) if call.response is not None else None
        request = SessionRequests(calls).upstream(call.call_id) or {}
    except SerializationError:
        return None, ""
    answer = _answer_message(response)
    messages = request.get("messages") if isinstance(request, dict) else None
    history = list(messages) if isinstance(messages, list) else []
    if answer is not None:
        history.append(answer)
    return compress_json(history), message_text(answer)
