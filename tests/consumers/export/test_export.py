"""Export rows, files and counting, without Kafka."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.consumers.export import (
    EXPORT_SCHEMA,
    ExportReport,
    exportable,
    format_for,
    json_line,
    open_writer,
    passes,
    record_batch,
    record_rows,
    rows_of,
)
from rollstream.consumers.export.writers import (
    ExportFormat,
    JsonlExportWriter,
    ParquetExportWriter,
)
from rollstream.errors import ConfigurationError
from rollstream.schemas import Logprobs, LossMask, Scored, Segment, TokenIds
from tests.schemas.samples import ENDED, SCORED, T1, TRAJECTORY

COLUMNS = [
    "trajectory_id",
    "session_id",
    "task_id",
    "group_id",
    "sample_index",
    "harness",
    "strategy",
    "status",
    "session_status",
    "policy_versions",
    "reward",
    "evaluator",
    "error",
    "details",
    "segment_index",
    "segments",
    "input_ids",
    "loss_mask",
    "logprobs",
    "call_ids",
    "trainable_tokens",
    "num_tokens",
    "messages",
    "final_text",
    "created_at",
    "scored_at",
]


def segment(ids: list[int], mask: list[int], logprobs: list[float]) -> Segment:
    return Segment(
        input_ids=TokenIds.from_list(ids),
        loss_mask=LossMask.from_list(mask),
        logprobs=Logprobs.from_list(logprobs),
        call_ids=[f"c{len(ids)}"],
    )


def scored(reward: float | None, *, segments: list[Segment] | None = None) -> Scored:
    trajectory = TRAJECTORY.model_copy(
        update={"segments": segments if segments is not None else TRAJECTORY.segments}
    )
    return SCORED.model_copy(update={"trajectory": trajectory, "reward": reward})


def test_the_schema_has_the_columns_in_order() -> None:
    assert EXPORT_SCHEMA.names == COLUMNS
    assert EXPORT_SCHEMA.field("input_ids").type == pa.list_(pa.uint32())
    assert EXPORT_SCHEMA.field("loss_mask").type == pa.list_(pa.int8())
    assert EXPORT_SCHEMA.field("logprobs").type == pa.list_(pa.float32())
    assert EXPORT_SCHEMA.field("created_at").type == pa.timestamp("us", tz="UTC")


def test_a_scored_trajectory_gives_one_row_per_segment() -> None:
    rows = rows_of(SCORED.trajectory, SCORED)
    assert [r["segment_index"] for r in rows] == [0, 1]
    assert all(r["segments"] == 2 for r in rows)
    first, second = rows
    assert first["trajectory_id"] == "traj-1" and first["group_id"] == "group-1"
    assert first["sample_index"] == 3 and first["harness"] == "claude-code"
    assert first["status"] == "incomplete" and first["session_status"] == "completed"
    assert first["policy_versions"] == [6, 7]
    assert first["reward"] == 0.5 and first["evaluator"] == "command" and first["error"] is None
    assert json.loads(first["details"]) == {"exit_code": "1", "tail": "FAILED test_x"}
    assert first["input_ids"].tolist() == [1, 2, 3, 4]
    assert first["loss_mask"].tolist() == [0, 0, 1, 1]
    assert first["logprobs"].tolist() == [0.0, 0.0, -0.25, -1.5]
    assert (first["trainable_tokens"], first["num_tokens"]) == (2, 4)
    assert second["call_ids"] == ["call-2", "call-3"]
    assert (second["trainable_tokens"], second["num_tokens"]) == (1, 2)
    assert json.loads(first["messages"]) == TRAJECTORY.decoded_messages()
    assert first["messages"] == second["messages"] and first["final_text"] == "ok"
    assert first["created_at"] == TRAJECTORY.created_at and first["scored_at"] == T1


def test_a_bare_trajectory_has_no_reward_columns() -> None:
    [row, _] = rows_of(TRAJECTORY)
    assert row["reward"] is None and row["evaluator"] is None and row["error"] is None
    assert row["details"] is None and row["scored_at"] is None
    assert row["trajectory_id"] == "traj-1"


def test_a_trajectory_without_messages_exports_an_empty_list() -> None:
    [row, _] = rows_of(TRAJECTORY.model_copy(update={"messages": None}))
    assert row["messages"] == "[]"


def test_exportable_records_are_trajectories_and_scored_ones() -> None:
    assert exportable(SCORED) == (SCORED.trajectory, SCORED)
    assert exportable(TRAJECTORY) == (TRAJECTORY, None)
    assert exportable(ENDED) is None


@pytest.mark.parametrize(
    ("record", "threshold", "kept"),
    [
        (scored(0.5), None, True),
        (scored(None), None, True),
        (None, None, True),
        (scored(0.5), 0.5, True),
        (scored(0.49), 0.5, False),
        (scored(-1.0), -2.0, True),
        (scored(None), 0.0, False),
        (None, 0.0, False),
    ],
)
def test_min_reward_keeps_rewards_at_least_the_threshold(
    record: Scored | None, threshold: float | None, kept: bool
) -> None:
    assert passes(record, threshold) is kept


def test_record_rows_counts_what_it_skips() -> None:
    report = ExportReport("t", Path("x"))
    assert len(record_rows(SCORED, None, report)) == 2
    assert len(record_rows(TRAJECTORY, None, report)) == 2
    assert record_rows(scored(0.1), 0.5, report) == []
    assert record_rows(TRAJECTORY, 0.5, report) == []
    assert record_rows(scored(1.0, segments=[]), None, report) == []
    assert record_rows(ENDED, None, report) == []
    assert record_rows(None, None, report) == []
    corrupt = TRAJECTORY.model_copy(update={"messages": b"not zstd"})
    assert record_rows(corrupt, None, report) == []
    assert (report.records, report.scored, report.trajectories) == (8, 3, 3)
    assert (report.below_min_reward, report.without_segments) == (2, 1)
    assert (report.other, report.undecodable) == (1, 2)


def test_a_json_line_has_every_column_in_order_and_parses_with_the_schema() -> None:
    rows = rows_of(SCORED.trajectory, SCORED) + rows_of(TRAJECTORY)
    lines = [json_line(r) for r in rows]
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert list(json.loads(lines[0])) == COLUMNS
    assert json.loads(lines[0])["created_at"] == "2026-11-30T12:00:01.654321+00:00"
    table = pj.read_json(
        io.BytesIO(b"".join(lines)), parse_options=pj.ParseOptions(explicit_schema=EXPORT_SCHEMA)
    )
    # The JSON reader makes every field nullable; names and types are the schema's.
    assert table.schema.names == COLUMNS and table.schema.types == EXPORT_SCHEMA.types
    assert table.column("reward").to_pylist() == [0.5, 0.5, None, None]
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 4], [1, 9]] * 2


def test_a_record_batch_keeps_the_schema_and_the_values() -> None:
    rows = rows_of(SCORED.trajectory, SCORED) + rows_of(TRAJECTORY)
    batch = record_batch(rows)
    assert batch.schema == EXPORT_SCHEMA and batch.num_rows == 4
    assert batch.column("loss_mask").to_pylist() == [[0, 0, 1, 1], [0, 1]] * 2
    assert batch.column("logprobs").to_pylist() == [[0.0, 0.0, -0.25, -1.5], [0.0, -2.0]] * 2
    assert batch.column("evaluator").to_pylist() == ["command", "command", None, None]
    assert batch.column("created_at").to_pylist()[0] == TRAJECTORY.created_at
    assert record_batch([]).schema == EXPORT_SCHEMA and record_batch([]).num_rows == 0


def test_an_empty_segment_is_an_empty_list() -> None:
    record = scored(1.0, segments=[segment([], [], []), segment([7], [1], [-0.5])])
    batch = record_batch(rows_of(record.trajectory, record))
    assert batch.column("input_ids").to_pylist() == [[], [7]]
    assert json.loads(json_line(rows_of(record.trajectory, record)[0]))["input_ids"] == []


token_segments = st.lists(
    st.integers(min_value=0, max_value=40).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n),
            st.lists(st.integers(0, 1), min_size=n, max_size=n),
            st.lists(st.floats(-100, 0, width=32, allow_nan=False), min_size=n, max_size=n),
        )
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=50, deadline=None)
@given(token_segments)
def test_token_arrays_round_trip_through_both_formats(
    arrays: list[tuple[list[int], list[int], list[float]]],
) -> None:
    segments = [segment(ids, mask, logprobs) for ids, mask, logprobs in arrays]
    record = scored(0.0, segments=segments)
    rows = rows_of(record.trajectory, record)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_batches([record_batch(rows)]), sink)
    from_parquet = pq.read_table(io.BytesIO(sink.getvalue()))
    from_json = pj.read_json(
        io.BytesIO(b"".join(json_line(r) for r in rows)),
        parse_options=pj.ParseOptions(explicit_schema=EXPORT_SCHEMA),
    )
    for table in (from_parquet, from_json):
        assert table.column("input_ids").to_pylist() == [s.input_ids.to_list() for s in segments]
        assert table.column("loss_mask").to_pylist() == [s.loss_mask.to_list() for s in segments]
        assert table.column("logprobs").to_pylist() == [s.logprobs.to_list() for s in segments]
        assert table.column("trainable_tokens").to_pylist() == [sum(m) for _, m, _ in arrays]


@pytest.mark.parametrize(
    ("name", "given_format", "expected"),
    [
        ("out.jsonl", None, "jsonl"),
        ("out.NDJSON", None, "jsonl"),
        ("out.parquet", None, "parquet"),
        ("out.pq", None, "parquet"),
        ("out.data", "parquet", "parquet"),
        ("out.parquet", "jsonl", "jsonl"),
    ],
)
def test_the_format_comes_from_the_option_else_the_suffix(
    name: str, given_format: str | None, expected: str
) -> None:
    assert format_for(Path(name), given_format) == expected


def test_an_unknown_suffix_needs_a_format() -> None:
    with pytest.raises(ConfigurationError, match="give --format"):
        format_for(Path("out.csv"), None)
    with pytest.raises(ConfigurationError, match="unknown export format"):
        format_for(Path("out.jsonl"), "csv")


def test_jsonl_rows_are_in_the_file_before_it_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    writer = JsonlExportWriter(path)
    writer.write(rows_of(SCORED.trajectory, SCORED))
    assert [json.loads(line)["segment_index"] for line in path.read_text().splitlines()] == [0, 1]
    assert writer.rows_written == 2
    writer.close()


def _row_groups(path: Path) -> list[int]:
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def test_parquet_row_groups_are_written_when_full(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    writer = ParquetExportWriter(path, group_rows=3, flush_interval_s=1e9)
    for _ in range(4):
        writer.write(rows_of(SCORED.trajectory, SCORED))
    assert writer.rows_written == 8  # 4 + 4 (a group is written once it reaches 3 rows)
    writer.close()
    assert writer.rows_written == 8 and _row_groups(path) == [4, 4]


def test_parquet_row_groups_are_written_when_old_enough(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    writer = ParquetExportWriter(path, group_rows=1000, flush_interval_s=5.0, now=100.0)
    writer.tick(200.0)  # nothing buffered: the clock restarts
    writer.write(rows_of(SCORED.trajectory, SCORED))
    writer.tick(204.0)
    assert writer.rows_written == 0
    writer.tick(205.0)
    assert writer.rows_written == 2
    writer.write(rows_of(TRAJECTORY))
    writer.tick(209.0)
    assert writer.rows_written == 2
    writer.close()
    assert _row_groups(path) == [2, 2]


def test_parquet_row_groups_are_bounded_in_tokens(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    writer = ParquetExportWriter(path, group_rows=1000, flush_interval_s=1e9, max_group_tokens=10)
    for _ in range(3):
        writer.write(rows_of(SCORED.trajectory, SCORED))  # 6 tokens a record
    writer.close()
    assert _row_groups(path) == [4, 2]


def test_an_empty_parquet_export_is_a_readable_file_with_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    open_writer(path, "parquet").close()
    table = pq.read_table(path)
    assert table.num_rows == 0 and table.schema == EXPORT_SCHEMA


def test_a_parquet_export_reads_back_with_pandas(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    writer = open_writer(path, "parquet")
    writer.write(rows_of(SCORED.trajectory, SCORED) + rows_of(TRAJECTORY))
    writer.close()
    frame = pd.read_parquet(path)
    assert list(frame.columns) == COLUMNS and len(frame) == 4
    assert frame["reward"].dtype == np.float64 and frame["reward"].isna().tolist() == [
        False,
        False,
        True,
        True,
    ]
    assert frame["segment_index"].dtype == np.int32 and frame["num_tokens"].dtype == np.int64
    assert str(frame["created_at"].dtype) == "datetime64[us, UTC]"
    assert frame["input_ids"][0].dtype == np.uint32
    assert frame["input_ids"][0].tolist() == [1, 2, 3, 4]
    assert frame["loss_mask"][1].dtype == np.int8 and frame["logprobs"][1].dtype == np.float32


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_path_that_cannot_be_written_is_a_configuration_error(
    tmp_path: Path, fmt: ExportFormat
) -> None:
    with pytest.raises(ConfigurationError, match="cannot write"):
        open_writer(tmp_path / "missing" / "out", fmt)
