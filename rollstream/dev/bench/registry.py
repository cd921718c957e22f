"""Every benchmark ``rollstream bench`` runs, in the order ``bench all`` runs them."""

from __future__ import annotations

from rollstream.dev.bench.kafka_benches import KAFKA
from rollstream.dev.bench.serving_benches import SERVING
from rollstream.dev.bench.spec import Bench
from rollstream.dev.bench.suite import ORDER

#: In :data:`~rollstream.dev.bench.suite.ORDER`, which names every one of them.
BENCHES: tuple[Bench, ...] = tuple(sorted(SERVING + KAFKA, key=lambda b: ORDER.index(b.name)))
