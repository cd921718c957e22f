"""Request deltas: a request is rebuilt exactly from its delta and its base, for any request."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.errors import SerializationError
from rollstream.schemas.requests import (
    RequestBase,
    best_delta,
    best_delta_by_digest,
    delta_request,
    digest_request,
    resolve_request,
)

message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=6)}
)
requests = st.fixed_dictionaries(
    {"model": st.sampled_from(["a", "b"])},
    optional={
        "messages": st.lists(message, max_size=6),
        "input": st.lists(message, max_size=6),
        "system": st.sampled_from(["sys", "other"]),
        "tools": st.sampled_from([[], [{"name": "shell"}]]),
        "stream": st.booleans(),
    },
)


@settings(max_examples=200, deadline=None)
@given(base=requests, request=requests, extra=st.lists(message, max_size=3))
def test_any_request_resolves_from_its_delta(
    base: dict[str, Any], request: dict[str, Any], extra: list[dict[str, Any]]
) -> None:
    if "messages" in base and "messages" in request:
        request["messages"] = base["messages"] + extra  # the usual case: appended turns
    rest, spec = best_delta(request, [("c1", base)])
    assert resolve_request(rest, spec, {"c1": base}.get) == request
    # The same from digests alone (what the interceptor remembers).
    rest, spec = best_delta_by_digest(
        request, digest_request(request), [("c1", digest_request(base))]
    )
    assert resolve_request(rest, spec, {"c1": base}.get) == request


def test_a_growing_conversation_stores_only_the_new_turns_and_the_changed_fields() -> None:
    system = "a long system prompt " * 100
    base = {"model": "m", "system": system, "messages": [{"role": "user", "content": "q"}]}
    request = {
        "model": "m",
        "system": system,
        "stream": True,
        "messages": [*base["messages"], {"role": "assistant", "content": "a"}],
    }
    rest, spec = delta_request(request, "c1", base) or ({}, None)
    assert spec == RequestBase(
        base_call_id="c1", list_key="messages", shared_items=1, unchanged=["model", "system"]
    )
    assert rest == {"stream": True, "messages": [{"role": "assistant", "content": "a"}]}
    assert delta_request({"model": "x", "messages": []}, "c1", base) is None


def test_the_base_sharing_most_wins() -> None:
    turns = [{"role": "user", "content": str(i)} for i in range(4)]
    request = {"messages": turns}
    rest, spec = best_delta(
        request, [("short", {"messages": turns[:1]}), ("long", {"messages": turns[:3]})]
    )
    assert spec is not None and spec.base_call_id == "long" and rest["messages"] == turns[3:]
    assert best_delta(request, []) == (request, None)


def test_a_missing_or_short_base_is_an_error() -> None:
    spec = RequestBase(base_call_id="c1", list_key="messages", shared_items=2, unchanged=["system"])
    with pytest.raises(SerializationError, match="unknown"):
        resolve_request({}, spec, lambda _: None)
    with pytest.raises(SerializationError, match="no field"):
        resolve_request({}, spec, {"c1": {"messages": [1, 2]}}.get)
    with pytest.raises(SerializationError, match="fewer"):
        resolve_request({}, spec, {"c1": {"system": "s", "messages": [1]}}.get)


def _call(
    call_id: str,
    seq: int,
    request: dict[str, Any],
    base: dict[str, Any] | None,
    base_id: str | None,
) -> Any:
    from rollstream.schemas import ApiKind, CallRecord, CallTimings, compress_json
    from tests.schemas.samples import T0

    rest, spec = (
        (request, None)
        if base is None or base_id is None
        else best_delta(request, [(base_id, base)])
    )
    return CallRecord(
        call_id=call_id,
        session_id="s",
        seq=seq,
        api=ApiKind.CHAT_COMPLETIONS,
        model="m",
        harness_request=compress_json(rest),
        upstream_request=compress_json(rest),
        harness_request_base=spec,
        upstream_request_base=spec,
        timings=CallTimings(started_at=T0),
    )


def test_a_session_resolves_a_chain_of_deltas_and_refuses_loops() -> None:
    from rollstream.schemas.calls import SessionRequests

    turns = [{"role": "user", "content": str(i)} for i in range(3)]
    first = {"model": "m", "system": "s" * 50, "messages": turns[:1]}
    second = {**first, "messages": turns[:2]}
    third = {**first, "messages": turns}
    calls = [
        _call("c1", 0, first, None, None),
        _call("c2", 1, second, first, "c1"),
        _call("c3", 2, third, second, "c2"),
    ]
    requests = SessionRequests(reversed(calls))
    assert requests.harness("c3") == third and requests.upstream("c2") == second
    assert requests.harness("unknown") is None
    looped = calls[0].model_copy(
        update={"harness_request_base": RequestBase(base_call_id="c1", unchanged=["model"])}
    )
    with pytest.raises(SerializationError, match="loop"):
        SessionRequests([looped]).harness("c1")
    with pytest.raises(SerializationError, match="unknown"):
        SessionRequests(calls[1:]).harness("c3")  # its chain needs c1
