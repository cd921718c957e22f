"""Exact-context mode: prompts built from the session's own sampled tokens (see upstream.py)."""
