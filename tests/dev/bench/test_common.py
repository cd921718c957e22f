"""The benchmarks' process measurements."""

from __future__ import annotations

import os
import threading

from rollstream.dev.bench.common import cpu_ns_between, thread_cpu_ns


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
