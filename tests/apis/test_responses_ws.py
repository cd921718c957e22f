"""The Responses API over WebSocket: messages read, creates made whole, answers followed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.apis.responses_ws import (
    CREATE,
    PROCESSED,
    AnswerTracker,
    Conversation,
    WsMessageError,
    error_from_http,
    http_request,
    is_warmup,
    read_message,
    warmup,
)

USER = {"type": "message", "role": "user", "content": "Create hello.txt with polar."}
CALL = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json", "must be JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"type": "response.append", "input": []}', "unknown WebSocket message type"),
        ('{"input": []}', "unknown WebSocket message type None"),
    ],
)
def test_a_message_that_is_no_call_is_refused_for_good(text: str, match: str) -> None:
    with pytest.raises(WsMessageError, match=match) as raised:
        read_message(text)
    assert raised.value.retriable is False


def test_the_known_messages_are_read() -> None:
    assert read_message(b'{"type": "response.create", "input": []}')["type"] == CREATE
    assert read_message('{"type": "response.processed", "response_id": "r"}')["type"] == PROCESSED


def test_a_create_naming_the_last_response_goes_on_from_its_input_and_output() -> None:
    last = Conversation("resp_1", [USER], [CALL])
    message = {
        "type": CREATE,
        "previous_response_id": "resp_1",
        "input": [OUTPUT],
        "generate": True,
        "model": "m",
        "stream": False,
    }
    body = http_request(message, last)
    assert body == {"input": [USER, CALL, OUTPUT], "model": "m", "stream": True}
    assert message["input"] == [OUTPUT]  # the message itself is left as it came


def test_a_create_naming_another_response_keeps_the_name_for_the_http_path_to_refuse() -> None:
    message = {"type": CREATE, "previous_response_id": "resp_0", "input": [OUTPUT]}
    for last in (None, Conversation("resp_1", [USER], [CALL])):
        body = http_request(message, last)
        assert body["previous_response_id"] == "resp_0"
        assert body["input"] == [OUTPUT]


def test_a_string_input_is_one_user_message() -> None:
    last = Conversation("resp_1", [{"type": "message", "role": "user", "content": "hi"}], [CALL])
    body = http_request({"type": CREATE, "previous_response_id": "resp_1", "input": "go"}, last)
    assert [item.get("content") for item in body["input"]] == ["hi", None, "go"]
    with pytest.raises(WsMessageError, match="input must be"):
        http_request({"type": CREATE, "previous_response_id": "resp_1", "input": 3}, last)


def test_a_warmup_answers_an_empty_response_the_next_create_goes_on_from() -> None:
    message = {"type": CREATE, "generate": False, "input": [USER], "model": "m"}
    assert is_warmup(message)
    assert not is_warmup({"type": CREATE, "input": []})
    conversation, events = warmup(http_request(message, None))
    assert [e["type"] for e in events] == ["response.created", "response.completed"]
    completed = events[-1]["response"]
    assert (completed["id"], completed["status"], completed["output"]) == (
        conversation.response_id,
        "completed",
        [],
    )
    follow = {"type": CREATE, "previous_response_id": conversation.response_id, "input": [OUTPUT]}
    assert http_request(follow, conversation)["input"] == [USER, OUTPUT]


def test_an_answer_is_followed_to_its_end() -> None:
    tracker = AnswerTracker({"input": [USER]})
    tracker.observe({"type": "response.created", "response": {"id": "resp_1", "output": []}})
    tracker.observe({"type": "response.output_item.done", "item": CALL})
    assert not tracker.done
    tracker.observe({"type": "response.completed", "response": {"id": "resp_1", "output": []}})
    # The output items the stream carried stand in for an empty ``output``.
    assert tracker.done and tracker.conversation == Conversation("resp_1", [USER], [CALL])
    failed = AnswerTracker({"input": [USER]})
    failed.observe({"type": "error", "status": 500, "error": {"message": "boom"}})
    assert failed.done and failed.conversation is None


def test_an_http_error_becomes_an_error_event_with_its_status() -> None:
    body = b'{"error": {"message": "no such thing", "code": "nope", "type": "x"}}'
    assert error_from_http(400, body) == {
        "type": "error",
        "status": 400,
        "error": {"type": "invalid_request_error", "code": "nope", "message": "no such thing"},
    }
    event = error_from_http(502, b"bad gateway")
    assert (event["status"], event["error"]["type"], event["error"]["message"]) == (
        502,
        "server_error",
        "bad gateway",
    )


ITEM = st.fixed_dictionaries(
    {"type": st.just("message"), "role": st.sampled_from(["user", "assistant"])},
    optional={"content": st.text(max_size=5)},
)
#: A client's turn: the items it adds after the last answer, the answer's output, and whether
#: it sends its whole history again (as after compaction) instead of naming the last response.
TURN = st.tuples(st.lists(ITEM, max_size=3), st.lists(ITEM, max_size=3), st.booleans())


@settings(max_examples=200, deadline=None)
@given(first=st.lists(ITEM, min_size=1, max_size=3), turns=st.lists(TURN, max_size=6))
def test_the_server_sees_each_call_whole_as_the_client_holds_it(
    first: list[dict[str, Any]], turns: list[tuple[list[Any], list[Any], bool]]
) -> None:
    """A client like Codex keeps its whole history; whether it sends all of it or only the tail
    after the response it names, the HTTP request is that history."""
    history = list(first)
    last: Conversation | None = None
    previous_id: str | None = None
    for n, (added, output, whole) in enumerate(turns):
        history += added
        if whole or previous_id is None:
            message: dict[str, Any] = {"type": CREATE, "input": list(history)}
        else:
            message = {"type": CREATE, "previous_response_id": previous_id, "input": added}
        body = http_request(message, last)
        assert body["input"] == history
        tracker = AnswerTracker(body)
        for item in output:
            tracker.observe({"type": "response.output_item.done", "item": item})
        previous_id = f"resp_{n}"
        tracker.observe({"type": "response.completed", "response": {"id": previous_id}})
        last = tracker.conversation
        history += output
