"""Training the tiny policy: its logprobs recomputed over token rows, and a GRPO step in numpy.

The forward pass is the sampler's (see :mod:`rollstream.dev.backend.policies.tiny`): the token at
position ``i`` is predicted from the ``window`` tokens before it, their embeddings decayed with
distance, a tanh layer and the output projection, at the sampling temperature, mixed with the
end-of-turn probability. Recomputed at the weights that sampled a trajectory, the logprobs equal
those the backend reported, so the trainer's importance ratios start at exactly 1.

The step maximises the clipped surrogate of PPO/GRPO, ``min(r A, clip(r, 1-e, 1+e) A)`` with
``r = exp(logp - old_logp)``, averaged over the tokens with loss mask 1, by plain gradient
ascent on all three weight matrices (the decay is fixed).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rollstream.dev.backend.policies.tiny import TinyWeights
from rollstream.errors import SerializationError

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
_CHUNK = 256  # positions per forward/backward chunk: bounds the (chunk, vocab) arrays


def weights_to_bytes(weights: TinyWeights) -> bytes:
    """The weights as an ``.npz`` archive (what ``/admin/weights`` serves and accepts)."""
    buffer = io.BytesIO()
    np.savez(buffer, embed=weights.embed, mix=weights.mix, out=weights.out, decay=weights.decay)
    return buffer.getvalue()


def weights_from_bytes(data: bytes, like: TinyWeights | None = None) -> TinyWeights:
    """Inverse of :func:`weights_to_bytes`; with ``like``, the shapes must match it."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            weights = TinyWeights(
                embed=archive["embed"].astype(np.float32),
                mix=archive["mix"].astype(np.float32),
                out=archive["out"].astype(np.float32),
                decay=archive["decay"].astype(np.float32),
            )
    except (OSError, ValueError, KeyError) as exc:
        raise SerializationError(f"not a tiny-policy weights archive: {exc}") from exc
    if like is not None:
        for name in ("embed", "mix", "out", "decay"):
            got, want = getattr(weights, name).shape, getattr(like, name).shape
            if got != want:
                raise SerializationError(f"weights {name} has shape {got}, expected {want}")
    return weights


def weights_digest(weights: TinyWeights) -> str:
    """A short content hash, to tell weight versions apart in logs and answers."""
    return hashlib.sha256(weights_to_bytes(weights)).hexdigest()[:12]


@dataclass(frozen=True)
class Sampling:
    """How the backend sampled: temperature, end-of-turn id and its mixed-in probability."""

    eos: int
    stop_probability: float
    temperature: float = 1.0


@dataclass(frozen=True)
class Row:
    """One token row: ids, which positions to score (mask 1), old logprobs, advantages."""

    ids: I64
    mask: npt.NDArray[np.bool_]
    old_logprobs: F32
    advantages: F32


def _windows(ids: I64, positions: I64, window: int) -> I64:
    """(n, window) ids before each position, most recent first; -1 where the row begins."""
    offsets = positions[:, None] - 1 - np.arange(window)[None, :]
    out = np.where(offsets >= 0, ids[np.clip(offsets, 0, None)], -1)
    return out.astype(np.int64)


@dataclass
class _Forward:
    """What the backward pass needs from a chunk's forward pass."""

    windows: I64
    context: F32
    hidden: F32
    probs: F32  # the model's softmax at temperature (before the stop mixture)
    targets: I64
    logprobs: F32


def _forward(w: TinyWeights, s: Sampling, ids: I64, positions: I64) -> _Forward:
    windows = _windows(ids, positions, len(w.decay))
    valid = windows >= 0
    gathered = w.embed[np.where(valid, windows, 0)] * valid[..., None]  # (n, W, d)
    context = np.einsum("k,nkd->nd", w.decay, gathered).astype(np.float32)
    hidden = np.tanh(context @ w.mix)
    logits = (hidden @ w.out) * np.float32(1.0 / max(s.temperature, 1e-3))
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    targets = ids[positions]
    p = (1.0 - s.stop_probability) * probs[np.arange(len(targets)), targets]
    p = p + s.stop_probability * (targets == s.eos)
    return _Forward(windows, context, hidden, probs, targets, np.log(p).astype(np.float32))


def token_logprobs(w: TinyWeights, s: Sampling, ids: I64, positions: I64) -> F32:
    """Logprob of ``ids[i]`` given the tokens before it, for each ``i`` in ``positions``."""
    parts = [
        _forward(w, s, ids, positions[i : i + _CHUNK]).logprobs
        for i in range(0, len(positions), _CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


@dataclass(frozen=True)
class StepStats:
    """What one step did: tokens, the surrogate objective, ratios, clipping, update size."""

    tokens: int
    objective: float
    mean_ratio: float
    clipped_fraction: float
    max_abs_logprob_drift: float
    grad_norm: float


def grpo_step(
    w: TinyWeights, s: Sampling, rows: list[Row], lr: float, clip: float = 0.2
) -> tuple[TinyWeights, StepStats]:
    """One gradient-ascent step on the clipped surrogate over every masked token of ``rows``."""
    g_embed = np.zeros_like(w.embed)
    g_mix = np.zeros_like(w.mix)
    g_out = np.zeros_like(w.out)
    # The first token has no context to predict it from: never scored.
    scored = [np.flatnonzero(r.mask[1:]).astype(np.int64) + 1 for r in rows]
    total = sum(len(m) for m in scored)
    objective = ratio_sum = clipped = drift = 0.0
    inv_t = np.float32(1.0 / max(s.temperature, 1e-3))
    for row, masked in zip(rows, scored, strict=True):
        for start in range(0, len(masked), _CHUNK):
            positions = masked[start : start + _CHUNK]
            f = _forward(w, s, row.ids, positions)
            old = row.old_logprobs[positions]
            adv = row.advantages[positions]
            ratio = np.exp(f.logprobs - old)
            bounded = np.clip(ratio, 1 - clip, 1 + clip)
            objective += float(np.minimum(ratio * adv, bounded * adv).sum())
            ratio_sum += float(ratio.sum())
            drift = max(drift, float(np.abs(f.logprobs - old).max(initial=0.0)))
            # d objective / d logp: r A where the unclipped term is the smaller one, else 0.
            active = ratio * adv <= bounded * adv
            clipped += float((~active).sum())
            d_logp = np.where(active, ratio * adv, 0.0).astype(np.float32) / max(total, 1)
            n = len(positions)
            q_t = f.probs[np.arange(n), f.targets]
            p = np.exp(f.logprobs)
            # logp = log((1-s) q_t + s [t = eos]); d logp / d logits_j = (1-s) q_t (δ_jt - q_j) / p
            scale = d_logp * (1.0 - s.stop_probability) * q_t / p
            g_logits = -f.probs * scale[:, None]
            g_logits[np.arange(n), f.targets] += scale
            g_z = g_logits * inv_t
            g_out += f.hidden.T @ g_z
            g_pre = (g_z @ w.out.T) * (1.0 - f.hidden**2)
            g_mix += f.context.T @ g_pre
            g_context = g_pre @ w.mix.T  # (n, d)
            valid = f.windows >= 0
            contrib = w.decay[None, :, None] * g_context[:, None, :]  # (n, W, d)
            np.add.at(g_embed, f.windows[valid], contrib[valid])
    norm = float(np.sqrt(sum(float((g**2).sum()) for g in (g_embed, g_mix, g_out))))
    new = TinyWeights(
        embed=(w.embed + lr * g_embed).astype(np.float32),
        mix=(w.mix + lr * g_mix).astype(np.float32),
        out=(w.out + lr * g_out).astype(np.float32),
        decay=w.decay,
    )
    stats = StepStats(
        tokens=total,
        objective=objective / max(total, 1),
        mean_ratio=ratio_sum / max(total, 1),
        clipped_fraction=clipped / max(total, 1),
        max_abs_logprob_drift=drift,
        grad_norm=norm,
    )
    return new, stats
