"""µs per read of the per-read stream function, fast path against the general one.

``python -m tests.interceptor.stream_chunk_bench [TOKENS] [ROUNDS]``: a vLLM-shaped
answer of TOKENS one-token reads (role chunk with the prompt's ids first; finish, usage and
``[DONE]`` last), streamed through both paths in the same process, alternating, ROUNDS times;
the best and the median round of each. Short by design: the machine it runs on may be busy.
"""

from __future__ import annotations

import statistics
import sys
import time

import orjson

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import Asked
from rollstream.interceptor.recording import CallState
from rollstream.interceptor.streaming import stream_function
from rollstream.schemas import ApiKind

MODEL = "Qwen/Qwen3-8B"
_WORDS = (" the", " polar", " bear", " walks", " across", " ice", ",", " looking", " for", "é")


def _event(chunk: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def vllm_reads(tokens: int, top_logprobs: int = 0) -> list[bytes]:
    """The reads of one streamed answer as vLLM writes it (compact JSON), one event a read."""
    head = {"id": "chatcmpl-b1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}

    def choice(delta: dict[str, object], ids: list[int], finish: str | None) -> dict[str, object]:
        entries = [
            {
                "token": f"token_id:{t}",
                "logprob": -0.01 * (t % 97),
                "bytes": [116, 111],
                "top_logprobs": [
                    {"token": f"token_id:{t + k}", "logprob": -1.5 * k, "bytes": [116]}
                    for k in range(top_logprobs)
                ],
            }
            for t in ids
        ]
        return {
            "index": 0,
            "delta": delta,
            "logprobs": {"content": entries},
            "finish_reason": finish,
            "token_ids": ids,
        }

    first = head | {
        "choices": [choice({"role": "assistant", "content": ""}, [], None)],
        "prompt_token_ids": list(range(100, 400)),
    }
    reads = [_event(first)]
    for i in range(tokens):
        text = _WORDS[i % len(_WORDS)]
        reads.append(_event(head | {"choices": [choice({"content": text}, [1000 + i], None)]}))
    last = choice({}, [], "length") | {"stop_reason": None}
    reads.append(_event(head | {"choices": [last]}))
    usage = {"prompt_tokens": 300, "completion_tokens": tokens, "total_tokens": 300 + tokens}
    reads.append(_event(head | {"choices": [], "usage": usage}))
    reads.append(b"data: [DONE]\n\n")
    return reads


def time_stream(reads: list[bytes], asked: Asked, harness_model: str, fast: bool) -> float:
    """µs per read of one whole stream through a fresh per-read function."""
    body = {"model": harness_model, "messages": [], "stream": True}
    state = CallState(ApiKind.CHAT_COMPLETIONS, "s", body, stream=True, asked=asked)
    translator = ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS].stream(body, asked)
    stream = stream_function(state, translator, fast=fast)
    started = time.perf_counter()
    for read in reads:
        stream(read)
    stream(b"")
    assert state.capture.content  # read once, as the record does: the join is counted
    return (time.perf_counter() - started) / len(reads) * 1e6


CASES = {
    # What the end-to-end bench and most harnesses do: capture fields stripped, model renamed.
    "harness asked nothing": (Asked(), "my-model"),
    # Nothing to strip: the upstream's events go through unchanged.
    "harness asked ids+logprobs": (Asked(token_ids=True, logprobs=True), MODEL),
}


def compare(tokens: int, rounds: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Per case and path: (best, median) µs per read over ``rounds`` alternating rounds."""
    reads = vllm_reads(tokens)
    result: dict[str, dict[str, tuple[float, float]]] = {}
    for case, (asked, model) in CASES.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(rounds):
            for fast in (False, True) if round_ % 2 else (True, False):
                times[fast].append(time_stream(reads, asked, model, fast))
        result[case] = {
            ("fast" if fast else "general"): (min(t), statistics.median(t))
            for fast, t in times.items()
        }
    return result


def main(argv: list[str]) -> None:
    """Print the comparison."""
    tokens = int(argv[0]) if argv else 5000
    rounds = int(argv[1]) if len(argv) > 1 else 7
    for case, paths in compare(tokens, rounds).items():
        general, fast = paths["general"], paths["fast"]
        print(
            f"{case}: general {general[0]:.2f} (median {general[1]:.2f}), "
            f"fast {fast[0]:.2f} (median {fast[1]:.2f}) µs/read; "
            f"{general[0] / fast[0]:.1f} times faster"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
