"""``rollstream tail``: rendering (pure) and the consumer loop against the real broker."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import BrokerError
from rollstream.kafka.schema_store import SchemaStore
from rollstream.kafka.tail import TailOptions, render, tail
from rollstream.schemas import AvroSerializer, SchemaRegistry, TopicNames
from rollstream.schemas.registry import history_schemas
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumer_records import consumer_record
from tests.schemas.samples import CALL, ENDED, STARTED
from tests.schemas.test_evolution import V2, CallRecordV2


def _message(value: bytes, offset: int = 0) -> ConsumerRecord[bytes, bytes]:
    tp = TopicPartition("rollstream.events", 1)
    return consumer_record(tp, offset, value, key=b"sess-1", timestamp=1_700_000_000_000)


def test_render_json_summarises_arrays_and_opens_blobs() -> None:
    rendered = render(_message(AvroSerializer().encode(CALL)), AvroSerializer(), "json")
    assert rendered.ok
    line = json.loads(rendered.text)
    assert line["type"] == "CallRecord" and line["key"] == "sess-1" and line["partition"] == 1
    record = line["record"]
    assert record["completion_token_ids"] == "3 x uint32 [11, 0, 4294967295]"
    assert record["completion_logprobs"] == "3 x float32 [-0.5, -0, -12.25]"
    assert record["prompt"]["suffix"] == "3 x uint32 [5, 6, 7]"
    assert record["harness_request"] == {"model": "claude-sonnet-4-5", "max_tokens": 64}
    assert record["status"] == "error"
    assert record["timings"]["started_at"].startswith("2026-11-30T12:00:00.123456")


def test_render_pretty_has_a_header_line() -> None:
    rendered = render(_message(AvroSerializer().encode(ENDED), 42), AvroSerializer(), "pretty")
    header, body = rendered.text.split("\n", 1)
    assert header.startswith("rollstream.events[1]@42 ") and header.endswith("SessionEnded")
    assert json.loads(body)["artifacts"][0]["content"] == "--- a\n+++ b\n"


@pytest.mark.parametrize("value", [b"", b"plain text", b"\xc3\x01" + b"\x00" * 8 + b"\xff"])
def test_render_undecodable(value: bytes) -> None:
    rendered = render(_message(value), AvroSerializer(), "json")
    assert not rendered.ok
    line = json.loads(rendered.text)
    assert line["type"] == "UNDECODABLE"
    assert line["record"]["size"] == len(value)
    assert "Error" in line["record"]["error"]


@pytest.mark.integration
async def test_tail_keeps_flowing_past_bad_records_and_learns_new_schemas(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    serializer = AvroSerializer()
    v2 = AvroSerializer(SchemaRegistry(readers=[(V2, CallRecordV2)], writers=history_schemas()))
    producer = await producer_factory()
    topic = rollstream_topics.events
    for value in (
        serializer.encode(STARTED),
        b"not avro at all",
        v2.encode(CallRecordV2(**CALL.model_dump())),  # its schema is published only later
        serializer.encode(ENDED),
    ):
        await producer.send(topic, value, key=b"sess-1")
    await producer.flush()
    async with SchemaStore(kafka_settings, v2.registry) as store:
        await store.publish()

    out = io.StringIO()
    printed, undecodable = await tail(kafka_settings, TailOptions("events", fmt="json"), out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (printed, undecodable) == (4, 1)
    assert [line["type"] for line in lines] == [
        "SessionStarted",
        "UNDECODABLE",
        "CallRecord",
        "SessionEnded",
    ]
    assert "not an Avro single-object record" in lines[1]["record"]["error"]


@pytest.mark.integration
async def test_tail_follow_prints_new_records_until_stopped(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    out = io.StringIO()
    stop = asyncio.Event()
    options = TailOptions("events", from_end=True, follow=True, fmt="json", idle_timeout_s=0.2)
    task = asyncio.create_task(tail(kafka_settings, options, out, stop.is_set))
    producer = await producer_factory()
    async with asyncio.timeout(20):
        while '"SessionStarted"' not in out.getvalue():
            # Sent repeatedly: the tail may join after the first send (it starts at the end).
            await producer.send_and_wait(
                rollstream_topics.events, AvroSerializer().encode(STARTED), key=b"s"
            )
            await asyncio.sleep(0.3)
    stop.set()
    printed, undecodable = await asyncio.wait_for(task, 10)
    assert printed >= 1 and undecodable == 0


@pytest.mark.integration
async def test_tail_of_a_missing_topic_is_a_clear_error(kafka_settings: KafkaSettings) -> None:
    with pytest.raises(BrokerError, match="no such topic"):
        await tail(kafka_settings, TailOptions("events"), io.StringIO())
