"""The reconstructor's state as records within the budget: chunks, tombstones, reassembly;
and read back whole while another partition's transaction is open on the state topic."""

from __future__ import annotations

import asyncio
import json

from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.kafka.state import (
    assemble_state,
    chunk_key,
    encode_state,
    load_states,
    state_key,
    state_records,
)
from rollstream.schemas import record_size
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory

KEY = b"rollstream-reconstruct-tree/rollstream.events/3"


def _state(sessions: int, committed: int = 7) -> dict[str, object]:
    emitted = {f"session-{i:05d}-{'x' * (i % 40)}": committed + i for i in range(sessions)}
    return {"version": 1, "committed": committed, "emitted": emitted}


def _written(records: list[tuple[bytes, bytes | None]], latest: dict[bytes, bytes]) -> None:
    """What a compacted topic read back holds after ``records`` (tombstones are not read)."""
    for key, value in records:
        if value is not None:
            latest[key] = value


def test_a_state_that_fits_is_one_record_as_before() -> None:
    state = _state(3)
    [(key, value)] = state_records(KEY, state)
    assert key == KEY and value is not None
    assert json.loads(value) == {**state, "chunks": 1}
    # A head written before chunks existed reads as one record.
    assert assemble_state(KEY, {KEY: encode_state(state)}) == state


@settings(max_examples=30, deadline=None)
@given(sessions=st.integers(0, 400), budget=st.integers(1400, 6000))
def test_a_large_state_spreads_over_records_within_the_budget(sessions: int, budget: int) -> None:
    state = _state(sessions)
    records = state_records(KEY, state, budget=budget)
    assert [k for k, _ in records] == [KEY] + [chunk_key(KEY, i) for i in range(1, len(records))]
    assert all(v is not None and record_size(k, v) <= budget for k, v in records)
    latest: dict[bytes, bytes] = {}
    _written(records, latest)
    assert assemble_state(KEY, latest) == {**state, "chunks": len(records)}


def test_a_smaller_state_tombstones_the_chunks_it_no_longer_needs_and_reads_back_alone() -> None:
    latest: dict[bytes, bytes] = {}
    big = state_records(KEY, _state(300), budget=2000)
    assert len(big) > 3
    _written(big, latest)
    small_state = _state(20, committed=400)
    small = state_records(KEY, small_state, previous_chunks=len(big), budget=2000)
    values = [v for _, v in small if v is not None]
    tombstones = [k for k, v in small if v is None]
    assert tombstones == [chunk_key(KEY, i) for i in range(len(values), len(big))]
    _written(small, latest)  # the stale chunks' old values are still what a reader meets
    assert assemble_state(KEY, latest) == {**small_state, "chunks": len(values)}


def test_a_state_never_written_is_none() -> None:
    assert assemble_state(KEY, {chunk_key(KEY, 1): b'{"emitted":{}}'}) is None


async def test_a_state_committed_after_an_open_transaction_is_waited_for_not_missed(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, producer_factory: ProducerFactory
) -> None:
    """The state topic is shared by every input partition: another partition's transaction
    open on it hides, from a read_committed reader that stops at the last stable offset, the
    state a partition's owner committed after it (with its offset, already in the group).
    Before: the load returned no state; now it waits for the open transaction to end."""
    topic = await topic_factory(partitions=1, configs={"cleanup.policy": "compact"})
    tp = TopicPartition("rollstream.events", 0)
    key = state_key("g", tp)
    other = await producer_factory(transactional_id="g-rollstream.events-1")
    owner = await producer_factory(transactional_id="g-rollstream.events-0")
    await other.begin_transaction()
    await other.send_and_wait(
        topic, b'{"emitted": {}}', key=state_key("g", tp._replace(partition=1))
    )
    async with owner.transaction():
        for record_key, value in state_records(key, {"committed": 9, "emitted": {"s": 3}}):
            await owner.send(topic, value, key=record_key)
    loading = asyncio.create_task(load_states(kafka_settings, topic, "g", [tp]))
    await asyncio.sleep(2.0)
    assert not loading.done()  # waiting for the open transaction, not returning without it
    await other.abort_transaction()
    states = await asyncio.wait_for(loading, 60)
    assert states[tp]["committed"] == 9 and states[tp]["emitted"] == {"s": 3}
