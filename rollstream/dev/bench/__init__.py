"""Benchmarks: ``rollstream bench``. Results are JSON; ``bench/RESULTS.md`` summarises them."""
