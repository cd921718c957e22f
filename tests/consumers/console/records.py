"""Records for the console's tests: the sample records with segments of real tokenizer ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import (
    CallRecord,
    Logprobs,
    LossMask,
    Scored,
    Segment,
    TokenIds,
    Trajectory,
)
from tests.schemas.samples import SCORED, TRAJECTORY


def conversation(
    tokenizer: ChatTokenizer,
    user: str,
    turns: list[tuple[str, str]],
    call_ids: list[str] | None = None,
) -> Segment:
    """One segment of a tool-using conversation: the prompt, then per turn a completion
    (loss mask 1, logprob -0.5 - k) and a tool result (mask 0)."""
    prompt = tokenizer.render([{"role": "user", "content": user}])
    ids = tokenizer.encode(prompt)
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    for k, (answer, tool_result) in enumerate(turns):
        completion = [*tokenizer.encode(answer), tokenizer.eos_id]
        ids += completion
        mask += [1] * len(completion)
        logprobs += [-0.5 - k] * len(completion)
        if tool_result:
            glue = tokenizer.encode(
                f"\n<|im_start|>user\n<tool_response>\n{tool_result}\n</tool_response><|im_end|>"
                "\n<|im_start|>assistant\n"
            )
            ids += glue
            mask += [0] * len(glue)
            logprobs += [0.0] * len(glue)
    return Segment(
        input_ids=TokenIds.from_list(ids),
        loss_mask=LossMask.from_list(mask),
        logprobs=Logprobs.from_list(logprobs),
        call_ids=call_ids if call_ids is not None else [f"call-{k}" for k in range(len(turns))],
    )


def prompt_only(tokenizer: ChatTokenizer, text: str) -> Segment:
    """A segment of mask-0 tokens only."""
    ids = tokenizer.encode(tokenizer.render([{"role": "user", "content": text}]))
    return Segment(
        input_ids=TokenIds.from_list(ids),
        loss_mask=LossMask.from_list([0] * len(ids)),
        logprobs=Logprobs.from_list([0.0] * len(ids)),
        call_ids=["call-0"],
    )


def trajectory(
    trajectory_id: str, group: str, sample: int, segments: list[Segment], task: str = "task-1"
) -> Trajectory:
    return TRAJECTORY.model_copy(
        update={
            "trajectory_id": trajectory_id,
            "session_id": f"sess-{trajectory_id}",
            "group_id": group,
            "task_id": task,
            "sample_index": sample,
            "segments": segments,
        }
    )


def scored(
    trajectory_id: str,
    group: str,
    sample: int,
    segments: list[Segment],
    reward: float | None,
    error: str | None = None,
) -> Scored:
    return SCORED.model_copy(
        update={
            "trajectory": trajectory(trajectory_id, group, sample, segments),
            "reward": reward,
            "error": error,
        }
    )


def rebuilt(records: Sequence[CallRecord], strategy: str, **update: Any) -> Trajectory:
    """The sample trajectory with ``records`` (one session's) rebuilt by ``strategy``."""
    result = get_strategy(strategy)(resolve_calls(records), StrategyContext())
    session = records[0].session_id
    fields = {
        "trajectory_id": f"{session}/{strategy}",
        "session_id": session,
        "strategy": strategy,
        "segments": result.segments,
        "stats": result.stats,
        "threads": [],
    }
    return TRAJECTORY.model_copy(update=fields | update)
