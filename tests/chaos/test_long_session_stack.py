"""Sessions of 1,500 to 10,000 calls drifting at every call, through the real local stack.

Found by trying it as a new user would (issue 36, point 12): one python-harness session whose
every call drifts, starting a new segment that repeats the whole context (contexts to 33k
tokens), had its trajectory dead-lettered as 65 MB over the record budget; no trainer saw it.
Here ``rollstream up``'s stack (reference backend, interceptor, Kafka, reconstructor, scorer,
node) runs the long agent; a trainer client in its own process reads the group and
materialises its batch. The longer sessions compact their history every 300 calls, as
harnesses bound their context (10,000 calls would otherwise pass 300k tokens). Expected: one
trajectory with a segment per call, delivered once, its records far smaller than its segments
whole.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rollstream.dev.bench.long_stack import RUNS, LongRun, run_session
from rollstream.settings import KafkaSettings
from tests.fault_table import ChaosReport

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


#: The issue's 1,500 calls, and compaction every 300 over 3,000 calls in `make test`; the
#: bench's 10,000 (about 10 minutes of the reliability worker under load) in `make chaos`.
PARAMS = [
    pytest.param(RUNS[0], id="1500"),
    pytest.param(LongRun(3000, compact=300), id="3000"),
    pytest.param(RUNS[1], id="10000", marks=pytest.mark.long),
]


@pytest.mark.timeout(1200)  # under load the 10,000 calls take minutes (bench: about 2)
@pytest.mark.parametrize("run", PARAMS)
async def test_a_session_drifting_at_every_call_reaches_the_trainer_whole(
    run: LongRun, kafka_settings: KafkaSettings, tmp_path: Path, chaos_report: ChaosReport
) -> None:
    calls = run.calls
    result = await asyncio.to_thread(run_session, kafka_settings, run, tmp_path, f"long{calls}")
    assert (result["trajectories"], result["calls"], result["segments"]) == (1, calls, calls)
    compactions = (calls - 1) // run.compact if run.compact else 0
    expected = {"drift": calls - 1 - compactions} | (
        {"edited_history": compactions} if compactions else {}
    )
    assert result["breaks"] == expected
    assert result["trajectory_wholes"] == result["scored_wholes"] == 1
    # The segments whole weigh 9 bytes a token; the record carries each token about once.
    assert result["materialised_tokens"] > 10 * result["session_tokens"]
    assert result["trajectory_bytes"] < 12 * result["session_tokens"] + 64 * calls
    assert result["batch_tokens"] == result["materialised_tokens"]
    chaos_report(
        fault=f"a session of {calls:,} calls drifting at every call"
        + (f", compacted every {run.compact}" if run.compact else "")
        + " (issue 36, point 12)",
        load=f"{result['materialised_tokens']:,} tokens in its segments whole, "
        f"{result['session_tokens']:,} of its own; the local stack",
        lost=1 - result["trajectories"],
        duplicated=result["trajectory_wholes"] - 1 + result["scored_wholes"] - 1,
        errors=f"0; its trajectory {result['trajectory_bytes']:,} bytes in "
        f"{result['trajectory_records']} records (before: dead-lettered for its size)",
    )
