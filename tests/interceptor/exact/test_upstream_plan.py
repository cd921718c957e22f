"""Which calls exact-context mode sends as token ids, and the reasons recorded when it does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.exact.sessions import FIRST_CALL
from rollstream.interceptor.exact.upstream import ExactUpstream
from rollstream.interceptor.exact.verify import Verdict
from rollstream.interceptor.recording import CallState
from rollstream.interceptor.registry import RegistryError, SessionRegistry
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import ApiKind, ContextMode

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _upstream(**overrides: Any) -> ExactUpstream:
    """Exact context as check_upstream leaves it after an upstream that agrees with it."""
    exact = ExactUpstream(InterceptorSettings(port=0, admin_port=0, **overrides))
    exact.verdict = Verdict("verified")
    return exact


def test_the_session_header_overrides_the_deployment() -> None:
    exact = _upstream(context="exact", tokenizer=default_tokenizer_dir())
    assert exact.mode(None) == "exact" and exact.mode(" Ordinary ") == "ordinary"
    assert exact.mode("nonsense") == "exact"
    assert exact.prepare("s", CHAT, "ordinary") == (None, None)
    plain = _upstream(tokenizer=default_tokenizer_dir())
    assert plain.prepare("s", CHAT, None) == (None, None)
    info, body = plain.prepare("s", CHAT, "exact")
    assert info is not None and info.note == FIRST_CALL and body is None


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"n": 2}, "n > 1"),
        ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
    ],
)
def test_what_completions_cannot_express_falls_back(extra: dict[str, Any], reason: str) -> None:
    info, body = _upstream(context="exact", tokenizer=default_tokenizer_dir()).prepare(
        "s", CHAT | extra, None
    )
    assert body is None and info is not None and info.mode is ContextMode.ORDINARY
    assert reason in info.note


def test_no_tokenizer_sglang_or_an_unsplittable_template_refuse_the_mode(tmp_path: Path) -> None:
    assert "no tokenizer" in _upstream(context="exact").unavailable
    assert "sglang" in _upstream(context="exact", backend="sglang").unavailable
    # A template that re-renders earlier turns (here: it numbers every turn from the end).
    folder = tmp_path / "tok"
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    tokenizer._tok.save_pretrained(str(folder))
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }} {{ messages|length - loop.index }}\n"
        "{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (folder / "chat_template.jinja").write_text(template)
    refused = _upstream(context="exact", tokenizer=folder)
    assert refused.context is None and "refused" in refused.unavailable
    info, body = refused.prepare("s", CHAT, None)
    assert body is None and info is not None and "refused" in info.note


def _answered(exact: ExactUpstream, session: str, chat: dict[str, Any], asked: bool) -> None:
    """A call of ``session`` answered with tokens, exact context asked for or not."""
    state = CallState(ApiKind.CHAT_COMPLETIONS, session, {})
    state.context, _ = exact.prepare(session, chat, "exact" if asked else None)
    state.upstream_request = chat
    state.capture.set_prompt_token_ids([1, 2])
    state.capture.add_chunk(
        {"choices": [{"message": {"content": "x"}, "token_ids": [3, 2], "finish_reason": "stop"}]}
    )
    exact.remember(state)


def test_a_template_failure_falls_back_and_sessions_are_kept_only_if_they_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact = _upstream(tokenizer=default_tokenizer_dir())  # per call, by header
    assert exact.context is not None
    _answered(exact, "quiet", CHAT, asked=False)
    assert "quiet" not in exact.context  # never asked: nothing kept for it
    _answered(exact, "asks", CHAT, asked=True)
    # A call without the header in between is still kept: the thread does not lose a turn.
    follow = CHAT | {"messages": [*CHAT["messages"], {"role": "assistant", "content": "x"}]}
    follow["messages"].append({"role": "user", "content": "more"})
    _answered(exact, "asks", follow, asked=False)
    later = follow | {"messages": [*follow["messages"], {"role": "assistant", "content": "x"}]}
    later["messages"].append({"role": "user", "content": "again"})
    info, body = exact.prepare("asks", later | {"top_logprobs": 5}, "exact")
    assert info is not None and info.mode is ContextMode.EXACT and body is not None
    assert body["logprobs"] == 5  # the harness's top-k when larger than the setting's
    exact.forget("asks")
    assert "asks" not in exact.context

    def broken(*_: object) -> None:
        raise ValueError("template exploded")

    _answered(exact, "asks", CHAT, asked=True)
    monkeypatch.setattr(exact.context, "plan", broken)
    info, body = exact.prepare("asks", follow, "exact")
    assert body is None and info is not None and info.mode is ContextMode.ORDINARY
    assert "template exploded" in info.note


def test_failed_or_tokenless_calls_are_not_remembered() -> None:
    exact = _upstream(context="exact", tokenizer=default_tokenizer_dir())
    state = CallState(ApiKind.CHAT_COMPLETIONS, "s", {})
    state.context, _ = exact.prepare("s", CHAT, None)
    state.upstream_request = CHAT
    exact.remember(state)  # no tokens captured
    assert exact.context is not None and len(exact.context) == 0
    state.capture.set_prompt_token_ids([1, 2])
    state.capture.add_chunk(
        {"choices": [{"message": {"content": "x"}, "token_ids": [3], "finish_reason": "stop"}]}
    )
    state.fail("upstream_http", "boom", 500, True)
    exact.remember(state)
    assert len(exact.context) == 0
    state.error = None
    exact.remember(state)
    assert len(exact.context) == 1


def test_a_registered_choice_sits_between_the_header_and_the_deployment(
    tmp_path: Path,
) -> None:
    registry = SessionRegistry(tmp_path / "sessions.txt")
    exact = ExactUpstream(
        InterceptorSettings(port=0, admin_port=0, tokenizer=default_tokenizer_dir()),
        registry.context,
    )
    registry.register("s", "exact")
    assert exact.mode(None, "s") == "exact" and exact.mode(None, "other") == "ordinary"
    assert exact.mode("ordinary", "s") == "ordinary"  # the call's header wins
    # An interceptor restarted on the same state keeps the session's mode.
    assert SessionRegistry(tmp_path / "sessions.txt").context("s") == "exact"
    with pytest.raises(RegistryError, match="ordinary, exact"):
        registry.register("t", "sometimes")
    with pytest.raises(RegistryError, match="tabs"):  # the journal's separator
        registry.register("a\tb")
    registry.forget("s")
    assert exact.mode(None, "s") == "ordinary"
    exact.close()


def test_a_completion_the_family_cannot_parse_is_content_and_noted() -> None:
    from rollstream.apis.adapters import ADAPTER_BY_KIND
    from rollstream.apis.chat import Asked
    from rollstream.interceptor.streaming import stream_function
    from rollstream.models.families import FAMILIES
    from rollstream.models.vocabularies import vocabulary_dir
    from rollstream.schemas import ContextInfo

    exact = _upstream(
        context="exact",
        family="qwen3-instruct",
        tokenizer=vocabulary_dir(FAMILIES["qwen3-instruct"].vocabulary),
    )
    assert exact.context is not None
    family = exact.context.family
    broken = '<tool_call>\n{"name": "bash", "arguments": {oops\n</tool_call>'
    ids = [*family.tokenizer.encode(broken), family.end_of_turn_id]
    state = CallState(ApiKind.CHAT_COMPLETIONS, "s", {})
    state.context = ContextInfo(mode=ContextMode.EXACT)
    state.upstream_request = CHAT
    whole = {"choices": [{"text": broken, "token_ids": ids, "finish_reason": "stop"}]}
    message = exact.chat_answer(whole, state)["choices"][0]["message"]
    assert message["content"] == broken and "tool_calls" not in message
    assert state.context is not None and "tool call not parsed" in state.context.note
    # Streamed through the per-read function: the same text reaches the harness, and the same
    # note is recorded.
    body = {"model": "m", "messages": [], "stream": True}
    streamed = CallState(ApiKind.CHAT_COMPLETIONS, "s", body, stream=True, asked=Asked())
    streamed.context = ContextInfo(mode=ContextMode.EXACT)
    streamed.upstream_request = CHAT
    read = stream_function(
        streamed,
        ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS].stream(body, streamed.asked),
        exact.stream(streamed),
    )
    chunks = [
        {"choices": [{"text": "", "token_ids": [t], "finish_reason": None}]} for t in ids[:-1]
    ]
    chunks.append({"choices": [{"text": "", "token_ids": ids[-1:], "finish_reason": "stop"}]})
    sse = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    out = b"".join([*read(sse + b"data: [DONE]\n\n"), *read(b"")])
    text = "".join(
        event["choices"][0]["delta"].get("content") or ""
        for line in out.split(b"\n\n")
        if line.startswith(b"data: {")
        for event in [json.loads(line[6:])]
        if event.get("choices")
    )
    assert text == broken
    assert streamed.context is not None and "tool call not parsed" in streamed.context.note


def test_exact_context_finds_the_family_from_the_upstream_model() -> None:
    exact = _upstream(context="exact", upstream_model="Qwen/Qwen3-4B-Instruct-2507")
    assert exact.context is not None and exact.context.family.name == "qwen3-instruct"
    unknown = _upstream(context="exact", upstream_model="my-model")
    assert unknown.context is None and "no tokenizer" in unknown.unavailable


@pytest.mark.parametrize("family", ["glm-4.5", "kimi-k2"])
def test_a_stand_in_vocabulary_is_never_served_to_a_real_model(family: str) -> None:
    # No registry ships these vocabularies; the cache's stand-in has made-up ids.
    exact = _upstream(context="exact", family=family)
    assert exact.context is None and "stand-in vocabulary" in exact.unavailable
    assert "--tokenizer" in exact.unavailable
