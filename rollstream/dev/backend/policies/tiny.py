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

from rollstream.dev.backend.policies.base import GenerationRequest, Sample
from rollstream.models.tokenizer import ChatTokenizer

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


_BLOCK = 64


def _sample(probs: npt.NDArray[np.float32], u: float) -> int:
    """Inverse-CDF sampling in two levels: pick a block of 64 by its mass, then a token in it.

    Equivalent to one cumulative sum over the vocabulary, at a fraction of its cost.
    """
    n = len(probs)
    padded = np.zeros(-(-n // _BLOCK) * _BLOCK, dtype=np.float32)
    padded[:n] = probs
    blocks = padded.reshape(-1, _BLOCK)
    block_cdf = np.cumsum(blocks.sum(axis=1, dtype=np.float64))
    target = u * block_cdf[-1]
    block = min(int(np.searchsorted(block_cdf, target, side="right")), len(block_cdf) - 1)
    below = block_cdf[block - 1] if block else 0.0
    inner = np.cumsum(blocks[block], dtype=np.float64)
    index = int(np.searchsorted(inner, target - below, side="right"))
    token = block * _BLOCK + min(index, _BLOCK - 1)
    # Rounding can land on padding or a zero-probability entry: step back to a real token.
    while token >= n or probs[token] == 0:
        token -= 1
    return token


class TinyGeneration:
    """One generation: the context window, the sampler, the stop mixture."""

    def __init__(self, policy: TinyPolicy, request: GenerationRequest) -> None:
        self.policy = policy
        self.window = list(request.prompt_ids[-policy.window :])
        self.temperature = request.temperature
        self.top_k = request.top_logprobs
        self.rng = np.random.default_rng(request.seed) if request.seed is not None else _global_rng

    def distribution(self) -> npt.NDArray[np.float32]:
        """Next-token probabilities given the current window."""
        w = self.policy.weights
        ids = self.window[::-1]  # most recent first, matching the decay
        context = w.decay[: len(ids)] @ w.embed[ids]
        logits = np.tanh(context @ w.mix) @ w.out
        logits *= np.float32(1.0 / max(self.temperature, 1e-3))
        logits -= logits.max()
        probs = np.exp(logits, out=logits)
        probs *= np.float32((1.0 - self.policy.stop_probability) / probs.sum())
        probs[self.policy.eos] += np.float32(self.policy.stop_probability)
        return probs

    def next_token(self) -> Sample:
        """Sample (or take the argmax at temperature 0) and report its logprob."""
        probs = self.distribution()
        token = int(probs.argmax()) if self.temperature <= 0 else _sample(probs, self.rng.random())
        return self._take(probs, token)

    def force(self, token: int) -> Sample:
        """Take ``token`` whatever the distribution says (teacher forcing); its logprob."""
        return self._take(self.distribution(), token)

    def _take(self, probs: npt.NDArray[np.float32], token: int) -> Sample:
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
        dim: int = 32,
        window: int = 8,
        mean_length: int = 48,
    ) -> None:
        self.window = window
        self.eos = tokenizer.eos_id
        self.stop_probability = 1.0 / mean_length
        #: Replaced whole by a trainer through the backend's /admin/weights.
        self.weights = TinyWeights.random(tokenizer.vocab_size, dim, window, seed)

    def start(self, request: GenerationRequest) -> TinyGeneration:
        """Begin sampling after ``request.prompt_ids``."""
        return TinyGeneration(self, request)
