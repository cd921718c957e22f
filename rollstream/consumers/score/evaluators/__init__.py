"""Evaluators: how a trajectory earns its reward, one module each, named in ``registry``."""

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    Evaluator,
    EvaluatorError,
)
from rollstream.consumers.score.evaluators.registry import EVALUATORS, UNKNOWN, evaluate, spec_for

__all__ = [
    "EVALUATORS",
    "UNKNOWN",
    "EvalContext",
    "EvalResult",
    "Evaluator",
    "EvaluatorError",
    "evaluate",
    "spec_for",
]
