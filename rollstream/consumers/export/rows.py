"""Export rows: one per trajectory segment, the same columns in JSONL and Parquet.

Everything here is pure: a record becomes rows, rows become a JSON line or an Arrow record
batch. Token arrays stay numpy views of the records' packed little-endian bytes until they are
written, so a 100k-token segment is never turned into a Python list on the Parquet path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from rollstream.errors import ConfigurationError
from rollstream.schemas import AvroRecord, Scored, Trajectory

Row = dict[str, Any]

#: The columns of every export, in order; each Parquet row group is written with this schema.
EXPORT_SCHEMA = pa.schema(
    [
        pa.field("trajectory_id", pa.string(), nullable=False),
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int64(), nullable=False),
        pa.field("harness", pa.string(), nullable=False),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("session_status", pa.string(), nullable=False),
        pa.field("policy_versions", pa.list_(pa.int64()), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("evaluator", pa.string()),
        pa.field("error", pa.string()),
        pa.field("details", pa.string()),  # JSON object of the evaluator's details
        pa.field("segment_index", pa.int32(), nullable=False),
        pa.field("segments", pa.int32(), nullable=False),
        pa.field("input_ids", pa.list_(pa.uint32()), nullable=False),
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("call_ids", pa.list_(pa.string()), nullable=False),
        pa.field("trainable_tokens", pa.int64(), nullable=False),
        pa.field("num_tokens", pa.int64(), nullable=False),
        pa.field("messages", pa.string(), nullable=False),  # JSON list of Chat messages
        pa.field("final_text", pa.string(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("scored_at", pa.timestamp("us", tz="UTC")),
    ]
)

# The packed arrays' little-endian layouts, viewed as the column types above.
_TOKEN_COLUMNS = {"input_ids": "<u4", "loss_mask": "i1", "logprobs": "<f4"}


def exportable(record: AvroRecord) -> tuple[Trajectory, Scored | None] | None:
    """The trajectory (and its score) a record carries, or None for any other record type."""
    if isinstance(record, Scored):
        return record.trajectory, record
    if isinstance(record, Trajectory):
        return record, None
    return None


def passes(scored: Scored | None, min_reward: float | None) -> bool:
    """Whether a record is kept under ``--min-reward``: a reward at least ``min_reward``.

    Without a threshold everything passes; with one, records without a reward (unscored
    trajectories, failed evaluations) do not.
    """
    if min_reward is None:
        return True
    return scored is not None and scored.reward is not None and scored.reward >= min_reward


def identity(trajectory: Trajectory) -> dict[str, Any]:
    """What names a trajectory and how it was made: the columns every reader of it shows."""
    return {
        "trajectory_id": trajectory.trajectory_id,
        "session_id": trajectory.session_id,
        "task_id": trajectory.task_id,
        "group_id": trajectory.group_id,
        "sample_index": trajectory.sample_index,
        "harness": trajectory.harness,
        "strategy": trajectory.strategy,
        "status": trajectory.status.value,
        "session_status": trajectory.session_status.value,
        "policy_versions": list(trajectory.policy_versions),
    }


def rows_of(trajectory: Trajectory, scored: Scored | None = None) -> list[Row]:
    """One row per segment of ``trajectory``, with ``scored``'s reward columns when given.

    Raises SerializationError when the trajectory's messages blob cannot be opened.
    """
    messages = orjson.dumps(trajectory.decoded_messages()).decode()
    shared: Row = {
        **identity(trajectory),
        "reward": scored.reward if scored is not None else None,
        "evaluator": scored.evaluator if scored is not None else None,
        "error": scored.error if scored is not None else None,
        "details": orjson.dumps(scored.details).decode() if scored is not None else None,
        "segments": len(trajectory.segments),
        "messages": messages,
        "final_text": trajectory.final_text,
        "created_at": trajectory.created_at,
        "scored_at": scored.scored_at if scored is not None else None,
    }
    rows = []
    for index, segment in enumerate(trajectory.segments):
        rows.append(
            shared
            | {
                "segment_index": index,
                "input_ids": np.frombuffer(segment.input_ids.data, "<u4"),
                "loss_mask": np.frombuffer(segment.loss_mask.data, "i1"),
                "logprobs": np.frombuffer(segment.logprobs.data, "<f4"),
                "call_ids": list(segment.call_ids),
                "trainable_tokens": segment.trainable_tokens,
                "num_tokens": len(segment.input_ids),
            }
        )
    return rows


def row_tokens(row: Row) -> int:
    """How many tokens a row holds (what bounds a Parquet writer's buffer)."""
    return len(row["input_ids"])


def json_line(row: Row) -> bytes:
    """The row as one JSON object and a newline, keys in :data:`EXPORT_SCHEMA` order."""
    ordered = {name: row[name] for name in EXPORT_SCHEMA.names}
    return orjson.dumps(ordered, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def record_batch(rows: list[Row]) -> pa.RecordBatch:
    """The rows as one Arrow record batch of :data:`EXPORT_SCHEMA`."""
    columns = []
    for field in EXPORT_SCHEMA:
        values = [row[field.name] for row in rows]
        if field.name in _TOKEN_COLUMNS:
            columns.append(_list_column(values, field.type, _TOKEN_COLUMNS[field.name]))
        else:
            columns.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(columns, schema=EXPORT_SCHEMA)


def _list_column(arrays: list[np.ndarray[Any, Any]], type_: pa.DataType, dtype: str) -> pa.Array:
    # Built from one concatenated buffer and offsets: no per-token Python objects.
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    if lengths.sum() > np.iinfo(np.int32).max:  # list<> offsets are int32
        raise ConfigurationError("a row group would hold more than 2**31 tokens")
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = np.concatenate(arrays) if arrays else np.empty(0, dtype=dtype)
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(values.astype(dtype, copy=False), type=type_.value_type)
    )
