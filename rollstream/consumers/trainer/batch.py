"""Turning groups of scored trajectories into training arrays (numpy; torch on request).

One row per segment of every trajectory. Advantages are GRPO's group-normalised rewards,
``(reward - mean) / (std + eps)`` over the trajectories of the same (task_id, group_id) in the
input, population std; trajectories whose reward is None (the evaluator failed, or the record
came from the trajectories topic) are left out of the mean and std and get advantage 0, so they
carry no gradient. A trajectory's advantage is broadcast to its tokens with loss mask 1 and is 0
elsewhere.

A sampled token whose logprob is missing (the server returned none for its call: the
reconstructor writes NaN there) has ``old_logprobs`` 0.0 and ``logprob_mask`` 0, and is
counted in ``missing_logprobs``: an importance ratio over it would treat it as sampled with
probability 1, so mask the ratio with ``logprob_mask``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rollstream.consumers.trainer.groups import Group, RecordBatch
from rollstream.errors import ConfigurationError
from rollstream.schemas import Scored

Layout = Literal["padded", "packed"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


class TorchUnavailableError(ConfigurationError, ImportError):
    """``Batch.to_torch()`` without torch installed."""


@dataclass(frozen=True)
class Batch:
    """Training arrays for a set of trajectories.

    ``padded``: arrays of shape (rows, longest row), right-padded with ``pad_id`` (attention
    and loss mask 0, position 0, advantages and logprobs 0). ``packed``: every row concatenated
    into one sequence of shape (1, total tokens), ``position_ids`` restarting at 0 for each row
    and ``cu_seqlens`` (int32, rows + 1) the rows' boundaries, as flash-attention's varlen
    kernels take them; ``cu_seqlens`` is None for the padded layout.

    ``logprob_mask`` (float32, like ``loss_mask``) is 1 where ``old_logprobs`` holds the
    logprob the token was sampled with, and 0 on context, padding and sampled tokens whose
    logprob is missing (or not finite), where ``old_logprobs`` is 0.0; ``missing_logprobs``
    counts those sampled tokens.
    """

    layout: Layout
    input_ids: IntArray
    attention_mask: IntArray
    position_ids: IntArray
    loss_mask: FloatArray
    old_logprobs: FloatArray
    advantages: FloatArray
    cu_seqlens: npt.NDArray[np.int32] | None
    max_seqlen: int
    row_lengths: IntArray
    row_trajectory: IntArray
    rewards: FloatArray
    trajectory_advantages: FloatArray
    trajectory_ids: tuple[str, ...]
    logprob_mask: FloatArray
    missing_logprobs: int

    @property
    def num_rows(self) -> int:
        """How many segments (rows) the batch holds."""
        return len(self.row_lengths)

    @property
    def num_tokens(self) -> int:
        """Real (unpadded) tokens in the batch."""
        return int(self.row_lengths.sum())

    @property
    def metrics(self) -> dict[str, int]:
        """Counts to log with a training step: rows, tokens, trainable and missing logprobs."""
        return {
            "rows": self.num_rows,
            "tokens": self.num_tokens,
            "trainable_tokens": int(self.loss_mask.sum()),
            "missing_logprobs": self.missing_logprobs,
        }

    def to_torch(self) -> dict[str, Any]:
        """The arrays as torch tensors (same names); ints and masks keep their dtypes.

        Raises :class:`TorchUnavailableError` when torch cannot be imported.
        """
        try:
            import torch
        except ImportError as exc:
            raise TorchUnavailableError(
                "Batch.to_torch() needs torch, which is not installed: pip install torch "
                "(or use the numpy arrays)"
            ) from exc
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                out[f.name] = torch.from_numpy(np.ascontiguousarray(value))
        out["max_seqlen"] = self.max_seqlen
        return out


def group_advantages(records: Sequence[Scored], eps: float = 1e-6) -> FloatArray:
    """Per record: (reward - group mean) / (group std + eps); 0 where the reward is None."""
    out = np.zeros(len(records), dtype=np.float32)
    by_group: dict[tuple[str, str], list[int]] = {}
    for i, record in enumerate(records):
        if record.reward is not None:
            key = (record.trajectory.task_id, record.trajectory.group_id)
            by_group.setdefault(key, []).append(i)
    for members in by_group.values():
        rewards = [records[i].reward for i in members]
        out[members] = advantages([r for r in rewards if r is not None], eps)
    return out


def advantages(rewards: Sequence[float], eps: float = 1e-6) -> FloatArray:
    """GRPO's advantages of one group's rewards: (reward - mean) / (std + eps).

    All 0 when every reward is the same: no signal, and exactly 0 rather than rounding noise
    divided by ``eps``.
    """
    values = np.array(rewards, dtype=np.float64)
    if not len(values) or values.min() == values.max():
        return np.zeros(len(values), dtype=np.float32)
    normalised: FloatArray = ((values - values.mean()) / (values.std() + eps)).astype(np.float32)
    return normalised


def to_batch(
    source: Group | RecordBatch | Sequence[Scored],
    layout: Layout = "padded",
    pad_id: int = 0,
    max_len: int | None = None,
    eps: float = 1e-6,
) -> Batch:
    """The training arrays of ``source``'s trajectories, one row per segment.

    ``max_len`` truncates every segment to its first ``max_len`` tokens. Records of several
    groups (a plain batch) are normalised group by group.
    """
    if layout not in ("padded", "packed"):
        raise ConfigurationError(f"layout must be padded or packed, not {layout!r}")
    if max_len is not None and max_len < 1:
        raise ConfigurationError(f"max_len must be at least 1, not {max_len}")
    records = list(source.records) if isinstance(source, Group | RecordBatch) else list(source)
    advantages = group_advantages(records, eps)
    ids: list[IntArray] = []
    masks: list[FloatArray] = []
    logprobs: list[FloatArray] = []
    known: list[FloatArray] = []
    owners: list[int] = []
    for i, record in enumerate(records):
        for segment in record.trajectory.segments:
            n = len(segment.input_ids) if max_len is None else min(max_len, len(segment.input_ids))
            ids.append(np.frombuffer(segment.input_ids.data, "<u4")[:n].astype(np.int64))
            mask = np.frombuffer(segment.loss_mask.data, np.uint8)[:n].astype(np.float32)
            values = np.frombuffer(segment.logprobs.data, "<f4")[:n].astype(np.float32)
            finite = np.isfinite(values)
            masks.append(mask)
            logprobs.append(np.where(finite, values, np.float32(0.0)))
            known.append(mask * finite)
            owners.append(i)
    lengths = np.array([len(row) for row in ids], dtype=np.int64)
    row_trajectory = np.array(owners, dtype=np.int64)
    row_advantage = advantages[row_trajectory] if owners else np.zeros(0, np.float32)
    sampled = sum(float(m.sum()) for m in masks)
    common: dict[str, Any] = {
        "missing_logprobs": int(sampled - sum(float(k.sum()) for k in known)),
        "layout": layout,
        "max_seqlen": int(lengths.max(initial=0)),
        "row_lengths": lengths,
        "row_trajectory": row_trajectory,
        "rewards": np.array(
            [np.nan if r.reward is None else r.reward for r in records], dtype=np.float32
        ),
        "trajectory_advantages": advantages,
        "trajectory_ids": tuple(r.trajectory.trajectory_id for r in records),
    }
    if layout == "packed":
        return _packed(ids, masks, logprobs, known, row_advantage, lengths, common)
    return _padded(ids, masks, logprobs, known, row_advantage, lengths, pad_id, common)


def _padded(
    ids: list[IntArray],
    masks: list[FloatArray],
    logprobs: list[FloatArray],
    known: list[FloatArray],
    row_advantage: FloatArray,
    lengths: IntArray,
    pad_id: int,
    common: dict[str, Any],
) -> Batch:
    rows, width = len(ids), int(common["max_seqlen"])
    input_ids = np.full((rows, width), pad_id, dtype=np.int64)
    loss_mask = np.zeros((rows, width), dtype=np.float32)
    old_logprobs = np.zeros((rows, width), dtype=np.float32)
    logprob_mask = np.zeros((rows, width), dtype=np.float32)
    for r, n in enumerate(lengths.tolist()):
        input_ids[r, :n] = ids[r]
        loss_mask[r, :n] = masks[r]
        old_logprobs[r, :n] = logprobs[r]
        logprob_mask[r, :n] = known[r]
    attention_mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    position_ids = np.arange(width, dtype=np.int64)[None, :] * attention_mask
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        loss_mask=loss_mask,
        old_logprobs=old_logprobs,
        advantages=(loss_mask * row_advantage[:, None]).astype(np.float32),
        cu_seqlens=None,
        logprob_mask=logprob_mask,
        **common,
    )


def _packed(
    ids: list[IntArray],
    masks: list[FloatArray],
    logprobs: list[FloatArray],
    known: list[FloatArray],
    row_advantage: FloatArray,
    lengths: IntArray,
    common: dict[str, Any],
) -> Batch:
    def cat[T: np.generic](parts: list[npt.NDArray[T]], dtype: type[T]) -> npt.NDArray[T]:
        return np.concatenate(parts)[None, :] if parts else np.zeros((1, 0), dtype=dtype)

    loss_mask = cat(masks, np.float32)
    total = int(lengths.sum())
    cu_seqlens = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu_seqlens[1:])
    starts = np.repeat(cu_seqlens[:-1].astype(np.int64), lengths)
    position_ids = (np.arange(total, dtype=np.int64) - starts)[None, :]
    token_advantage = np.repeat(row_advantage, lengths)[None, :]
    return Batch(
        input_ids=cat(ids, np.int64),
        attention_mask=np.ones((1, total), dtype=np.int64),
        position_ids=position_ids,
        loss_mask=loss_mask,
        old_logprobs=cat(logprobs, np.float32),
        advantages=(loss_mask * token_advantage).astype(np.float32),
        cu_seqlens=cu_seqlens,
        logprob_mask=cat(known, np.float32),
        **common,
    )
