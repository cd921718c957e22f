"""Runnable examples built on rollstream's public pieces (the example GRPO trainer)."""
