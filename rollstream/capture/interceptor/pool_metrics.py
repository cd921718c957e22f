"""The pool's /metrics: its workers' Prometheus samples summed, each worker's beside, its own.

Counters and gauges of the same series add up across workers (calls, records, bytes, calls in
flight, spool bytes), except the few that are states rather than amounts: the policy version,
paused and the spool alarm are the largest worker's value, broker connected the smallest (1
only if every worker is connected). Each worker's own samples follow with a ``worker`` label,
so a dashboard can still tell a stuck worker from a quiet one. A worker that does not answer
is left out of the sums (``rollstream_pool_workers_up`` says how many did); a restarted
worker's counters start again from zero, which Prometheus treats as a counter reset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

_COMBINE: dict[str, Callable[[Iterable[float]], float]] = {
    "rollstream_policy_version": max,
    "rollstream_paused": max,
    "rollstream_spool_alarm": max,
    "rollstream_broker_connected": min,
}


@dataclass(frozen=True)
class Sample:
    """One line of the exposition: family name, label text (``{...}`` or empty), value."""

    name: str
    labels: str
    value: float


@dataclass
class Family:
    """A metric family: its type and its samples."""

    kind: str
    samples: list[Sample]


def parse_metrics(text: str) -> dict[str, Family]:
    """Families of a Prometheus text exposition, in order (only what the interceptor writes)."""
    families: dict[str, Family] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            families.setdefault(name, Family(kind, []))
            continue
        if not line or line.startswith("#"):
            continue
        series, _, raw = line.rpartition(" ")
        try:
            value = float(raw)
        except ValueError:
            continue
        name = series.split("{", 1)[0]
        family = families.setdefault(name, Family("untyped", []))
        family.samples.append(Sample(name, series[len(name) :], value))
    return families


def with_label(labels: str, name: str, value: str) -> str:
    """``labels`` (``{...}`` or empty) with ``name="value"`` added first."""
    pair = f'{name}="{value}"'
    return f"{{{pair}}}" if not labels else f"{{{pair},{labels[1:]}"


def fmt(value: float) -> str:
    """A value as Prometheus reads it: integers without a decimal point."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def merge_metrics(texts: list[str | None]) -> dict[str, Family]:
    """The workers' expositions (None: the worker did not answer) merged; see the module docs."""
    parsed = [(i, parse_metrics(t)) for i, t in enumerate(texts) if t is not None]
    merged: dict[str, Family] = {}
    for _, families in parsed:
        for name, family in families.items():
            merged.setdefault(name, Family(family.kind, []))
    for name, out in merged.items():
        combine = _COMBINE.get(name, sum)
        series: dict[str, list[float]] = {}
        for _, families in parsed:
            for sample in families.get(name, Family("", [])).samples:
                series.setdefault(sample.labels, []).append(sample.value)
        out.samples = [Sample(name, labels, combine(values)) for labels, values in series.items()]
        for worker, families in parsed:
            out.samples += [
                Sample(name, with_label(s.labels, "worker", str(worker)), s.value)
                for s in families.get(name, Family("", [])).samples
            ]
    return merged


def per_worker(name: str, kind: str, values: list[float], total: float | None = None) -> Family:
    """A pool metric: its total (default: the sum) and one sample per worker."""
    samples = [Sample(name, "", sum(values) if total is None else total)]
    samples += [Sample(name, with_label("", "worker", str(i)), v) for i, v in enumerate(values)]
    return Family(kind, samples)


def render(families: dict[str, Family]) -> str:
    """The families as Prometheus text."""
    lines: list[str] = []
    for name, family in families.items():
        lines.append(f"# TYPE {name} {family.kind}")
        lines += [f"{s.name}{s.labels} {fmt(s.value)}" for s in family.samples]
    return "\n".join(lines) + "\n"
