"""Training the tiny policy: recomputed logprobs equal the sampler's, the gradient is right."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from rollstream.dev.backend.policies.base import GenerationRequest, Sample
from rollstream.dev.backend.policies.tiny import TinyPolicy, TinyWeights
from rollstream.dev.backend.policies.tiny_train import (
    Row,
    Sampling,
    grpo_step,
    token_logprobs,
    weights_digest,
    weights_from_bytes,
    weights_to_bytes,
)
from rollstream.errors import SerializationError
from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.backend.conftest import BackendFactory


def sampled_row(policy: TinyPolicy, prompt: list[int], n: int, temperature: float) -> Row:
    """Sample ``n`` tokens after ``prompt`` with the backend's own sampler."""
    generation = policy.start(
        GenerationRequest(prompt_ids=prompt, max_tokens=n, seed=7, temperature=temperature)
    )
    samples = [generation.next_token() for _ in range(n)]
    ids = np.array(prompt + [s.token_id for s in samples], dtype=np.int64)
    mask = np.zeros(len(ids), dtype=bool)
    mask[len(prompt) :] = True
    old = np.zeros(len(ids), dtype=np.float32)
    old[len(prompt) :] = [s.logprob for s in samples]
    return Row(ids, mask, old, np.zeros(len(ids), dtype=np.float32))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_equal_what_the_sampler_reported(
    tokenizer: ChatTokenizer, temperature: float
) -> None:
    policy = TinyPolicy(tokenizer, seed=3)
    sampling = Sampling(policy.eos, policy.stop_probability, temperature)
    prompt = tokenizer.encode("write hello.txt please")
    row = sampled_row(policy, prompt, 40, temperature)
    positions = np.flatnonzero(row.mask).astype(np.int64)
    recomputed = token_logprobs(policy.weights, sampling, row.ids, positions)
    np.testing.assert_allclose(recomputed, row.old_logprobs[positions], atol=2e-4)


def small_weights(seed: int = 0) -> TinyWeights:
    return TinyWeights.random(vocab=40, dim=6, window=3, seed=seed)


def objective(w: TinyWeights, s: Sampling, rows: list[Row]) -> float:
    """The step's objective at ``w`` (a step of size 0 reports it without moving)."""
    _, stats = grpo_step(w, s, rows, lr=0.0)
    return stats.objective


def test_the_gradient_matches_finite_differences() -> None:
    w = small_weights()
    s = Sampling(eos=2, stop_probability=0.05, temperature=0.9)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 40, size=30).astype(np.int64)
    mask = np.arange(30) >= 5
    positions = np.arange(30, dtype=np.int64)
    old = np.zeros(30, dtype=np.float32)
    old[1:] = token_logprobs(w, s, ids, positions[1:])  # ratio 1: nothing clipped
    adv = rng.standard_normal(30).astype(np.float32)
    rows = [Row(ids, mask, old, adv)]
    moved, stats = grpo_step(w, s, rows, lr=1.0)
    assert stats.clipped_fraction == 0 and stats.mean_ratio == pytest.approx(1.0, abs=1e-4)
    for name in ("out", "mix", "embed"):
        grad = getattr(moved, name).astype(np.float64) - getattr(w, name)
        index = np.unravel_index(np.argmax(np.abs(grad)), grad.shape)
        eps = 1e-2
        plus, minus = (getattr(w, name).copy() for _ in range(2))
        plus[index] += eps
        minus[index] -= eps
        numeric = (
            objective(TinyWeights(**{**vars(w), name: plus}), s, rows)
            - objective(TinyWeights(**{**vars(w), name: minus}), s, rows)
        ) / (2 * eps)
        assert grad[index] == pytest.approx(numeric, rel=0.05), name


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_step_moves_the_logprob_of_rewarded_tokens_the_advantage_way(
    tokenizer: ChatTokenizer, sign: float
) -> None:
    policy = TinyPolicy(tokenizer, seed=5)
    s = Sampling(policy.eos, policy.stop_probability)
    row = sampled_row(policy, tokenizer.encode("hello"), 30, 1.0)
    row = Row(row.ids, row.mask, row.old_logprobs, np.full(len(row.ids), sign, np.float32))
    positions = np.flatnonzero(row.mask).astype(np.int64)
    before = token_logprobs(policy.weights, s, row.ids, positions).mean()
    moved, stats = grpo_step(policy.weights, s, [row], lr=0.5)
    after = token_logprobs(moved, s, row.ids, positions).mean()
    assert stats.tokens == 30 and stats.grad_norm > 0
    assert sign * (after - before) > 0


def test_clipping_stops_the_gradient_past_the_trust_region() -> None:
    w = small_weights()
    s = Sampling(eos=2, stop_probability=0.05)
    ids = np.arange(10, dtype=np.int64)
    mask = np.ones(10, dtype=bool)
    old = np.full(10, -50.0, dtype=np.float32)  # ratio huge: every positive-advantage term clipped
    rows = [Row(ids, mask, old, np.ones(10, dtype=np.float32))]
    moved, stats = grpo_step(w, s, rows, lr=1.0)
    assert stats.clipped_fraction == 1.0 and stats.grad_norm == 0.0
    assert np.array_equal(moved.out, w.out)


def test_weights_round_trip_and_bad_archives_are_refused() -> None:
    w = small_weights()
    back = weights_from_bytes(weights_to_bytes(w), like=w)
    assert all(np.array_equal(getattr(back, n), getattr(w, n)) for n in vars(w))
    assert weights_digest(back) == weights_digest(w) != weights_digest(small_weights(1))
    with pytest.raises(SerializationError, match="shape"):
        weights_from_bytes(weights_to_bytes(TinyWeights.random(41, 6, 3, 0)), like=w)
    with pytest.raises(SerializationError, match="archive"):
        weights_from_bytes(b"not an npz")


async def test_the_backend_serves_and_loads_tiny_weights(backend_factory: BackendFactory) -> None:
    client = await backend_factory(policy="tiny")
    response = await client.get("/admin/weights")
    assert response.status == 200
    weights = weights_from_bytes(await response.read())
    body: dict[str, Any] = {
        "model": "rollstream-tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
    }
    first = await (await client.post("/v1/chat/completions", json=body)).json()
    changed = TinyWeights(**{**vars(weights), "out": -weights.out})
    loaded = await client.post("/admin/weights", data=io.BytesIO(weights_to_bytes(changed)))
    assert (await loaded.json()) == {"loaded": True, "digest": weights_digest(changed)}
    second = await (await client.post("/v1/chat/completions", json=body)).json()
    assert first["choices"][0]["logprobs"] != second["choices"][0]["logprobs"]
    bad = await client.post("/admin/weights", data=b"junk")
    assert bad.status == 400 and "archive" in (await bad.json())["error"]["message"]


async def test_policies_without_weights_answer_409(
    backend_factory: BackendFactory, scenario_file: Any
) -> None:
    client = await backend_factory(policy="scripted", scenarios=scenario_file)
    response = await client.get("/admin/weights")
    assert response.status == 409
    assert "scripted" in (await response.json())["error"]["message"]


def test_scripted_tokens_with_tiny_logprobs_are_recomputed_exactly(
    tokenizer: ChatTokenizer, scenario_file: Any
) -> None:
    from rollstream.dev.backend.policies.scenarios import load_scenarios
    from rollstream.dev.backend.policies.scripted import ScriptedPolicy

    tiny = TinyPolicy(tokenizer, seed=2)
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file), scorer=tiny)
    prompt = tokenizer.encode("make hello.txt")
    request = GenerationRequest(
        prompt_ids=prompt,
        max_tokens=64,
        messages=[{"role": "user", "content": "make hello.txt"}],
        tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        session="s@solve",
        temperature=0.3,  # ignored by the script, and so by its scorer
    )
    generation = policy.start(request)
    samples: list[Sample] = []
    while not samples or samples[-1].token_id != tiny.eos:
        samples.append(generation.next_token())
    unscored = ScriptedPolicy(tokenizer, load_scenarios(scenario_file)).start(request)
    assert [s.token_id for s in samples] == [unscored.next_token().token_id for _ in samples]
    ids = np.array(prompt + [s.token_id for s in samples], dtype=np.int64)
    positions = np.arange(len(prompt), len(ids), dtype=np.int64)
    recomputed = token_logprobs(
        tiny.weights, Sampling(tiny.eos, tiny.stop_probability), ids, positions
    )
    np.testing.assert_allclose(recomputed, [s.logprob for s in samples], atol=2e-4)


async def test_the_scripted_policy_with_a_tiny_scorer_serves_its_weights(
    backend_factory: BackendFactory, scenario_file: Any
) -> None:
    client = await backend_factory(
        policy="scripted", scenarios=scenario_file, scripted_logprobs="tiny"
    )
    response = await client.get("/admin/weights")
    assert response.status == 200 and response.headers["x-tiny-eos"].isdigit()
