"""The benchmarks' process measurements."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from rollstream.dev.bench.common import abba, cpu_ns_between, thread_cpu_ns

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results.json"


def test_cpu_between_snapshots_counts_new_threads_whole_and_misses_ended_ones() -> None:
    before = {1: 100, 2: 50}
    after = {1: 160, 3: 30}  # thread 2 ended, thread 3 started
    assert cpu_ns_between(before, after) == 60 + 30


def test_this_process_threads_are_read_and_their_time_grows() -> None:
    before = thread_cpu_ns(os.getpid())
    assert os.getpid() in before
    sum(i * i for i in range(200_000))  # some CPU on this thread
    worker = threading.Thread(target=lambda: sum(i * i for i in range(200_000)))
    worker.start()
    worker.join()
    assert cpu_ns_between(before, thread_cpu_ns(os.getpid())) > 0


def test_a_run_records_the_machines_speed_and_the_report_says_it(tmp_path: Path) -> None:
    # The shared machine runs at other speeds on other days: the absolute figures of two runs
    # compare only through it.
    from rollstream.dev.bench.common import machine
    from rollstream.dev.bench.results_file import write_markdown

    speed = machine()["reference_loop_ms"]
    assert isinstance(speed, float) and speed > 0
    (tmp_path / "bench").mkdir()
    stream = json.loads(RESULTS.read_text())["benchmarks"]["stream"]  # a real run's section
    stream["machine"]["reference_loop_ms"] = 12.5
    write_markdown({"benchmarks": {"stream": stream}}, tmp_path / "bench" / "R.md")
    assert "a fixed Python loop took 12.5 ms of CPU" in (tmp_path / "bench" / "R.md").read_text()


def test_rounds_alternate_their_order() -> None:
    variants = ("a", "b", "c")
    assert [list(abba(variants, r)) for r in range(4)] == [
        ["a", "b", "c"],
        ["c", "b", "a"],
        ["a", "b", "c"],
        ["c", "b", "a"],
    ]
