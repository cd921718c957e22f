"""The per-record budget every writer checks before sending, and dead letters that keep to it."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import RecordTooLargeError
from rollstream.kafka.deadletters import dead_letter
from rollstream.schemas import RECORD_BUDGET_BYTES, DeadLetter, check_record_size, record_size
from rollstream.schemas.topics import MAX_MESSAGE_BYTES
from tests.consumer_records import consumer_record


def _message(value: bytes) -> ConsumerRecord[bytes, bytes]:
    return consumer_record(TopicPartition("t", 0), 7, value, key=b"s")


def test_budget_leaves_room_under_the_topic_limit() -> None:
    assert 0 < RECORD_BUDGET_BYTES < MAX_MESSAGE_BYTES
    assert record_size(b"ab", b"cde") == 5
    assert record_size(None, None) == 0


def test_a_record_over_the_budget_is_refused_and_not_retriable() -> None:
    check_record_size(b"k", b"x" * (RECORD_BUDGET_BYTES - 1), "a trajectory")
    with pytest.raises(RecordTooLargeError) as info:
        check_record_size(b"k", b"x" * RECORD_BUDGET_BYTES, "a trajectory")
    assert not info.value.retriable
    assert info.value.size == RECORD_BUDGET_BYTES + 1
    assert "a trajectory" in str(info.value)


def test_a_dead_letter_of_an_oversized_value_fits_one_record() -> None:
    letter = dead_letter(_message(b"x" * RECORD_BUDGET_BYTES), ValueError("bad"), "g")
    assert letter.value is None
    assert "left out" in letter.error_message
    assert (letter.source_topic, letter.partition, letter.offset) == ("t", 0, 7)


def test_a_dead_letter_of_an_ordinary_value_keeps_it() -> None:
    letter = dead_letter(_message(b"payload"), ValueError("bad"), "g")
    assert isinstance(letter, DeadLetter)
    assert letter.value == b"payload"
