"""Async functions for the ``python`` harness preset, imported in its child process."""

from __future__ import annotations

from pathlib import Path


async def write_note(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """Write what the function was given into ``note.txt`` and succeed."""
    (workdir / "note.txt").write_text(f"{base_url}\n{session}\n{instruction}\n")
    return 0


async def give_up(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """Fail with exit code 4."""
    return 4
