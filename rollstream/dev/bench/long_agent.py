"""A ``python``-harness agent of many calls whose every call drifts: the long-session row's load.

It holds one Chat Completions conversation through the interceptor for ``calls`` turns: each
turn adds a user message of ``words`` words and the answer, sent back with a character put
before its text, as a harness that re-renders or edits what the model wrote does. The next
prompt then leaves the sampled tokens at the last answer's start: a ``drift`` break (answers end
at their first sentence; one cut at ``answer`` tokens gives ``truncated``), so reconstruction
starts a new segment at every call, each repeating the whole context so far: the case whose
trajectory grows with calls x context unless segments are written as deltas (issue 36, point
12). The instruction reads ``calls=N words=W answer=A compact=K``: W words a user message
(default 20), answers of at most A tokens (default 32), and every K turns (0: never, the
default) the history compacted to one summary message, as harnesses bound their context.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import aiohttp

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


def _params(instruction: str) -> dict[str, int]:
    values = dict(part.split("=", 1) for part in instruction.split() if "=" in part)
    defaults = {"calls": 100, "words": 20, "answer": 32, "compact": 0}
    return {name: int(values.get(name, default)) for name, default in defaults.items()}


async def run(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """``calls`` chat calls, each answer sent back changed; 0 when every call was answered."""
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
