"""What every benchmark shares: rounds in ABBA order, medians and ratios, markdown tables.

A benchmark that compares variants measures each of them in every round (:func:`run_rounds`),
alternating their order, then reports per-variant medians (:func:`medians`) and the ratios
between variants (:func:`ratios`); its RESULTS.md section lays them out with :func:`table`.
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from rollstream.dev.bench.common import abba

Sample = dict[str, float]


async def run_rounds(
    variants: Sequence[str],
    rounds: int,
    measure: Callable[[str, int], Awaitable[Sample]],
    say: Callable[[str], None] = lambda _: None,
    describe: Callable[[Sample], str] | None = None,
) -> dict[str, list[Sample]]:
    """``measure(variant, round)`` for every variant in each of ``rounds`` rounds, ABBA order.

    Returns each variant's samples in round order. ``describe`` turns a sample into the text of
    its progress line (``round N variant: text``).
    """
    samples: dict[str, list[Sample]] = {variant: [] for variant in variants}
    for round_ in range(rounds):
        for variant in abba(variants, round_):
            sample = await measure(variant, round_)
            samples[variant].append(sample)
            if describe is not None:
                say(f"  round {round_ + 1} {variant}: {describe(sample)}")
    return samples


def median_of(samples: Iterable[Mapping[str, float]], key: str, digits: int = 2) -> float:
    """The median of one figure over samples, rounded."""
    return round(statistics.median(sample[key] for sample in samples), digits)


def medians(
    samples: Mapping[str, Sequence[Mapping[str, float]]], digits: int = 2
) -> dict[str, dict[str, float]]:
    """Each variant's median of every figure its first sample has."""
    return {
        variant: {key: median_of(runs, key, digits) for key in runs[0]}
        for variant, runs in samples.items()
    }


def ratios(
    figures: Mapping[str, Mapping[str, float]], over: str, under: str, digits: int = 3
) -> dict[str, float]:
    """``figures[over][key] / figures[under][key]`` for every figure of ``under``."""
    return {key: round(figures[over][key] / figures[under][key], digits) for key in figures[under]}


def table(header: Sequence[str], align: str, rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table: ``align`` has one letter per column, ``l`` left or ``r`` right."""
    marks = {"l": "---", "r": "---:"}
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks[a] for a in align) + "|",
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]
