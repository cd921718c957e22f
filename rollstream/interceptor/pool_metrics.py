"""The pool's /metrics: every worker's Prometheus samples labelled with its index, and its own.

Each sample a worker exposes is repeated with a ``worker="i"`` label, and no unlabelled pool
total is written beside them: one family keeps one label set, as Prometheus expects, and any
aggregation a dashboard makes (``sum(rollstream_calls_total)``, ``max(rollstream_paused)``,
``min(rollstream_broker_connected)``) answers the same against one interceptor or a pool. A
``worker="all"`` total would be counted twice by exactly those queries. People reading the
pool's state at a glance have /health, which sums and combines.

Counters never go down (``ScrapeCache``): a worker that does not answer a scrape (down, slow)
is shown with its last counters, and a restarted worker, whose counters start again from zero,
carries what it had counted as a base under its new counts. So each worker's series, and any
sum of them, only grows, and a worker restarted on its ports (the same interceptor, see
``pool``) is no counter reset. Gauges are states of the moment: a worker that did not answer
shows none (``rollstream_pool_worker_up`` says which did).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A series: family name and label text (``{...}`` or empty).
Series = tuple[str, str]


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


@dataclass
class _Worker:
    """What the pool remembers of one worker's counters."""

    #: Its restart count at its last answer (None: it never answered).
    restarts: int | None = None
    #: Each counter as its current process last reported it.
    raw: dict[Series, float] = field(default_factory=dict)
    #: What its earlier processes had counted, carried under the current one's counts.
    base: dict[Series, float] = field(default_factory=dict)
    #: Its last counters as shown (base included): what it shows while it does not answer.
    shown: dict[str, Family] = field(default_factory=dict)


class ScrapeCache:
    """Each worker's last counters and carried bases, so that no counter shown goes down."""

    def __init__(self) -> None:
        self._workers: dict[int, _Worker] = {}

    def observe(self, worker: int, text: str | None, restarts: int = 0) -> dict[str, Family]:
        """What to show of ``worker`` for this scrape, given its exposition (None: no answer).

        ``restarts`` is how often the pool restarted it: a change means a new process whose
        counters started from zero, so everything it had counted becomes its base. A counter
        found lower than last time is carried the same way (a restart the count missed).
        """
        state = self._workers.setdefault(worker, _Worker())
        if text is None:
            return {name: Family(f.kind, list(f.samples)) for name, f in state.shown.items()}
        if state.restarts is not None and restarts != state.restarts:
            for series, value in state.raw.items():
                state.base[series] = state.base.get(series, 0.0) + value
            state.raw = {}
        state.restarts = restarts
        families = parse_metrics(text)
        for family in families.values():
            if family.kind == "counter":
                family.samples = [_carried(state, s) for s in family.samples]
        # A counter it reported before and not now keeps its last value: the sum stays whole.
        for name, before in state.shown.items():
            now = families.setdefault(name, Family(before.kind, []))
            present = {s.labels for s in now.samples}
            now.samples += [s for s in before.samples if s.labels not in present]
        state.shown = {
            name: Family(f.kind, list(f.samples))
            for name, f in families.items()
            if f.kind == "counter"
        }
        return families


def _carried(state: _Worker, sample: Sample) -> Sample:
    """``sample`` (a counter, as the worker reports it) with the worker's carried base added."""
    series = (sample.name, sample.labels)
    last = state.raw.get(series, 0.0)
    if sample.value < last:  # only a new process counts less than its predecessor did
        state.base[series] = state.base.get(series, 0.0) + last
    state.raw[series] = sample.value
    return Sample(sample.name, sample.labels, sample.value + state.base.get(series, 0.0))


def by_worker(shown: list[dict[str, Family]]) -> dict[str, Family]:
    """Each worker's families (index: position in ``shown``) merged, every sample labelled."""
    merged: dict[str, Family] = {}
    for worker, families in enumerate(shown):
        for name, family in families.items():
            out = merged.setdefault(name, Family(family.kind, []))
            out.samples += [
                Sample(name, with_label(s.labels, "worker", str(worker)), s.value)
                for s in family.samples
            ]
    return merged


def per_worker(name: str, kind: str, values: list[float]) -> Family:
    """A pool metric with one sample per worker (labelled ``worker="i"``) and no total."""
    return Family(
        kind, [Sample(name, with_label("", "worker", str(i)), v) for i, v in enumerate(values)]
    )


def single(name: str, kind: str, value: float) -> Family:
    """A pool metric that is one number for the whole pool (no per-worker lines beside it)."""
    return Family(kind, [Sample(name, "", value)])


def render(families: dict[str, Family]) -> str:
    """The families as Prometheus text."""
    lines: list[str] = []
    for name, family in families.items():
        lines.append(f"# TYPE {name} {family.kind}")
        lines += [f"{s.name}{s.labels} {fmt(s.value)}" for s in family.samples]
    return "\n".join(lines) + "\n"
