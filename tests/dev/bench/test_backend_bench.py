"""The backend benchmark runs end to end (tiny sizes) and reports what it measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rollstream.dev.bench.backend import BackendBenchConfig, run_backend_bench
from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.results_file import record, write_markdown


def test_percentile() -> None:
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([1, 2, 3, 4], 100) == 4
    assert percentile([5], 99) == 5


async def test_small_run_and_report(tmp_path: Path) -> None:
    affinity = os.sched_getaffinity(0)
    config = BackendBenchConfig(concurrency=(1, 3), max_tokens=5, tpot_ms=1, ttft_ms=1)
    lines: list[str] = []
    result = await run_backend_bench(config, progress=lines.append)
    levels = result["levels"]
    assert [level["concurrency"] for level in levels] == [1, 3]
    for level in levels:
        assert level["errors"] == 0
        assert level["tokens"] == 5 * level["concurrency"]
        assert level["tokens_per_s"] > 0 and level["server_cpu_s"] >= 0
    assert len(lines) == 2
    assert os.sched_getaffinity(0) == affinity  # the test process is not left pinned

    results = tmp_path / "results.json"
    data = record(results, "backend", result)
    assert json.loads(results.read_text()) == json.loads(json.dumps(data))
    markdown = tmp_path / "RESULTS.md"
    write_markdown(data, markdown)
    text = markdown.read_text()
    assert "| 3 | " in text and "MISSED" in text  # five tokens are far below the target rate
