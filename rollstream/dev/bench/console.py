"""``rollstream bench console``: the console at scale, in-process (no broker, no browser).

``sessions`` sessions of ``calls`` calls each (a million CallRecords by default) and one scored
trajectory each, in groups of ``group_size``, go through the console's aggregates as its feed
hands them over: the fleet (sessions, rates, errors), the rewards (groups, advantages, series)
and the trajectory index. Measured side by side in one run:

- what the feed's work costs: records/s through the aggregates, and Avro decoding plus the
  aggregates on a sample of encoded records (the feed's work but for the network);
- what the console holds: bytes per session (its facts and its calls' timings) and per indexed
  trajectory, from tracemalloc;
- what a browser loads: the fleet's snapshot, a page of sessions (unfiltered, and filtered),
  a page of groups and the reward series, each with the time the server takes to answer it,
  against the whole session list (what a page without paging or server-side aggregates would
  send), as bytes and as a ratio.
"""

from __future__ import annotations

import json
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from rollstream.consumers.console.feed import Aggregates, Place, TrajectoryIndex
from rollstream.consumers.console.fleet import Fleet
from rollstream.consumers.console.rewards import Rewards
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    CallRecord,
    Logprobs,
    LossMask,
    Scored,
    Segment,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    TokenIds,
    Trajectory,
    TrajectoryStats,
    TrajectoryStatus,
    utcnow,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ConsoleBenchConfig:
    """How big a run the console holds, and how often each request is timed."""

    sessions: int = 20_000
    calls: int = 50
    group_size: int = 8
    repeats: int = 20
    decode_sample: int = 20_000


def _records(config: ConsoleBenchConfig, template: Scored) -> Iterator[AvroRecord]:
    """Each session's records, as they arrive: started, calls, ended, then its scored record.

    One session's records are made once and renamed for the others: the aggregates read ids,
    times and counts, and making a million distinct CallRecords would time pydantic, not them.
    """
    shape = SyntheticShape(
        turns=config.calls, system_tokens=8, tool_result_tokens=2, completion_tokens=40
    )
    base = synthetic_session("s", shape)
    for i in range(config.sessions):
        session = f"session-{i:07d}"
        group = f"group-{i // config.group_size:06d}"
        shift = timedelta(seconds=i * 0.01)
        for record in base.records:
            if isinstance(record, CallRecord):
                yield record.model_copy(
                    update={
                        "session_id": session,
                        "call_id": f"{session}-{record.seq}",
                        "timings": record.timings.model_copy(
                            update={
                                "started_at": record.timings.started_at + shift,
                                "ended_at": (record.timings.ended_at or record.started_at) + shift,
                            }
                        ),
                    }
                )
            elif isinstance(record, SessionStarted | SessionEnded):
                yield record.model_copy(
                    update={"session_id": session, "group_id": group, "harness": "pi"}
                )
        trajectory = template.trajectory.model_copy(
            update={
                "trajectory_id": f"{session}/prefix_merge",
                "session_id": session,
                "group_id": group,
                "sample_index": i % config.group_size,
            }
        )
        yield template.model_copy(update={"trajectory": trajectory, "reward": float(i % 3 == 0)})


def _feed() -> Aggregates:
    """Fresh aggregates, as a feed holds them."""
    return Aggregates(Fleet(), Rewards(), TrajectoryIndex())


def _timed(repeats: int, answer: Callable[[], Any]) -> dict[str, Any]:
    """Median milliseconds of ``answer()`` and the bytes of its JSON."""
    times = []
    body = b""
    for _ in range(repeats):
        began = time.perf_counter()
        body = json.dumps(answer(), separators=(",", ":")).encode()
        times.append((time.perf_counter() - began) * 1000)
    return {"ms": round(statistics.median(times), 2), "bytes": len(body)}


def scored_template(tokens: int = 2_000) -> Scored:
    """A scored trajectory of one segment of ``tokens`` tokens, half of them sampled."""
    segment = Segment(
        input_ids=TokenIds.from_list(range(tokens)),
        loss_mask=LossMask.from_list([i % 2 for i in range(tokens)]),
        logprobs=Logprobs.from_list([-0.5] * tokens),
        call_ids=["c0"],
    )
    trajectory = Trajectory(
        trajectory_id="t",
        session_id="s",
        task_id="task",
        group_id="g",
        harness="pi",
        strategy="prefix_merge",
        status=TrajectoryStatus.COMPLETE,
        session_status=SessionStatus.COMPLETED,
        segments=[segment],
        stats=TrajectoryStats(calls=1),
        created_at=utcnow(),
    )
    return Scored(trajectory=trajectory, reward=1.0, evaluator="command", scored_at=utcnow())


def _ingest(config: ConsoleBenchConfig, say: Progress) -> tuple[Aggregates, dict[str, Any]]:
    """Every record through a feed's dispatch, timed; then again, for the memory it keeps.

    Two passes: tracemalloc slows the code it watches several times over.
    """
    template = scored_template()
    feed = _feed()
    records = 0
    busy = 0.0
    for offset, record in enumerate(_records(config, template)):
        began = time.perf_counter()
        feed.dispatch(record, Place("bench.scored", 0, offset))
        busy += time.perf_counter() - began
        records += 1
        if records % 250_000 == 0:
            say(f"console: {records:,} records through the aggregates")
    del feed
    say("console: again, measuring the memory held")
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    feed = _feed()
    for offset, record in enumerate(_records(config, template)):
        feed.dispatch(record, Place("bench.scored", 0, offset))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return feed, {
        "records": records,
        "records_per_s": round(records / busy),
        "held_mb": round(held / 2**20, 1),
        "bytes_per_session": round(held / config.sessions),
        "bytes_per_call": round(held / max(feed.fleet.calls, 1)),
    }


def _decode(config: ConsoleBenchConfig) -> dict[str, Any]:
    """Avro decoding plus the aggregates, on encoded records: the feed's work but the network."""
    serializer = AvroSerializer()
    sample_config = ConsoleBenchConfig(
        sessions=max(1, config.decode_sample // (config.calls + 3)), calls=config.calls
    )
    encoded = [serializer.encode(r) for r in _records(sample_config, scored_template())]
    feed = _feed()
    began = time.perf_counter()
    for offset, value in enumerate(encoded):
        feed.dispatch(serializer.decode(value), Place("bench.scored", 0, offset))
    spent = time.perf_counter() - began
    return {"records": len(encoded), "records_per_s": round(len(encoded) / spent)}


def run_console_bench(config: ConsoleBenchConfig, say: Progress = print) -> dict[str, Any]:
    """Ingest, memory and request costs (see the module docstring)."""
    say(
        f"console: {config.sessions:,} sessions x {config.calls} calls "
        f"({config.sessions * (config.calls + 3):,} records)"
    )
    feed, ingest = _ingest(config, say)
    say(f"console: {ingest['records_per_s']:,} records/s, {ingest['held_mb']} MB held")
    decode = _decode(config)
    fleet, rewards = feed.fleet, feed.rewards
    now = time.time() + 3600
    n = config.repeats
    requests = {
        "fleet snapshot (each second, live)": _timed(n, lambda: fleet.snapshot(now)),
        "sessions, page of 50": _timed(n, lambda: fleet.page({}, 0, 50)),
        "sessions, filtered by group": _timed(
            n, lambda: fleet.page({"group_id": "group-000001"}, 0, 50)
        ),
        "sessions, page of 50 from the end": _timed(
            n, lambda: fleet.page({}, config.sessions - 50, 50)
        ),
        "groups, page of 20": _timed(n, lambda: rewards.page({}, 0, 20)),
        "reward series": _timed(n, rewards.series),
    }
    everything = _timed(1, lambda: [row.public() for row in fleet.sessions.values()])
    say(f"console: the whole session list is {everything['bytes']:,} bytes")
    return {
        "config": asdict(config),
        "ingest": ingest,
        "decode": decode,
        "requests": [{"request": k} | v for k, v in requests.items()],
        "whole_session_list": everything,
        "indexed": len(feed.index.places),
    }


def console_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: what the console holds and what a browser loads."""
    c, ingest, decode = result["config"], result["ingest"], result["decode"]
    whole = result["whole_session_list"]["bytes"]
    lines = [
        "## The console at scale (`rollstream bench console`)",
        "",
        f"{c['sessions']:,} sessions of {c['calls']} calls ({ingest['records']:,} records: "
        f"calls, session records and one scored trajectory each, in groups of "
        f"{c['group_size']}) through the console's aggregates, in one process.",
        "",
        f"- Aggregates alone: {ingest['records_per_s']:,} records/s; with Avro decoding "
        f"({decode['records']:,} records): {decode['records_per_s']:,} records/s.",
        f"- Held: {ingest['held_mb']:,} MB, {ingest['bytes_per_session']:,} bytes a session "
        f"({ingest['bytes_per_call']:,} a call), {result['indexed']:,} trajectories indexed; "
        "no record is kept, the viewer reads one back from Kafka when it opens it.",
        "",
        "What the browser loads, against the whole session list "
        f"({whole:,} bytes, what a page without paging would send):",
        "",
        "| request | server ms (median) | bytes | share of the whole list |",
        "|---|---:|---:|---:|",
    ]
    for r in result["requests"]:
        lines.append(
            f"| {r['request']} | {r['ms']:,} | {r['bytes']:,} | {r['bytes'] / whole:.4%} |"
        )
    lines.append("")
    return lines
