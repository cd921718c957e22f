"""The reconstructor's state as records within the budget: chunks, tombstones, reassembly;
and read back whole while another partition's transaction is open on the state topic."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.kafka.state import (
    HEAD_VERSION,
    assemble_state,
    chunk_key,
    encode_state,
    entry_key,
    load_states,
    state_key,
    state_records,
)
from rollstream.schemas import record_size
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory

KEY = b"rollstream-reconstruct-tree/rollstream.events/3"
SESSIONS = st.sampled_from([f"s-{i}" for i in range(12)] + ["with#hash", "with/slash", "é"])


def _state(sessions: int, committed: int = 7) -> dict[str, object]:
    emitted = {f"session-{i:05d}-{'x' * (i % 40)}": committed + i for i in range(sessions)}
    return {"version": 1, "committed": committed, "emitted": emitted}


def _apply(records: list[tuple[bytes, bytes | None]], latest: dict[bytes, bytes]) -> None:
    """What a compacted topic read back holds after ``records`` (a tombstone deletes)."""
    for key, value in records:
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value


def test_a_state_is_a_small_head_and_one_record_per_entry_that_old_readers_refuse() -> None:
    state = _state(3)
    records = state_records(KEY, state)
    assert [k for k, _ in records] == [KEY] + [entry_key(KEY, s) for s in state["emitted"]]  # type: ignore[attr-defined]
    head = records[0][1]
    assert head is not None and head.startswith(HEAD_VERSION)
    with pytest.raises(json.JSONDecodeError):
        json.loads(head)  # what a reader of the older layout does with it: stop, loudly
    assert all(v is not None and record_size(k, v) < 200 for k, v in records)
    latest: dict[bytes, bytes] = {}
    _apply(records, latest)
    assert assemble_state(KEY, latest) == state


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.dictionaries(SESSIONS, st.integers(0, 50), max_size=10), min_size=1, max_size=8
    )
)
def test_each_state_writes_only_its_changes_and_reads_back_as_written(
    steps: list[dict[str, int]],
) -> None:
    """Whatever the sequence of states, the topic reads back as the last one; each writes a
    head and one record per entry that appeared, changed or left (none for the others)."""
    latest: dict[bytes, bytes] = {}
    written: dict[str, int] = {}
    for committed, emitted in enumerate(steps):
        state = {"version": 1, "committed": committed, "emitted": emitted}
        records = state_records(KEY, state, written)
        changed = {s for s in emitted.keys() | written.keys() if emitted.get(s) != written.get(s)}
        assert len(records) == 1 + len(changed)
        _apply(records, latest)
        assert assemble_state(KEY, latest) == state
        written = emitted


def test_an_older_layout_state_is_read_and_the_next_state_tombstones_its_chunks() -> None:
    old = _state(5)
    emitted = dict(old["emitted"])  # type: ignore[call-overload]
    items = list(emitted.items())
    latest = {
        KEY: encode_state({**old, "emitted": dict(items[:2]), "chunks": 3}),
        chunk_key(KEY, 1): encode_state({"emitted": dict(items[2:4])}),
        chunk_key(KEY, 2): encode_state({"emitted": dict(items[4:])}),
    }
    read = assemble_state(KEY, latest)
    assert read == {**old, "chunks": 3}
    # The oldest heads (one record, before chunks) read as a one-record older state.
    assert assemble_state(KEY, {KEY: encode_state(old)}) == {**old, "chunks": 1}
    new = {"version": 1, "committed": 9, "emitted": dict(items[3:]) | {"later": 12}}
    records = state_records(KEY, new, emitted, previous_chunks=3)
    tombstones = [k for k, v in records if v is None]
    assert tombstones == [entry_key(KEY, s) for s, _ in items[:3]] + [
        chunk_key(KEY, 1),
        chunk_key(KEY, 2),
    ]
    # The entries the older state had are written (the topic held them in chunks, not alone).
    records = state_records(KEY, new, None, previous_chunks=3)
    _apply(records, latest)
    assert assemble_state(KEY, latest) == new


def test_a_state_never_written_is_none() -> None:
    assert assemble_state(KEY, {chunk_key(KEY, 1): b'{"emitted":{}}'}) is None
    assert assemble_state(KEY, {entry_key(KEY, "s"): b"3"}) is None


async def test_a_state_read_back_from_the_topic_honours_its_tombstones(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, producer_factory: ProducerFactory
) -> None:
    """An entry that left the state is gone from what a new owner reads (before compaction
    removed its older value; before: tombstones were skipped and the entry came back)."""
    topic = await topic_factory(partitions=1, configs={"cleanup.policy": "compact"})
    tp = TopicPartition("rollstream.events", 0)
    key = state_key("g#1", tp)  # a group id may hold the separator
    owner = await producer_factory(transactional_id="g-rollstream.events-0")
    first_emitted = {"a": 4, "b": 5}
    first = {"version": 1, "committed": 3, "emitted": first_emitted}
    second = {"version": 1, "committed": 5, "emitted": {"b": 5, "c": 6}}
    for records in (state_records(key, first), state_records(key, second, first_emitted)):
        async with owner.transaction():
            for record_key, value in records:
                await owner.send(topic, value, key=record_key)
    states = await load_states(kafka_settings, topic, "g#1", [tp])
    assert states == {tp: second}


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
