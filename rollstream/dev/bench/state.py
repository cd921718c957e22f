"""``rollstream bench state``: what the reconstructor's state costs the state topic at load.

One events partition at a cluster's load (by default the 512-GPU row of docs/scaling.md: 3,840
calls/s over six partitions, 16,384 sessions open, 30 calls a session) is simulated from its
sessions' offsets: a session's first and last record, the commit offset (the oldest open
session's first record) and so the ``emitted`` map each transaction's state carries, at a poll's
rate of transactions. Each state is written two ways, side by side: ``whole``, the map rewritten
in every transaction (how the reconstructor wrote it before issue 36), and ``changes``, one
record per entry that appeared or left (how it writes now). Twice: with sessions that end as
they should, and with one held open ``stuck_s`` (a harness that hangs until the idle timeout),
which holds the commit offset back and the map grows with every session ended meanwhile.

Then the writes of ``seconds`` of the typical case, for ``partitions`` partitions, go to a real
broker (a topic per layout, the state topic's configs) and a new owner's read of one partition's
state (``load_states``, what an assignment does) is timed on each.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_producer
from rollstream.kafka.state import encode_state, load_states, state_key, state_records
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]
GROUP = "rollstream-reconstruct"
EVENTS = "rollstream.events"
LAYOUTS = ("whole", "changes")
_SESSION_ID = 36  # a uuid's length, as nodes name sessions


@dataclass(frozen=True)
class StateBenchConfig:
    """One partition's load (the 512-GPU row by default) and how long to simulate it."""

    calls_per_s: float = 640.0
    sessions_open: int = 2_730
    calls_per_session: int = 30
    transactions_per_s: float = 5.0  # a poll every 200 ms
    seconds: float = 60.0
    stuck_s: float = 1_800.0  # the reconstructor's idle timeout
    partitions: int = 6


def states(config: StateBenchConfig, stuck: bool) -> Iterator[dict[str, Any]]:
    """Each transaction's state over ``seconds``, the window full of open sessions at start."""
    ended_per_s = config.calls_per_s / config.calls_per_session
    lasts_s = config.sessions_open / ended_per_s
    records_per_s = config.calls_per_s + 2 * ended_per_s

    def offset(t: float) -> int:
        return int((t + config.stuck_s + lasts_s) * records_per_s)

    emitted: dict[str, int] = {}
    order: deque[tuple[str, int]] = deque()  # emitted sessions, oldest last offset first
    next_session = 0
    # Sessions from twice a lifetime back: at 0 the map holds those ended in the last lifetime,
    # as in a steady state. The stuck session began ``stuck_s`` before the window's end, and
    # every session ended since is remembered.
    start = -2 * lasts_s
    if stuck:
        start = -config.stuck_s + config.seconds
    steps = int(config.seconds * config.transactions_per_s)
    for step in range(1, steps + 1):
        now = step / config.transactions_per_s
        while start + next_session / ended_per_s + lasts_s <= now:
            began = start + next_session / ended_per_s
            session = f"{next_session:0{_SESSION_ID}d}"
            emitted[session] = offset(began + lasts_s)
            order.append((session, emitted[session]))
            next_session += 1
        committed = offset(now - lasts_s)
        if stuck:
            committed = offset(start)
        while order and order[0][1] < committed:
            emitted.pop(order.popleft()[0], None)
        yield {"version": 1, "committed": committed, "emitted": dict(emitted)}


def _volume(config: StateBenchConfig, stuck: bool) -> dict[str, Any]:
    key = state_key(GROUP, TopicPartition(EVENTS, 0))
    whole = changes = records = 0
    written: dict[str, int] | None = None  # the first state is on the topic already
    entries: list[int] = []
    for state in states(config, stuck):
        if written is None:
            written = state["emitted"]
            continue
        whole += len(key) + len(encode_state(state))
        for record_key, value in state_records(key, state, written):
            changes += len(record_key) + len(value or b"")
            records += 1
        written = state["emitted"]
        entries.append(len(written))
    per_s = 1 / config.seconds
    return {
        "case": "stuck" if stuck else "typical",
        "entries": max(entries, default=0),
        "whole_bytes_per_s": round(whole * per_s),
        "whole_records_per_s": config.transactions_per_s,
        "changes_bytes_per_s": round(changes * per_s),
        "changes_records_per_s": round(records * per_s, 1),
    }


async def _fill(kafka: KafkaSettings, topic: str, config: StateBenchConfig, layout: str) -> int:
    """The typical case's writes of every partition, in ``layout``; bytes written."""
    producer = make_producer(kafka, linger_ms=20)
    await producer.start()
    written_bytes = 0
    try:
        for partition in range(config.partitions):
            key = state_key(GROUP, TopicPartition(EVENTS, partition))
            written: dict[str, int] = {}
            for state in states(config, stuck=False):
                if layout == "whole":
                    batch: list[tuple[bytes, bytes | None]] = [(key, encode_state(state))]
                else:
                    batch = state_records(key, state, written)
                    written = state["emitted"]
                for record_key, value in batch:
                    written_bytes += len(record_key) + len(value or b"")
                    await producer.send(topic, value, key=record_key)
        await producer.flush()
    finally:
        await producer.stop()
    return written_bytes


async def _assignment(
    kafka: KafkaSettings, config: StateBenchConfig, layout: str, progress: Progress
) -> dict[str, Any]:
    spec = next(s for s in topic_specs(TopicNames(kafka.topic_prefix)) if s.name.endswith("state"))
    topic = f"{kafka.topic_prefix}.state-{layout}"
    async with TopicAdmin(kafka) as admin:
        await admin.create([TopicSpec(topic, 1, spec.configs)])
    try:
        written = await _fill(kafka, topic, config, layout)
        progress(f"  {layout}: {written / 1e6:,.1f} MB written; reading one partition's state")
        began = time.perf_counter()
        found = await load_states(kafka, topic, GROUP, [TopicPartition(EVENTS, 0)])
        took = time.perf_counter() - began
    finally:
        await _delete(kafka, topic)
    [state] = found.values()
    return {
        "layout": layout,
        "written_mb": round(written / 1e6, 2),
        "load_s": round(took, 2),
        "entries": len(state["emitted"]),
    }


async def _delete(kafka: KafkaSettings, topic: str) -> None:
    with contextlib.suppress(Exception):  # best effort: a bench topic left behind is harmless
        async with TopicAdmin(kafka) as admin:
            await admin.delete([topic])


async def run_state_bench(
    config: StateBenchConfig, kafka: KafkaSettings, progress: Progress = print
) -> dict[str, Any]:
    """Both layouts' write volume in both cases, then a new owner's read of each on ``kafka``."""
    volume = [_volume(config, stuck) for stuck in (False, True)]
    for v in volume:
        progress(
            f"  {v['case']}: {v['entries']:,} entries; whole {v['whole_bytes_per_s']:,} B/s, "
            f"changes {v['changes_bytes_per_s']:,} B/s"
        )
    assignment = [await _assignment(kafka, config, layout, progress) for layout in LAYOUTS]
    return {"config": asdict(config), "volume": volume, "assignment": assignment}


def state_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: the state topic's write rate and a new owner's read, per layout."""
    c = result["config"]
    lines = [
        "## The reconstructor's state topic (`rollstream bench state`)",
        "",
        f"One events partition at {c['calls_per_s']:g} calls/s, {c['sessions_open']:,} sessions "
        f"open, {c['calls_per_session']} calls a session, {c['transactions_per_s']:g} "
        "transactions/s (the 512-GPU row of docs/scaling.md over six partitions), simulated from "
        "its sessions' offsets. `whole`: the emitted map rewritten in every transaction (before "
        "issue 36); `changes`: one record per entry that appears or leaves (now). `stuck`: one "
        f"session held open {c['stuck_s']:g} s, which holds the commit offset back.",
        "",
        "| case | entries in the state | whole: bytes/s | changes: bytes/s, records/s | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for v in result["volume"]:
        ratio = v["whole_bytes_per_s"] / max(v["changes_bytes_per_s"], 1)
        lines.append(
            f"| {v['case']} | {v['entries']:,} | {v['whole_bytes_per_s']:,} | "
            f"{v['changes_bytes_per_s']:,}, {v['changes_records_per_s']:g} | {ratio:,.0f} x |"
        )
    lines += [
        "",
        f"A new owner's read of one partition's state after {c['seconds']:g} s of "
        f"{c['partitions']} partitions' typical writes (a real broker; before compaction):",
        "",
        "| layout | written MB | read s | entries read |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {a['layout']} | {a['written_mb']:,} | {a['load_s']} | {a['entries']:,} |"
        for a in result["assignment"]
    ]
    lines.append("")
    return lines
