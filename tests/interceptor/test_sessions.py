"""Session attribution, credential stripping and the per-session ledger."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.apis.adapters import adapter_for
from rollstream.interceptor.sessions import SessionLedger, credential_headers, session_of
from rollstream.schemas import ApiKind, PromptTokens, TokenIds, resolve_prompt


@pytest.mark.parametrize(
    ("headers", "path", "expected"),
    [
        (
            {"Authorization": "Bearer sess-1"},
            "/v1/chat/completions",
            ("sess-1", "/v1/chat/completions"),
        ),
        ({"x-api-key": "sess-2"}, "/v1/messages", ("sess-2", "/v1/messages")),
        (
            {"X-Rollstream-Session": "sess-3", "Authorization": "Bearer k"},
            "/v1/responses",
            ("sess-3", "/v1/responses"),
        ),
        ({"Authorization": "Bearer k"}, "/s/sess-4/v1/messages", ("sess-4", "/v1/messages")),
        ({}, "/v1/chat/completions", (None, "/v1/chat/completions")),
        ({"Authorization": "Basic abc"}, "/v1/models", (None, "/v1/models")),
    ],
)
def test_session_sources(
    headers: dict[str, str], path: str, expected: tuple[str | None, str]
) -> None:
    assert session_of(headers, path) == expected


GEMINI_STREAM = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"


@pytest.mark.parametrize(
    ("headers", "path", "expected"),
    [
        (
            {"x-goog-api-key": "sess-g"},
            GEMINI_STREAM + "?alt=sse",
            ("sess-g", GEMINI_STREAM + "?alt=sse"),
        ),
        ({}, GEMINI_STREAM + "?alt=sse&key=sess-k", ("sess-k", GEMINI_STREAM + "?alt=sse")),
        ({}, GEMINI_STREAM + "?key=sess-k&alt=sse", ("sess-k", GEMINI_STREAM + "?alt=sse")),
        ({}, GEMINI_STREAM + "?key=sess%2Fk%20x", ("sess/k x", GEMINI_STREAM)),
        # The key never goes upstream, whichever source names the session.
        ({"x-goog-api-key": "sess-g"}, GEMINI_STREAM + "?key=other", ("sess-g", GEMINI_STREAM)),
        (
            {"Authorization": "Bearer sess-b"},
            GEMINI_STREAM + "?key=k&alt=sse",
            ("sess-b", GEMINI_STREAM + "?alt=sse"),
        ),
        ({}, "/s/sess-s" + GEMINI_STREAM + "?key=k", ("sess-s", GEMINI_STREAM)),
        (
            {"x-api-key": "sess-a", "x-goog-api-key": "sess-g"},
            "/v1/messages",
            ("sess-a", "/v1/messages"),
        ),
        ({}, GEMINI_STREAM + "?key=", (None, GEMINI_STREAM)),
        # Other parameters stay verbatim, however they are encoded.
        ({}, "/v1/x?monkey=1&a=%2F&key=k&keys=2", ("k", "/v1/x?monkey=1&a=%2F&keys=2")),
        ({}, "/v1/x?monkey=1", (None, "/v1/x?monkey=1")),
    ],
)
def test_gemini_api_key_header_and_key_parameter(
    headers: dict[str, str], path: str, expected: tuple[str | None, str]
) -> None:
    assert session_of(headers, path) == expected


def test_every_credential_header_is_stripped() -> None:
    assert {"authorization", "x-api-key", "x-goog-api-key", "x-rollstream-session"} <= set(
        credential_headers()
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/v1/chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("/chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("/v1/messages", ApiKind.ANTHROPIC_MESSAGES),
        ("/v1/messages?beta=true", ApiKind.ANTHROPIC_MESSAGES),
        ("/v1/responses", ApiKind.RESPONSES),
        ("/responses", ApiKind.RESPONSES),
        ("/v1beta/models/gemini-2.5-pro:generateContent", ApiKind.GEMINI),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", ApiKind.GEMINI),
        ("/v1/models/gemini-2.5-pro:generateContent", ApiKind.GEMINI),
        ("/models/gemini-2.5-pro:streamGenerateContent?alt=sse", ApiKind.GEMINI),
    ],
)
def test_adapter_by_path(path: str, kind: ApiKind) -> None:
    adapter = adapter_for(path)
    assert adapter is not None and adapter.kind is kind


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v1/models",
        "/health",
        "/v1/messages/count_tokens",
        "/v1beta/models",
        "/v1beta/models/gemini-2.5-pro:countTokens",
    ],
)
def test_other_paths_are_not_calls(path: str) -> None:
    assert adapter_for(path) is None


def _commit_prompt(
    ledger: SessionLedger, session: str, call_id: str, prompt: TokenIds, completion: TokenIds
) -> PromptTokens:
    update = ledger.begin(session, call_id)
    encoded = ledger.encode_prompt(update, prompt, completion)
    ledger.commit(update)
    return encoded


def test_ledger_numbers_calls_and_delta_encodes_against_recent_ones() -> None:
    ledger = SessionLedger(recent=2)
    system = TokenIds.from_list(range(100))
    first = _commit_prompt(ledger, "s", "c0", system, TokenIds.from_list([500, 501]))
    assert first.is_full
    prompt = system + TokenIds.from_list([500, 501, 7])
    second = _commit_prompt(ledger, "s", "c1", prompt, TokenIds.from_list([9]))
    assert second.base_call_id == "c0" and second.suffix.to_list() == [7]
    contexts = {"c0": system + TokenIds.from_list([500, 501])}
    assert resolve_prompt(second, contexts.get) == prompt
    assert ledger.calls("s") == 2 and ledger.begin("s", "c2").seq == 2
    assert ledger.begin("other", "d0").seq == 0 and ledger.calls("other") == 0


def test_nothing_of_an_uncommitted_call_is_kept_as_a_base() -> None:
    # A record that failed to build (or was left out) never reaches Kafka: a later call
    # delta-encoded against it would name a base nobody can read, and lose its prompt.
    ledger = SessionLedger()
    system = TokenIds.from_list(range(100))
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    dropped = ledger.begin("s", "c0")
    ledger.encode_prompt(dropped, system, TokenIds.from_list([1, 2]))
    ledger.encode_request(dropped, "harness", request)
    # not committed: the record was not handed over
    later = ledger.begin("s", "c1")
    assert later.seq == 0  # the dropped call took no sequence number either
    prompt = ledger.encode_prompt(later, system + TokenIds.from_list([1, 2, 3]), TokenIds())
    rest, base = ledger.encode_request(later, "harness", request)
    assert prompt.is_full and base is None and rest == request


def test_a_part_left_out_of_a_committed_record_is_not_a_base() -> None:
    ledger = SessionLedger()
    system = TokenIds.from_list(range(100))
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    first = ledger.begin("s", "c0")
    ledger.encode_prompt(first, system, TokenIds.from_list([1]))
    ledger.encode_request(first, "harness", request)
    ledger.encode_request(first, "upstream", request)
    first.leave_out("harness", "tokens")
    ledger.commit(first)
    later = ledger.begin("s", "c1")
    assert later.seq == 1
    assert ledger.encode_prompt(later, system, TokenIds()).is_full
    assert ledger.encode_request(later, "harness", request)[1] is None
    upstream_base = ledger.encode_request(later, "upstream", request)[1]
    assert upstream_base is not None and upstream_base.base_call_id == "c0"


def test_ledger_is_bounded_in_sessions() -> None:
    ledger = SessionLedger(recent=1, max_sessions=3)
    for i in range(5):
        ledger.commit(ledger.begin(f"s{i}", f"c{i}"))
    assert ledger.calls("s0") == 0 and ledger.calls("s4") == 1  # the oldest were evicted


def test_the_affinity_key_is_stable_short_and_not_the_session() -> None:
    from rollstream.interceptor.sessions import affinity_key

    key = affinity_key("sess-secret-1")
    assert key == affinity_key("sess-secret-1") != affinity_key("sess-secret-2")
    assert len(key) == 16 and "sess" not in key


def test_the_ledger_delta_encodes_requests_from_digests_and_they_resolve() -> None:
    from rollstream.schemas.requests import resolve_request

    ledger = SessionLedger(recent_requests=2)
    system = "long system prompt " * 50
    whole: dict[str, dict[str, Any]] = {}
    turns: list[dict[str, str]] = []
    for i in range(4):
        turns = [*turns, {"role": "user", "content": f"turn {i}"}]
        request: dict[str, Any] = {"model": "m", "system": system, "messages": list(turns)}
        update = ledger.begin("s", f"c{i}")
        rest, spec = ledger.encode_request(update, "harness", request)
        ledger.commit(update)
        if i == 0:
            assert spec is None
        else:
            assert spec is not None and spec.base_call_id == f"c{i - 1}"
            assert spec.shared_items == i and rest == {"messages": turns[i:]}
        assert resolve_request(rest, spec, whole.get) == request
        whole[f"c{i}"] = request
    other_call = ledger.begin("t", "d0")
    _, other = ledger.encode_request(other_call, "harness", {"model": "m", "messages": turns})
    assert other is None  # never across sessions


def test_a_request_the_harness_sent_before_names_the_latest_call_it_repeats() -> None:
    ledger = SessionLedger()
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    longer = {**request, "messages": [*request["messages"], {"role": "user", "content": "go"}]}
    ids: dict[str, str | None] = {}
    streamed = {**request, "stream": True, "metadata": {"turn": "2"}}
    sent_in_order = [("c0", request), ("c1", longer), ("c2", request), ("c3", streamed)]
    for call_id, sent in sent_in_order:
        update = ledger.begin("s", call_id)
        ledger.encode_request(update, "harness", sent)
        ledger.encode_request(update, "upstream", longer)  # the upstream's do not count
        ids[call_id] = update.repeats
        ledger.commit(update)
    # Streamed or not, other metadata: the same question (Claude Code asks again without
    # streaming, Codex with new client metadata).
    assert ids == {"c0": None, "c1": None, "c2": "c0", "c3": "c2"}
    other = ledger.begin("other-session", "c4")
    ledger.encode_request(other, "harness", request)
    assert other.repeats is None  # never across sessions
