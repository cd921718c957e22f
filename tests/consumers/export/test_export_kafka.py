"""``rollstream export`` against a real broker: files read back with pyarrow and pandas."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import json
import os
import signal
import sys
import zlib
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest
from aiokafka import AIOKafkaProducer

from rollstream.consumers.export import EXPORT_SCHEMA, ExportOptions, export
from rollstream.consumers.export.writers import ExportFormat
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    KnownSchema,
    Logprobs,
    LossMask,
    SchemaRegistry,
    Scored,
    Segment,
    TokenIds,
    TopicNames,
    Trajectory,
)
from rollstream.schemas.registry import current_schemas, history_schemas
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory
from tests.schemas.samples import ENDED, SCORED, TRAJECTORY
from tests.waiting import until

pytestmark = pytest.mark.integration


def _segment(n: int, seed: int) -> Segment:
    rng = np.random.default_rng(seed)
    return Segment(
        input_ids=TokenIds.from_list(rng.integers(0, 2**32, n, dtype=np.uint64).tolist()),
        loss_mask=LossMask.from_list(rng.integers(0, 2, n).tolist()),
        logprobs=Logprobs.from_list(rng.uniform(-10, 0, n).astype(np.float32).tolist()),
        call_ids=[f"call-{seed}"],
    )


def _trajectory(trajectory_id: str, lengths: list[int], group: str = "g") -> Trajectory:
    seed = zlib.crc32(trajectory_id.encode())
    segments = [_segment(n, seed + i) for i, n in enumerate(lengths)]
    return TRAJECTORY.model_copy(
        update={"trajectory_id": trajectory_id, "group_id": group, "segments": segments}
    )


def _scored(
    trajectory_id: str, lengths: list[int], reward: float | None, error: str | None = None
) -> Scored:
    trajectory = _trajectory(trajectory_id, lengths, group=f"g-{trajectory_id}")
    return SCORED.model_copy(update={"trajectory": trajectory, "reward": reward, "error": error})


async def _produce(
    producer: AIOKafkaProducer, topic: str, records: Iterable[AvroRecord | bytes]
) -> None:
    serializer = AvroSerializer()
    for record in records:
        value = record if isinstance(record, bytes) else serializer.encode(record)
        key = getattr(getattr(record, "trajectory", record), "group_id", "x").encode()
        await producer.send_and_wait(topic, value, key=key)


def _expected(records: Iterable[Scored | Trajectory]) -> dict[tuple[str, int], dict[str, Any]]:
    """(trajectory id, segment index) -> the values the row must carry."""
    out = {}
    for record in records:
        trajectory = record.trajectory if isinstance(record, Scored) else record
        for i, segment in enumerate(trajectory.segments):
            out[trajectory.trajectory_id, i] = {
                "reward": record.reward if isinstance(record, Scored) else None,
                "segments": len(trajectory.segments),
                "input_ids": segment.input_ids.to_list(),
                "loss_mask": segment.loss_mask.to_list(),
                "logprobs": segment.logprobs.to_list(),
                "trainable_tokens": segment.trainable_tokens,
                "num_tokens": len(segment.input_ids),
            }
    return out


def _check_table(table: pa.Table, expected: dict[tuple[str, int], dict[str, Any]]) -> None:
    assert table.schema.names == EXPORT_SCHEMA.names
    assert table.schema.types == EXPORT_SCHEMA.types
    rows = table.to_pylist()
    got = {(r["trajectory_id"], r["segment_index"]): r for r in rows}
    assert len(rows) == len(got) == len(expected)
    assert set(got) == set(expected)
    for key, values in expected.items():
        for column, value in values.items():
            assert got[key][column] == value, (key, column)


def _check_frame(frame: pd.DataFrame, expected: dict[tuple[str, int], dict[str, Any]]) -> None:
    assert list(frame.columns) == EXPORT_SCHEMA.names and len(frame) == len(expected)
    assert frame["reward"].dtype == np.float64
    assert frame["segment_index"].dtype.kind == "i" and frame["num_tokens"].dtype.kind == "i"
    for _, row in frame.iterrows():
        values = expected[row["trajectory_id"], int(row["segment_index"])]
        assert list(row["input_ids"]) == values["input_ids"]
        assert list(row["loss_mask"]) == values["loss_mask"]
        assert np.array_equal(np.asarray(row["logprobs"], np.float32), values["logprobs"])
        reward = values["reward"]
        assert pd.isna(row["reward"]) if reward is None else row["reward"] == reward


async def test_scored_records_export_to_jsonl_and_parquet(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    records = [
        _scored("two", [5, 3], 0.5),
        _scored("three", [7, 1, 4], 1.0),
        _scored("failed", [6], None, error="evaluator crashed"),
    ]
    producer = await producer_factory()
    await _produce(producer, rollstream_topics.scored, [*records, ENDED, b"\x00junk"])
    expected = _expected(records)

    parquet, jsonl = tmp_path / "out.parquet", tmp_path / "out.jsonl"
    formats: list[tuple[Path, ExportFormat]] = [(parquet, "parquet"), (jsonl, "jsonl")]
    for path, fmt in formats:
        report = await export(
            kafka_settings, ExportOptions(out=path, fmt=fmt), progress=lambda _: None
        )
        assert (report.records, report.scored, report.rows) == (5, 3, 6)
        assert (report.other, report.undecodable, report.trajectories) == (1, 1, 0)

    _check_table(pq.read_table(parquet), expected)
    _check_frame(pd.read_parquet(parquet), expected)
    options = pj.ParseOptions(explicit_schema=EXPORT_SCHEMA)
    _check_table(pj.read_json(jsonl, parse_options=options), expected)
    _check_frame(pd.read_json(jsonl, lines=True), expected)

    frame = pd.read_parquet(parquet).sort_values(["trajectory_id", "segment_index"])
    assert str(frame["created_at"].dtype) == "datetime64[us, UTC]"
    assert frame["input_ids"].iloc[0].dtype == np.uint32
    failed = frame[frame["trajectory_id"] == "failed"].iloc[0]
    assert failed["error"] == "evaluator crashed" and failed["evaluator"] == "command"
    assert json.loads(failed["messages"]) == TRAJECTORY.decoded_messages()
    assert list(failed["policy_versions"]) == [6, 7] and failed["segments"] == 1
    from_json = pd.read_json(jsonl, lines=True)
    assert str(from_json["scored_at"].dtype).startswith("datetime64")


def _env(kafka_settings: KafkaSettings) -> dict[str, str]:
    return os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
    }


async def _spawn(kafka_settings: KafkaSettings, *args: str) -> asyncio.subprocess.Process:
    """The CLI as a user runs it (run_service installs signal handlers: main thread only)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "rollstream", "export", *args),
        env=_env(kafka_settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_min_reward_and_since_filter(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    producer = await producer_factory()
    early = [_scored("early-low", [3], 0.2), _scored("early-high", [4, 2], 0.9)]
    await _produce(producer, rollstream_topics.scored, early)
    await asyncio.sleep(1.0)
    cut = datetime.now(UTC)
    await asyncio.sleep(1.0)
    late = [_scored("late-none", [2], None), _scored("late-high", [5], 0.5)]
    await _produce(producer, rollstream_topics.scored, late)

    async def rows(**options: Any) -> list[tuple[str, int]]:
        out = tmp_path / "out.parquet"
        await export(
            kafka_settings,
            ExportOptions(out=out, fmt="parquet", **options),
            progress=lambda _: None,
        )
        table = pq.read_table(out)
        ids, indexes = table["trajectory_id"].to_pylist(), table["segment_index"].to_pylist()
        return sorted(zip(ids, indexes, strict=True))

    assert await rows(min_reward=0.5) == [("early-high", 0), ("early-high", 1), ("late-high", 0)]
    assert await rows(min_reward=0.95) == []
    assert await rows(min_reward=-1.0) == sorted(_expected([*early, late[1]]))
    assert await rows(since=cut) == [("late-high", 0), ("late-none", 0)]
    assert await rows(since=cut, min_reward=0.5) == [("late-high", 0)]

    # The same through the command line, with --since as ISO text.
    out = tmp_path / "cli.jsonl"
    args = ("--out", str(out), "--min-reward", "0.5", "--since", cut.isoformat())
    process = await _spawn(kafka_settings, *args)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert [json.loads(line)["trajectory_id"] for line in out.read_text().splitlines()] == [
        "late-high"
    ]
    assert stdout.decode().startswith("1 rows into")
    assert "from 2 records" in stdout.decode() and "1 below --min-reward" in stdout.decode()


async def test_trajectory_topics_export_without_rewards(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    topic_factory: TopicFactory,
    tmp_path: Path,
) -> None:
    producer = await producer_factory()
    live = [_trajectory("t1", [4, 4]), _trajectory("t2", [9])]
    await _produce(producer, rollstream_topics.trajectories, live)
    replayed = f"{rollstream_topics.trajectories}.tree"
    await topic_factory(partitions=2, name=replayed)
    await _produce(producer, replayed, [_trajectory("r1", [3, 2, 1])])

    out = tmp_path / "traj.parquet"
    report = await export(
        kafka_settings,
        ExportOptions(out=out, fmt="parquet", topic="trajectories"),
        progress=lambda _: None,
    )
    assert (report.trajectories, report.scored, report.rows) == (2, 0, 3)
    _check_table(pq.read_table(out), _expected(live))
    frame = pd.read_parquet(out)
    _check_frame(frame, _expected(live))
    assert frame["reward"].isna().all() and frame["evaluator"].isna().all()
    assert frame["scored_at"].isna().all()

    report = await export(
        kafka_settings,
        ExportOptions(out=tmp_path / "tree.jsonl", fmt="jsonl", topic="trajectories.tree"),
        progress=lambda _: None,
    )
    assert report.topic == replayed and report.rows == 3
    lines = (tmp_path / "tree.jsonl").read_text().splitlines()
    assert [json.loads(line)["segments"] for line in lines] == [3, 3, 3]

    # Unscored trajectories have no reward: a reward threshold keeps none of them.
    report = await export(
        kafka_settings,
        ExportOptions(out=tmp_path / "none.jsonl", fmt="jsonl", topic="trajectories", min_reward=0),
        progress=lambda _: None,
    )
    assert report.rows == 0 and report.below_min_reward == 2
    assert (tmp_path / "none.jsonl").read_text() == ""


class ScoredV2(Scored):
    """A Scored from a later rollstream: one more field, with a default."""

    judge: str = ""


def _scored_v2_schema() -> KnownSchema:
    schema = copy.deepcopy(current_schemas()["rollstream.Scored"].schema)
    schema["fields"].append({"name": "judge", "type": "string", "default": ""})
    return KnownSchema.from_json(schema)


async def test_a_newer_writers_records_are_exported_once_its_schema_is_learnt(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    v2 = AvroSerializer(
        SchemaRegistry(readers=[(_scored_v2_schema(), ScoredV2)], writers=history_schemas())
    )
    newer = ScoredV2(**_scored("newer", [4, 1], 0.75).model_dump(), judge="gpt")
    producer = await producer_factory()
    await _produce(producer, rollstream_topics.scored, [_scored("current", [2], 0.5)])
    await producer.send_and_wait(rollstream_topics.scored, v2.encode(newer), key=b"g")
    async with SchemaStore(kafka_settings, v2.registry) as store:
        await store.publish()  # after the record: the export must look it up

    out = tmp_path / "out.parquet"
    report = await export(
        kafka_settings, ExportOptions(out=out, fmt="parquet"), progress=lambda _: None
    )
    assert (report.records, report.scored, report.undecodable, report.rows) == (2, 2, 0, 3)
    expected = _expected([_scored("current", [2], 0.5), newer])
    _check_table(pq.read_table(out), expected)


async def test_follow_writes_jsonl_rows_as_records_arrive(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    producer = await producer_factory()
    await _produce(producer, rollstream_topics.scored, [_scored("before", [3], 1.0)])
    out = tmp_path / "follow.jsonl"
    stopping = asyncio.Event()
    lines: list[str] = []
    task = asyncio.create_task(
        export(
            kafka_settings,
            ExportOptions(out=out, fmt="jsonl", follow=True),
            stopping.is_set,
            lines.append,
        )
    )

    def ids() -> list[str]:
        text = out.read_text() if out.exists() else ""
        return [json.loads(line)["trajectory_id"] for line in text.splitlines()]

    try:
        await until(lambda: any("caught up" in line for line in lines))
        assert ids() == ["before"]
        await _produce(producer, rollstream_topics.scored, [_scored("after", [2, 2], 0.0)])
        await until(lambda: ids() == ["before", "after", "after"])
    finally:
        stopping.set()
        report = await asyncio.wait_for(task, 30)
    assert (report.records, report.rows) == (2, 3)


async def test_follow_in_a_subprocess_stops_on_sigint_with_a_readable_parquet_file(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    producer = await producer_factory()
    before = _scored("before", [4, 6], 0.25)
    await _produce(producer, rollstream_topics.scored, [before])
    out = tmp_path / "follow.parquet"
    process = await _spawn(
        kafka_settings,
        *("--follow", "--out", str(out), "--flush-interval", "0.5", "--progress-interval", "0.2"),
    )
    assert process.stderr is not None and process.stdout is not None
    stderr: list[str] = []

    async def collect(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            stderr.append(line.decode())

    collecting = asyncio.create_task(collect(process.stderr))
    try:
        await until(lambda: any("caught up at 1 records" in line for line in stderr))
        after = _scored("after", [5], None)
        await _produce(producer, rollstream_topics.scored, [after])
        await until(lambda: any("2 records read, 3 rows written" in line for line in stderr))
        process.send_signal(signal.SIGINT)
        summary = (await asyncio.wait_for(process.stdout.read(), 30)).decode()
        assert await asyncio.wait_for(process.wait(), 30) == 0, "".join(stderr)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        collecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collecting
    assert "3 rows into" in summary and "from 2 records" in summary
    expected = _expected([before, after])
    _check_table(pq.read_table(out), expected)
    _check_frame(pd.read_parquet(out), expected)
    # The bytes on disk are a complete file (footer included), not just what pyarrow forgives.
    assert pq.ParquetFile(io.BytesIO(out.read_bytes())).metadata.num_rows == 3
