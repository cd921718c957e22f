"""Long sessions through the real local stack: bytes per trajectory, the trainer client's memory.

One ``python``-harness session of :func:`long_agent` (drifting at every call) goes through
``rollstream up``'s stack (reference backend, interceptor, Kafka, reconstructor, scorer, node);
then a trainer client in a process of its own reads its group, materialises its batch
(``to_batch``, packed) and reports its peak memory. The trajectory's records are read raw to
weigh them. Measured against the session's own tokens: the tokens its segments add to one
another (what deltas carry) and the tokens of all segments whole (what a trainer trains on).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from rollstream.dev.bench.runner import table
from rollstream.kafka.parts import PART_HEADER
from rollstream.kafka.reading import raw_records
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings

AGENT = "rollstream.dev.bench.long_stack:long_agent"
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


@dataclass(frozen=True)
class LongRun:
    """One session's shape (see :func:`long_agent`) and how long it may take."""

    calls: int
    words: int = 0
    answer: int = 32
    compact: int = 0
    timeout_s: float = 1800.0

    @property
    def instruction(self) -> str:
        """The agent's instruction."""
        return f"calls={self.calls} words={self.words} answer={self.answer} compact={self.compact}"


#: The issue's 1,500 calls with contexts to about 33k tokens, and 10,000 compacted every 300.
RUNS = (LongRun(1500), LongRun(10_000, compact=300, timeout_s=3600.0))


def _rollstream(env: dict[str, str], *args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rollstream", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"rollstream {' '.join(args)}: {done.stderr[-2000:]}{done.stdout[-500:]}"
        )
    return done.stdout


def run_session(kafka: KafkaSettings, run: LongRun, workdir: Path, name: str) -> dict[str, Any]:
    """The session through a stack of its own under ``workdir``; what the client and log saw.

    Raises RuntimeError when a step fails (its output in the message).
    """
    env = os.environ | {
        "ROLLSTREAM_STATE_DIR": str(workdir / "state"),
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
    }
    ports = ["--backend-port", "0", "--interceptor-port", "0", "--admin-port", "0"]
    _rollstream(env, "up", "--detach", *ports, "--node-port", "0", timeout=300)
    try:
        task = workdir / f"{name}.yaml"
        task.write_text(
            yaml.safe_dump(
                {
                    "task_id": name,
                    "group_id": f"{name}-g",
                    "instruction": run.instruction,
                    "samples": 1,
                    "harness": "python",
                    "metadata": {"harness.function": AGENT},
                    "evaluator": {"kind": "command", "config": {"command": "test -f calls.txt"}},
                    "agent_timeout_s": run.timeout_s,
                }
            )
        )
        began = time.monotonic()
        out = _rollstream(env, "run", "--task", str(task), timeout=run.timeout_s + 120)
        session_s = time.monotonic() - began
        client = subprocess.run(
            [sys.executable, "-m", "rollstream.dev.bench.long_stack", f"{name}-g", name],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        if client.returncode != 0:
            raise RuntimeError(f"the trainer client failed: {client.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(client.stdout.strip().splitlines()[-1])
    finally:
        _rollstream(env, "down", timeout=120)
    weights = asyncio.run(record_weights(kafka, f"{name}-g".encode()))
    return asdict(run) | result | weights | {"session_s": round(session_s, 1), "run": out[-300:]}


async def record_weights(kafka: KafkaSettings, key: bytes) -> dict[str, int]:
    """Raw bytes, records, parts and wholes of the key's trajectory and Scored records."""
    names = TopicNames(kafka.topic_prefix)
    out: dict[str, int] = {}
    for label, topic in (("trajectory", names.trajectories), ("scored", names.scored)):
        size = records = parts = wholes = 0
        async for m in raw_records(kafka, topic):
            if m.key != key:
                continue
            part = next((v for n, v in m.headers or () if n == PART_HEADER), None)
            size += len(m.value or b"")
            records += 1
            parts += part is not None
            wholes += part is None or part.startswith(b"0/")
        out |= {
            f"{label}_bytes": size,
            f"{label}_records": records,
            f"{label}_parts": parts,
            f"{label}_wholes": wholes,
        }
    return out


async def _client(group_id: str, task_id: str) -> dict[str, Any]:
    """Read the group with the trainer client, materialise its batch, report memory."""
    from rollstream.consumers.trainer import TrainerSettings, TrajectoryStream, to_batch
    from rollstream.schemas.segment_deltas import to_wire

    kafka = KafkaSettings()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    settings = TrainerSettings()
    async with TrajectoryStream(settings, f"long-{group_id}", kafka) as stream:
        async with asyncio.timeout(300):
            async for group in stream.groups():
                if group.task_id == task_id:
                    break
        read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        batch = to_batch(group, layout="packed")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    [record] = group.records
    segments = record.trajectory.segments
    carried = sum(len(s["input_ids"]) // 4 for s in to_wire([s.model_dump() for s in segments]))
    return {
        "trajectories": len(group.records),
        "segments": len(segments),
        "breaks": record.trajectory.stats.break_reasons,
        "calls": record.trajectory.stats.calls,
        "session_tokens": carried,
        "materialised_tokens": sum(len(s.input_ids) for s in segments),
        "batch_tokens": batch.num_tokens,
        "client_base_mb": round(base / 1024, 1),
        "client_read_mb": round(read / 1024, 1),
        "client_peak_mb": round(peak / 1024, 1),
    }


def long_stack_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: per session, bytes against tokens, and the client's memory."""
    rows = [
        (
            f"{run['calls']:,}",
            run["compact"] or "never",
            f"{run['segments']:,}",
            f"{run['session_tokens']:,}",
            f"{run['materialised_tokens']:,}",
            f"{run['trajectory_bytes']:,} ({run['trajectory_records']}, {run['trajectory_parts']})",
            f"{run['trajectory_bytes'] / max(1, run['session_tokens']):.1f}",
            f"{run['client_peak_mb']} ({run['client_base_mb']}, {run['client_read_mb']})",
            run["session_s"],
        )
        for run in result["runs"]
    ]
    header = ["calls", "compacted every", "segments", "session tokens", "materialised tokens"]
    header += ["trajectory bytes (records, parts)", "bytes / session token"]
    header += ["client peak MB (base, after reading)", "session s"]
    return [
        "## Long sessions through the stack (`rollstream bench long-session`)",
        "",
        "One `python`-harness session of the long agent (drifting at every call: each answer is "
        "sent back edited) through `rollstream up`'s stack on the reference backend; a trainer "
        "client in its own process reads its group and materialises the packed batch. "
        "*Session tokens*: the tokens the segments add to one another (what the deltas carry); "
        "*materialised*: all segments whole (what a trainer trains on).",
        "",
        *table(header, "rrrrrlrlr", rows),
        "",
        "The log carries a session's tokens once (9 bytes a token: id, mask, logprob) however "
        "many segments repeat them; the client holds every segment whole, as a trainer needs "
        "them, so its memory follows the materialised tokens.",
        "",
    ]


def _params(instruction: str) -> dict[str, int]:
    """The long agent's ``calls=N words=W answer=A compact=K``, defaults for those missing."""
    values = dict(part.split("=", 1) for part in instruction.split() if "=" in part)
    defaults = {"calls": 100, "words": 20, "answer": 32, "compact": 0}
    return {name: int(values.get(name, default)) for name, default in defaults.items()}


async def long_agent(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """``calls`` chat calls, each answer sent back changed; 0 when every call was answered.

    The ``python`` harness runs it: one Chat Completions conversation through the interceptor,
    each turn adding a user message of ``words`` words (default 20) and the answer (at most
    ``answer`` tokens, default 32), sent back with a character put before its text, as a harness
    that re-renders or edits what the model wrote does. The next prompt then leaves the sampled
    tokens at the last answer's start: a ``drift`` break (answers end at their first sentence;
    one cut at ``answer`` tokens gives ``truncated``), so reconstruction starts a new segment at
    every call, each repeating the whole context so far: the case whose trajectory grows with
    calls x context unless segments are written as deltas (issue 36, point 12). Every
    ``compact`` turns (0: never, the default) the history becomes one summary message, as
    harnesses bound their context.
    """
    params = _params(instruction)
    calls, words, compact = params["calls"], params["words"], params["compact"]
    model = os.environ.get("ROLLSTREAM_MODEL", "rollstream-tiny")
    system = {"role": "system", "content": "You are a patient agent."}
    messages: list[dict[str, Any]] = [system]
    headers = {"Authorization": f"Bearer {session}"}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout
    ) as http:
        for turn in range(calls):
            if compact and turn and turn % compact == 0:
                summary = f"Summary: steps 0 to {turn - 1} are done."
                messages = [system, {"role": "user", "content": summary}]
            text = " ".join(_WORDS[(turn + i) % len(_WORDS)] for i in range(words))
            messages.append({"role": "user", "content": f"Step {turn}: {text}."})
            # Answers end at their first sentence, as a model stops: short, and ended.
            body = {
                "model": model,
                "messages": messages,
                "max_tokens": params["answer"],
                "stop": ["."],
            }
            async with http.post("v1/chat/completions", json=body) as response:
                response.raise_for_status()
                answer = (await response.json())["choices"][0]["message"]
            # What a harness that edits the answer's text sends back: the prompt leaves the
            # sampled tokens at the answer's first token.
            messages.append({"role": "assistant", "content": f"~{answer.get('content') or ''}"})
    (workdir / "calls.txt").write_text(f"{calls}\n")
    return 0


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_client(sys.argv[1], sys.argv[2]))))
