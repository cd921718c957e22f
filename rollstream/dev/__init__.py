"""Development tooling beside the product: never imported by it (an import contract checks).

The reference backend (a CPU inference server speaking vLLM's protocol), the local Kafka broker,
the local stack supervisor, benchmarks, the demo, the HTML report, the example trainer, the
smoke test and synthetic sessions.
"""
