"""Every call ends in one record that fits, and only what reached the publisher is a delta base.

Through the addon's hooks (mitmproxy test flows, no network): an upstream answer the record
cannot hold (a negative token id), a request over the record budget, and a weight sync while a
call runs.
"""

from __future__ import annotations

import base64
import json
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.test import tflow

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.recorder import NOT_BUILT, TOO_LARGE, CallRecorder
from rollstream.interceptor.recording import CallState
from rollstream.interceptor.sessions import SessionLedger
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.schemas import RECORD_BUDGET_BYTES, ApiKind, CallStatus, TokenIds
from tests.interceptor.published import Published

SYSTEM = list(range(100, 200))  # the prompt every call of the session starts with


def _flow(session: str, content: str) -> http.HTTPFlow:
    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    headers = http.Headers([(b"authorization", f"Bearer {session}".encode())])
    request = http.Request.make(
        "POST", "http://127.0.0.1:8100/v1/chat/completions", json.dumps(body).encode(), headers
    )
    return tflow.tflow(req=request)


def _answer(prompt: list[int], completion: list[int], finish: Any = "stop") -> http.Response:
    """A vLLM answer with the prompt's and the completion's token ids and logprobs."""
    answer: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "prompt_token_ids": prompt,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": finish,
                "token_ids": completion,
                "logprobs": {
                    "content": [{"token": "t", "logprob": -0.5, "bytes": []} for _ in completion]
                },
            }
        ],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
    }
    return http.Response.make(200, json.dumps(answer), {"content-type": "application/json"})


async def _call(
    addon: RollstreamAddon,
    session: str,
    content: str,
    prompt: list[int],
    completion: list[int],
    finish: Any = "stop",
) -> http.HTTPFlow:
    flow = _flow(session, content)
    addon.sessions.register(session, None)  # as its launcher does: the key is the session
    await addon.request(flow)
    flow.response = _answer(prompt, completion, finish)
    addon.response(flow)
    return flow


@pytest.mark.parametrize(
    ("completion", "finish", "error"),
    [
        ([1, 7], {"type": "stop"}, "ValidationError"),  # found once the ledger was consulted
        ([-1, 7], "stop", "ValueError"),  # a token id that cannot be packed
    ],
    ids=["finish-reason-object", "negative-token-id"],
)
async def test_a_record_that_cannot_be_built_is_recorded_reduced_and_is_nobodys_base(
    completion: list[int], finish: Any, error: str
) -> None:
    published = Published()
    addon = RollstreamAddon(InterceptorSettings(), published)
    # An upstream answer the record cannot hold: the whole record of this call cannot be built.
    broken = await _call(addon, "s", "first", SYSTEM, completion, finish)
    assert broken.response is not None and broken.response.status_code == 200  # answered
    await _call(addon, "s", "second", [*SYSTEM, 1, 7, 2], [8])
    await _call(addon, "s", "third", [*SYSTEM, 1, 7, 2, 8, 3], [9])

    first, second, third = published.records
    assert [r.seq for r in published.records] == [0, 1, 2]
    assert first.status is CallStatus.OK and first.prompt is None
    assert first.harness_request is None and first.upstream_request is None
    parts = {p.part: p.reason for p in first.left_out}
    assert set(parts) == {"harness_request", "upstream_request", "response", "tokens"}
    assert all(r.startswith(f"{NOT_BUILT}: {error}") for r in parts.values()), parts
    assert addon.recorder.counts.not_built == 1 and addon.recorder.counts.lost == 0
    assert addon.recorder.counts.recorded == 3 and addon.ledger.calls("s") == 3

    # The later calls never name the unbuilt call as a base: their prompts and requests
    # resolve from what reached the publisher.
    assert second.prompt is not None and second.prompt.base_call_id is None
    assert second.harness_request_base is None
    assert third.prompt is not None and third.prompt.base_call_id == second.call_id
    resolved = {c.call_id: c for c in resolve_calls(published.records)}
    assert resolved[third.call_id].prompt == TokenIds.from_list([*SYSTEM, 1, 7, 2, 8, 3])
    assert resolved[second.call_id].missing_reason is None
    requests = resolved[third.call_id].requests
    assert requests is not None
    assert requests.harness(third.call_id)["messages"][0]["content"] == "third"


async def test_a_record_over_the_budget_is_recorded_without_its_bulk_and_flagged() -> None:
    published = Published()
    addon = RollstreamAddon(InterceptorSettings(), published)
    await _call(addon, "s", "small", SYSTEM, [5])
    # 20 MiB of incompressible text: the harness's and the upstream's request, 15 MiB each
    # compressed, cannot travel in one record together.
    bulk = base64.b64encode(os.urandom(15 * 2**20)).decode()
    flow = await _call(addon, "s", bulk, [*SYSTEM, 5, 6], [7])
    assert flow.response is not None and flow.response.status_code == 200  # answered as usual
    await _call(addon, "s", "after", [*SYSTEM, 5, 6, 7, 8], [9])

    small, big, after = published.records
    assert max(published.sizes) <= RECORD_BUDGET_BYTES
    assert [r.seq for r in published.records] == [0, 1, 2]
    assert big.left_out and {p.reason for p in big.left_out} == {TOO_LARGE}
    for part in big.left_out:
        assert getattr(big, part.part) is None and part.size > 10 * 2**20
        assert len(part.sha256) == 64
    kept = [p for p in ("harness_request", "upstream_request") if getattr(big, p) is not None]
    assert len(kept) == 1  # one of the two fits once the other is left out
    assert big.prompt is not None and big.prompt.base_call_id == small.call_id
    assert addon.recorder.counts.too_large == 1

    # A left-out request is nobody's base; a kept one (and the tokens) may be.
    left = big.left_out[0].part
    after_base = after.harness_request_base if left == "harness_request" else None
    assert after_base is None or after_base.base_call_id != big.call_id
    assert after.prompt is not None and after.prompt.base_call_id == big.call_id
    resolved = {c.call_id: c for c in resolve_calls(published.records)}
    assert resolved[after.call_id].prompt == TokenIds.from_list([*SYSTEM, 5, 6, 7, 8])
    requests = resolved[after.call_id].requests
    assert requests is not None
    assert requests.harness(after.call_id)["messages"][0]["content"] == "after"
    assert requests.upstream(after.call_id)["messages"][0]["content"] == "after"


async def test_a_call_keeps_the_policy_version_it_was_sent_with() -> None:
    published = Published()
    addon = RollstreamAddon(InterceptorSettings(policy_version=3), published)
    flow = _flow("s", "hi")
    await addon.request(flow)  # goes upstream under version 3
    addon.policy_version = 4  # a weight sync finishes while the call runs
    flow.response = _answer(SYSTEM, [5])
    addon.response(flow)
    unsent = _flow("s", "")
    unsent.request.content = b"not json"  # refused before going upstream: the version now
    await addon.request(unsent)
    assert [r.policy_version for r in published.records] == [3, 4]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40_000), min_size=3, max_size=3),
    tokens=st.integers(0, 6_000),
    budget=st.integers(2_000, 60_000),
    seed=st.integers(0, 2**32),
)
def test_every_record_fits_and_only_kept_parts_become_bases(
    sizes: list[int], tokens: int, budget: int, seed: int
) -> None:
    rng = random.Random(seed)
    published = Published()
    recorder = CallRecorder(SessionLedger(), published, budget=budget)

    def noise(n: int) -> str:  # incompressible text
        return base64.b64encode(rng.randbytes(n)).decode()

    harness_size, upstream_size, answer_size = sizes
    state = CallState(
        ApiKind.CHAT_COMPLETIONS, "s", {"messages": [{"content": noise(harness_size)}]}
    )
    state.upstream_request = {"messages": [{"content": noise(upstream_size)}]}
    state.response = {"choices": [{"message": {"content": noise(answer_size)}}]}
    state.capture.set_prompt_token_ids([rng.randrange(2**32) for _ in range(tokens)])
    state.capture.completion_token_ids = [1, 2]
    state.capture.saw_token_ids = True
    record = recorder.record(state, "m", 0)

    assert record is not None and published.records == [record]
    assert published.sizes[0] <= budget
    sizes_left = [p.size for p in record.left_out]
    assert sizes_left == sorted(sizes_left, reverse=True)  # the largest parts go first
    left = {p.part for p in record.left_out}
    assert (record.harness_request is None) == ("harness_request" in left)
    assert (record.upstream_request is None) == ("upstream_request" in left)
    assert (record.response is None) == ("response" in left)
    assert (record.prompt is None) == ("tokens" in left)
    # The same call again: it names the first as a base for exactly the parts it kept.
    again = CallState(ApiKind.CHAT_COMPLETIONS, "s", state.harness_request)
    again.upstream_request = state.upstream_request
    second = recorder.record(again, "m", 0)
    assert second is not None
    assert {p.reason for p in [*record.left_out, *second.left_out]} <= {TOO_LARGE}
    assert recorder.counts.too_large == bool(record.left_out) + bool(second.left_out)
    for part, base in (
        ("harness_request", second.harness_request_base),
        ("upstream_request", second.upstream_request_base),
    ):
        named = base is not None and base.base_call_id == record.call_id
        assert not (part in left and named)
