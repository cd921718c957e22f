"""The node's dead letters: a refused letter holds its record uncommitted, never lost.

Before: a task record that could not be decoded was taken as done whether or not its letter
reached the dead-letter topic, so the commit passed a record nobody had kept; and one refusal
muted every letter for a minute, each of those committed past too.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import SerializationError
from rollstream.host import free_port
from rollstream.producers.node import letters as letters_module
from rollstream.producers.node.letters import DeadLetters
from rollstream.producers.node.progress import PartitionProgress
from rollstream.schemas import AvroSerializer, DeadLetter, TopicNames
from rollstream.settings import KafkaSettings
from tests.consumer_records import consumer_record
from tests.kafka_reading import read_records

TP = TopicPartition("rollstream.tasks", 0)


def _poison(offset: int) -> ConsumerRecord[bytes, bytes]:
    return consumer_record(TP, offset, b"\x00 not a task", key=b"t")


def _letters(kafka: KafkaSettings) -> DeadLetters:
    return DeadLetters(kafka, AvroSerializer(), "rollstream-node", TopicNames("x").deadletters)


async def test_a_refused_letter_holds_the_commit_and_mutes_the_broker_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    letters = _letters(KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}"))
    progress = PartitionProgress(committed=1)
    began = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=letters_module.__name__):
        async with asyncio.timeout(30):
            await letters.take(TP, progress, _poison(1), SerializationError("bad"))
            first = time.monotonic() - began
            await letters.take(TP, progress, _poison(2), SerializationError("bad"))
    assert time.monotonic() - began - first < 0.5  # the second does not try again
    assert (letters.held, letters.failed, letters.sent) == (2, 1, 0)
    point = progress.point()
    assert point is not None and point.offset == 1  # not past the records nobody kept
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not dead-letter rollstream.tasks[0]@1 (held" in m for m in messages)
    assert any(
        "not dead-lettered yet (held, retrying later): rollstream.tasks[0]@2" in m for m in messages
    )
    # Handed over meanwhile: the held letters are the next owner's to read again.
    assert not await letters.retry({})
    assert letters.held == 0
    await letters.stop()


async def test_a_held_letter_is_written_once_the_broker_takes_it_and_the_commit_passes(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(letters_module, "LETTER_BACKOFF_S", 0.0)
    letters = DeadLetters(
        KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}"),
        AvroSerializer(),
        "rollstream-node",
        rollstream_topics.deadletters,
    )
    progress = PartitionProgress(committed=4)
    async with asyncio.timeout(60):
        await letters.take(TP, progress, _poison(4), SerializationError("bad"))
        assert letters.held == 1
        letters.kafka = kafka_settings  # the broker is back
        assert await letters.retry({TP: progress})
        await letters.take(TP, progress, _poison(5), SerializationError("worse"))
    assert (letters.held, letters.failed, letters.sent) == (0, 1, 2)
    point = progress.point()
    assert point is not None and point.offset == 6
    await letters.stop()
    kept = await read_records(kafka_settings, rollstream_topics.deadletters, DeadLetter, 2)
    assert [(k.offset, k.error_message) for k in kept] == [(4, "bad"), (5, "worse")]
    assert all(k.value == b"\x00 not a task" and k.source_topic == TP.topic for k in kept)
