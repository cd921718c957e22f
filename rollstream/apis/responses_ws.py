"""The Responses API over WebSocket (Codex's transport): its messages as HTTP requests, and back.

A client opens a WebSocket on the Responses route and sends one JSON text message per call,
``{"type": "response.create", ...}`` with the fields of an HTTP request; the server answers with
the events an HTTP stream carries, one JSON text message each, up to ``response.completed`` (or
an ``error`` event carrying an HTTP status). A later create may name the connection's previous
response (``previous_response_id``) and send only the items after it: before them come that
response's input and then its output, exactly (Codex sends the tail only after checking that
its full input starts with those). The connection remembers its last response for this
(``Conversation``), so the HTTP request it becomes is whole and the HTTP path stays stateless.

A create with ``generate: false`` is a warm-up (Codex sends one as it connects): it is answered
at once with an empty response, which samples nothing and so is no call, and the next create
goes on from its input.

What cannot be read is refused (``WsMessageError``); a ``previous_response_id`` the connection
does not know is left in the request, which the HTTP path refuses and records.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.apis.responses_answer import response_object
from rollstream.schemas import jsonfast

JSON = dict[str, Any]

#: A call: the HTTP request's fields, and ``type``.
CREATE = "response.create"
#: Codex's acknowledgement that it has read a response: nothing to answer.
PROCESSED = "response.processed"
#: The message types a connection takes.
KNOWN = frozenset({CREATE, PROCESSED})
#: The event that ends a call's answer with a response the next create may name.
COMPLETED = "response.completed"
#: Events that end a call's answer without one.
FAILED = frozenset({"response.failed", "response.incomplete", "error"})


class WsMessageError(TranslationError):
    """A WebSocket message that is no call: not a JSON object, or of a type nobody sends."""


@dataclass
class Conversation:
    """A connection's last completed response: what a create naming it goes on from."""

    response_id: str
    input: list[Any]
    output: list[Any]

    def items(self) -> list[Any]:
        """The input a create naming this response starts with: its input, then its output."""
        return [*self.input, *self.output]


def read_message(text: str | bytes) -> JSON:
    """A message as a JSON object with a known ``type``; WsMessageError otherwise."""
    try:
        message = jsonfast.loads(text)
    except ValueError as exc:
        raise WsMessageError(f"a WebSocket message must be JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise WsMessageError("a WebSocket message must be a JSON object")
    kind = message.get("type")
    if kind not in KNOWN:
        raise WsMessageError(
            f"unknown WebSocket message type {kind!r}: this server takes "
            + ", ".join(sorted(KNOWN)),
            "type",
        )
    return message


def http_request(message: JSON, last: Conversation | None) -> JSON:
    """A ``response.create`` as the whole, streamed HTTP request it stands for.

    A ``previous_response_id`` naming ``last`` is replaced by its items; any other is kept, for
    the HTTP path to refuse (it stores no responses).
    """
    body = {key: value for key, value in message.items() if key not in ("type", "generate")}
    previous = body.get("previous_response_id")
    if previous is not None and last is not None and previous == last.response_id:
        del body["previous_response_id"]
        body["input"] = [*last.items(), *input_items(body.get("input"))]
    body["stream"] = True  # every answer on a WebSocket is its stream of events
    return body


def is_warmup(message: JSON) -> bool:
    """Whether a create asks for no answer (``generate: false``), only to set up what follows."""
    return message.get("generate") is False


def warmup(body: JSON) -> tuple[Conversation, list[JSON]]:
    """A warm-up's answer: a response that samples nothing, and what the next create names.

    ``body`` is the warm-up as :func:`http_request` made it, so whole.
    """
    response_id, created_at = f"resp_{uuid.uuid4().hex}", int(time.time())
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    events = [
        {
            "type": kind,
            "response": response_object(
                body,
                response_id=response_id,
                created_at=created_at,
                status=status,
                output=[],
                usage=used,
            ),
        }
        for kind, status, used in (
            ("response.created", "in_progress", None),
            (COMPLETED, "completed", usage),
        )
    ]
    return Conversation(response_id, input_items(body.get("input")), []), events


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return value
    raise WsMessageError("input must be a string or a list of items", "input")


@dataclass
class AnswerTracker:
    """Reads one call's answer events and keeps what a later create may go on from."""

    request: JSON
    output: list[Any] = field(default_factory=list)
    done: bool = False
    conversation: Conversation | None = None

    def observe(self, event: JSON) -> None:
        """Take one answer event: its output items, and the end of the answer."""
        kind = event.get("type")
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self.output.append(event["item"])
        elif kind == COMPLETED:
            self.done = True
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                output = response.get("output")
                self.conversation = Conversation(
                    response["id"],
                    input_items(self.request.get("input")),
                    output if isinstance(output, list) and output else self.output,
                )
        elif kind in FAILED:
            self.done = True


def error_event(status: int, message: str, code: str | None = None) -> JSON:
    """An error as a WebSocket event: the HTTP status and the API's error object."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {
        "type": "error",
        "status": status,
        "error": {"type": kind, "code": code, "message": message},
    }


def error_from_http(status: int, body: bytes) -> JSON:
    """An HTTP error answer (the Responses API's ``{"error": ...}``) as a WebSocket event."""
    try:
        parsed = jsonfast.loads(body)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or f"HTTP {status}")
        code = error.get("code")
        return error_event(status, message, code if isinstance(code, str) else None)
    text = body.decode("utf-8", "replace").strip()[:500]
    return error_event(status, text or f"HTTP {status}")
