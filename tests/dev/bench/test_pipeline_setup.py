"""The set-up the pipeline and instances benchmarks share: input, command lines, groups."""

from __future__ import annotations

from rollstream.dev.bench.instances import InstancesBenchConfig
from rollstream.dev.bench.pipeline import PipelineBenchConfig
from rollstream.dev.bench.pipeline_run import (
    bench_group,
    input_shape,
    input_summary,
    reconstruct_args,
    score_args,
    session_load,
)
from rollstream.settings import KafkaSettings


def test_both_configs_describe_their_input_alike() -> None:
    for config in (
        PipelineBenchConfig(
            sessions=10, calls=3, system_tokens=100, tool_result_tokens=10, completion_tokens=5
        ),
        InstancesBenchConfig(
            sessions=10, calls=3, system_tokens=100, tool_result_tokens=10, completion_tokens=5
        ),
    ):
        assert input_summary(config) == {"sessions": 10, "calls": 30, "prompt_tokens_last": 130}
        shape = input_shape(config)
        assert (shape.turns, shape.system_tokens, shape.completion_tokens) == (3, 100, 5)


def test_the_services_command_lines_and_groups() -> None:
    config = InstancesBenchConfig(reconstructor_batch_records=7, scorer_batch_records=3)
    assert bench_group(KafkaSettings(topic_prefix="run1"), "score") == "run1-bench-score"
    assert reconstruct_args(config, "g") == [
        *("reconstruct", "--strategy", "prefix_merge", "--group", "g"),
        *("--max-batch-records", "7"),
    ]
    assert score_args(config, "g", "--input", "copies") == [
        *("score", "--group-id", "g", "--input", "copies"),
        *("--default-evaluator", "session_completed", "--max-batch-records", "3"),
    ]


def test_sessions_are_copies_of_the_pool_under_their_own_ids() -> None:
    config = PipelineBenchConfig(calls=2, system_tokens=20, tool_result_tokens=5)
    load = session_load("tp", 5, 2, input_shape(config))
    assert [sid for sid, _ in load] == [f"tp-{n}" for n in range(5)]
    assert all(len(values) == len(load[0][1]) for _, values in load)
    assert load[0][1] != load[2][1]  # same draw, another session id inside
