"""``regex``: ``re.search(config["pattern"], final_text)`` finds something.

Options: ``pattern`` (required), ``flags`` (letters: ``i`` ignore case, ``s`` dot matches
newline, ``m`` multiline anchors, ``x`` verbose, ``a`` ASCII classes). An invalid pattern or
an unknown flag is an error, not a reward of 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    EvaluatorError,
    required,
)
from rollstream.schemas.trajectories import Trajectory

_FLAGS = {
    "i": re.IGNORECASE,
    "s": re.DOTALL,
    "m": re.MULTILINE,
    "x": re.VERBOSE,
    "a": re.ASCII,
}
_MATCH_CHARS = 200


def compile_pattern(pattern: str, flags: str) -> re.Pattern[str]:
    """The compiled pattern, or an EvaluatorError saying what is wrong with it."""
    value = re.NOFLAG
    for letter in flags.replace(",", "").replace(" ", "").lower():
        if letter not in _FLAGS:
            raise EvaluatorError(f"unknown regex flag {letter!r} (known: {''.join(_FLAGS)})")
        value |= _FLAGS[letter]
    try:
        return re.compile(pattern, value)
    except re.error as exc:
        raise EvaluatorError(f"invalid pattern {pattern!r}: {exc}") from exc


async def regex(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """1.0 if the pattern occurs in the final text, else 0.0; the match goes to details."""
    compiled = compile_pattern(required(config, "pattern"), config.get("flags", ""))
    found = compiled.search(trajectory.final_text)
    if found is None:
        return EvalResult(0.0)
    return EvalResult(1.0, {"match": found.group(0)[:_MATCH_CHARS]})
