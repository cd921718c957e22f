"""``rollstream report`` on a real broker: records produced to a scored topic, data read back."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.consumers.console.report import read_report_input
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import AvroRecord, AvroSerializer, Scored, TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.console.records import conversation, scored
from tests.schemas.samples import ENDED

pytestmark = pytest.mark.integration


async def _produce(
    producer: AIOKafkaProducer, topic: str, records: Iterable[AvroRecord | bytes]
) -> None:
    serializer = AvroSerializer()
    for record in records:
        value = record if isinstance(record, bytes) else serializer.encode(record)
        key = record.trajectory.group_id.encode() if isinstance(record, Scored) else b"x"
        await producer.send_and_wait(topic, value, key=key)


async def _report(kafka: KafkaSettings, *args: str) -> tuple[int, str, str]:
    """The CLI as a user runs it, in a subprocess (run_service wants the main thread)."""
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "rollstream", "report", *args),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


def _run(tokenizer: ChatTokenizer, prefix: str) -> list[Scored]:
    seg = conversation(tokenizer, "Fix the test <script>", [("Done <b>.", "ok"), ("Yes.", "")])
    return [
        scored(f"{prefix}-a0", f"{prefix}-a", 0, [seg], 1.0),
        scored(f"{prefix}-a1", f"{prefix}-a", 1, [seg], 0.0),
        scored(f"{prefix}-b0", f"{prefix}-b", 0, [seg, seg], None, "evaluator crashed"),
    ]


def _data(page: str) -> dict[str, Any]:
    """The data a report carries for its front end."""
    head = '<script id="rollstream-data" type="application/json">'
    start = page.index(head) + len(head)
    data: dict[str, Any] = json.loads(page[start : page.index("</script>", start)])
    return data


async def test_the_cli_writes_a_page_of_the_scored_topic(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    records = _run(tokenizer, "r")
    producer = await producer_factory()
    await _produce(producer, rollstream_topics.scored, [*records, ENDED, b"\x00junk"])

    out = tmp_path / "report.html"
    code, stdout, stderr = await _report(
        kafka_settings,
        *("--topic", "scored", "--out", str(out), "--max-trajectories", "2"),
        *("--tokenizer", str(default_tokenizer_dir()), "--tokens-per-segment", "30"),
    )
    assert code == 0, stderr
    assert stdout.startswith(f"{out}: 5 records read from {rollstream_topics.scored}")
    assert "3 trajectories (2 shown token by token), 1 of other types, 1 undecodable" in stdout
    page = out.read_text(encoding="utf-8")
    # The records' own text (``<script>`` in the task) cannot end the data early.
    assert page.count("<script") == 2
    data = _data(page)
    # Partitions interleave, so which two are shown depends on the read order; all are counted.
    shown = sorted(data["trajectories"])
    assert len(shown) == 2 and set(shown) <= {r.trajectory.trajectory_id for r in records}
    assert sorted(s["trajectory_id"] for s in data["sessions"]) == ["r-a0", "r-a1", "r-b0"]
    groups = {g["group_id"]: g for g in data["groups"]}
    assert sorted(m["reward"] for m in groups["r-a"]["members"]) == [0.0, 1.0]
    assert [m["reward"] for m in groups["r-b"]["members"]] == [None]
    assert groups["r-a"]["mean_reward"] == 0.5
    for view in data["trajectories"].values():
        for segment in view["segments"]:
            assert len(segment["tokens"]["id"]) == 30 and segment["truncated"]
    notes = data["notes"]
    assert "5 records read" in notes[0] and str(default_tokenizer_dir()) in notes[1]


async def test_since_and_a_missing_topic(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    producer = await producer_factory()
    await _produce(producer, rollstream_topics.scored, _run(tokenizer, "early"))
    await asyncio.sleep(1.0)
    cut = datetime.now(UTC)
    await asyncio.sleep(1.0)
    late = _run(tokenizer, "late")
    await _produce(producer, rollstream_topics.scored, late)

    found = await read_report_input(kafka_settings, "scored", since=cut)
    shown = sorted(r.trajectory.trajectory_id for r in found.records if isinstance(r, Scored))
    assert shown == ["late-a0", "late-a1", "late-b0"]
    everything = await read_report_input(kafka_settings, "scored", max_trajectories=1)
    assert (len(everything.records), everything.more, everything.read) == (1, 5, 6)

    out = tmp_path / "late.html"
    code, _, stderr = await _report(kafka_settings, "--out", str(out), "--since", cut.isoformat())
    assert code == 0, stderr
    data = _data(out.read_text(encoding="utf-8"))
    assert sorted(data["trajectories"]) == ["late-a0", "late-a1", "late-b0"]

    missing = tmp_path / "none.html"
    code, _, stderr = await _report(
        kafka_settings, "--topic", "nope.nothing", "--out", str(missing)
    )
    assert code == 1 and "no topic nope.nothing" in stderr
