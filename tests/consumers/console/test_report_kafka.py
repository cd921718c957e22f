"""``rollstream report`` against a real broker: records produced to a scored topic, page parsed."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.report import read_report_input
from rollstream.dev.report.facts import trajectory_of
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import AvroRecord, AvroSerializer, Scored, TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.dev.report.records import Element, conversation, parse, scored
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


def _articles(root: Element) -> list[str]:
    return sorted(a.attrs["data-trajectory-id"] for a in root.find_all("article", "trajectory"))


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
    root, tags = parse(out.read_text(encoding="utf-8"))
    assert "script" not in tags and "b" not in tags
    # Partitions interleave, so which two are shown depends on the read order; all are counted.
    shown = _articles(root)
    assert len(shown) == 2 and set(shown) <= {r.trajectory.trajectory_id for r in records}
    rows = {
        r.attrs["data-group-id"]: [td.text for td in r.find_all("td")]
        for r in root.find_all("tr", "group-row")
    }
    trainable = records[0].trajectory.trainable_tokens
    assert rows["r-a"][2:] == ["2 / 4", "1, 0", "0.5", f"{2 * trainable:,}"]
    assert rows["r-b"][2:] == ["1 / 4", "error", "\u2013", f"{2 * trainable:,}"]
    summary = root.find_all("section", "summary")[0].text
    assert "trajectories3 (2 shown below)" in summary and "groups2" in summary
    for box in root.find_all("div", "tokens"):
        assert len(box.find_all("span", "t")) == 30  # capped: the segment has more
        assert len(box.find_all("span", "omitted")) == 1
    notes = [p.text for p in root.find_all("p", "notes")]
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
    shown = sorted(trajectory_of(r).trajectory_id for r in found.records)
    assert shown == ["late-a0", "late-a1", "late-b0"]
    everything = await read_report_input(kafka_settings, "scored", max_trajectories=1)
    assert (len(everything.records), len(everything.more), everything.read) == (1, 5, 6)

    out = tmp_path / "late.html"
    code, _, stderr = await _report(kafka_settings, "--out", str(out), "--since", cut.isoformat())
    assert code == 0, stderr
    assert _articles(parse(out.read_text(encoding="utf-8"))[0]) == ["late-a0", "late-a1", "late-b0"]

    missing = tmp_path / "none.html"
    code, _, stderr = await _report(
        kafka_settings, "--topic", "nope.nothing", "--out", str(missing)
    )
    assert code == 1 and "no topic nope.nothing" in stderr
    assert not missing.exists()
