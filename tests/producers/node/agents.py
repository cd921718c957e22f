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


async def one_call(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """Make one chat call with the session's key; write its HTTP status, exit 0 when it is 200."""
    import aiohttp

    body = {"model": "rollstream-tiny", "messages": [{"role": "user", "content": instruction}]}
    headers = {"Authorization": f"Bearer {session}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/v1/chat/completions", json=body, headers=headers) as reply,
    ):
        (workdir / "status.txt").write_text(f"{reply.status}\n")
        return 0 if reply.status == 200 else 3
