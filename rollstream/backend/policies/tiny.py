"""The tiny policy: a small randomly initialised causal LM in numpy that really samples.

The model reads a window of the last ``window`` tokens: their embeddings, decayed with
distance, pass through a tanh layer and an output projection to logits over the whole
vocabulary. Sampling uses the request's temperature; the logprobs reported are those of the
distribution sampled from (after temperature, "processed" logprobs in vLLM's terms), mixed with
a small end-of-turn probability so generations end at a realistic length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rollstream.backend.policies.base import GenerationRequest, Sample
from rollstream.backend.tokenizer import ChatTokenizer

_global_rng = np.random.default_rng()


@dataclass(frozen=True)
class TinyWeights:
    """The parameters, fixed by a seed."""

    embed: npt.NDArray[np.float32]  # (V, d)
    mix: npt.NDArray[np.float32]  # (d, d)
    out: npt.NDArray[np.float32]  # (d, V)
    decay: npt.NDArray[np.float32]  # (window,)

    @classmethod
    def random(cls, vocab: int, dim: int, window: int, seed: int) -> TinyWeights:
        """Weights scaled so logits have a spread of a few nats (peaked, not uniform)."""
        rng = np.random.default_rng(seed)
        return cls(
            embed=rng.standard_normal((vocab, dim), dtype=np.float32),
            mix=(rng.standard_normal((dim, dim), dtype=np.float32) / np.sqrt(dim)).astype(
                np.float32
            ),
            out=(rng.standard_normal((dim, vocab), dtype=np.float32) * (3.0 / np.sqrt(dim))).astype(
                np.float32
            ),
            decay=(0.6 ** np.arange(window)).astype(np.float32),
        )


class TinyGeneration:
    """One generation: the context window, the sampler, the stop mixture."""

    def __init__(self, policy: TinyPolicy, request: GenerationRequest) -> None:
        self.policy = policy
        self.window = list(request.prompt_ids[-policy.window :])
        self.temperature = request.temperature
        self.top_k = request.top_logprobs
        self.rng = np.random.default_rng(request.seed) if request.seed is not None else _global_rng

    def distribution(self) -> npt.NDArray[np.float64]:
        """Next-token probabilities given the current window."""
        w = self.policy.weights
        ids = self.window[::-1]  # most recent first, matching the decay
        context = (w.embed[ids] * w.decay[: len(ids), None]).sum(axis=0)
        logits = np.tanh(context @ w.mix) @ w.out
        temperature = max(self.temperature, 1e-3)
        scaled = logits.astype(np.float64) / temperature
        scaled -= scaled.max()
        probs = np.exp(scaled)
        probs /= probs.sum()
        probs *= 1.0 - self.policy.stop_probability
        probs[self.policy.eos] += self.policy.stop_probability
        return probs

    def next_token(self) -> Sample:
        """Sample (or take the argmax at temperature 0) and report its logprob."""
        probs = self.distribution()
        if self.temperature <= 0:
            token = int(probs.argmax())
        else:
            token = int(self.rng.choice(len(probs), p=probs))
        top: list[tuple[int, float]] = []
        if self.top_k:
            best = np.argpartition(probs, -self.top_k)[-self.top_k :]
            best = best[np.argsort(-probs[best])]
            top = [(int(t), float(np.log(probs[t]))) for t in best]
        self.window = ([*self.window, token])[-self.policy.window :]
        return Sample(token, float(np.log(probs[token])), top)


class TinyPolicy:
    """A real (tiny, random) language model over the tokenizer's vocabulary."""

    name = "tiny"

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        seed: int = 0,
        dim: int = 64,
        window: int = 8,
        mean_length: int = 48,
    ) -> None:
        self.window = window
        self.eos = tokenizer.eos_id
        self.stop_probability = 1.0 / mean_length
        self.weights = TinyWeights.random(tokenizer.vocab_size, dim, window, seed)

    def start(self, request: GenerationRequest) -> TinyGeneration:
        """Begin sampling after ``request.prompt_ids``."""
        return TinyGeneration(self, request)
