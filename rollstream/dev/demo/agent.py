"""A minimal coding agent for the ``python`` harness: the demo's fallback when npm is missing.

It speaks Chat Completions through the interceptor with one ``shell`` tool, runs the commands
the model asks for in the workspace, and stops at the first answer without tool calls.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command in the workspace; returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


async def shell(command: object, workdir: Path) -> str:
    """Run the model's command; its output and exit code.

    A shell line, or an argument list (as Codex's shell tool takes it, and as the reference
    backend's scripted policy writes it).
    """
    pipes: dict[str, Any] = {"stdout": asyncio.subprocess.PIPE, "stderr": asyncio.subprocess.STDOUT}
    if isinstance(command, list) and command:
        proc = await asyncio.create_subprocess_exec(*map(str, command), cwd=workdir, **pipes)
    else:
        proc = await asyncio.create_subprocess_shell(str(command or ""), cwd=workdir, **pipes)
    out, _ = await proc.communicate()
    return out.decode(errors="replace")[-4000:] + f"\n(exit {proc.returncode})"


async def run(base_url: str, session: str, instruction: str, workdir: Path) -> int:
    """The agent loop; at most 10 turns. Exit code 0 when the model gave a final answer."""
    model = os.environ.get("ROLLSTREAM_MODEL", "rollstream-tiny")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the shell tool."},
        {"role": "user", "content": instruction},
    ]
    headers = {"Authorization": f"Bearer {session}"}
    async with aiohttp.ClientSession(base_url=base_url.rstrip("/") + "/", headers=headers) as http:
        for _ in range(10):
            body = {"model": model, "messages": messages, "tools": [SHELL_TOOL], "max_tokens": 512}
            async with http.post("v1/chat/completions", json=body) as response:
                response.raise_for_status()
                message = (await response.json())["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return 0
            for call in calls:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                output = await shell(arguments.get("command", ""), workdir)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return 1
