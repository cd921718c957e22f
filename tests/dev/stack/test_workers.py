"""The local stack runs the interceptor as a worker pool when asked."""

from __future__ import annotations

from rollstream.dev.stack.components import plan
from rollstream.dev.stack.settings import StackSettings


def test_the_stack_passes_its_worker_count_to_the_interceptor() -> None:
    for workers in (1, 3):
        settings = StackSettings(backend_port=0, interceptor_port=0, node_port=0, workers=workers)
        [interceptor] = [c for c in plan(settings) if c.name == "interceptor"]
        argv = interceptor.argv
        assert argv[argv.index("--workers") + 1] == str(workers)
        assert ("workers" in (interceptor.endpoint or "")) == (workers > 1)
