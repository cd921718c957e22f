"""The child process of the ``python`` harness preset: import an async function and run it.

``python -m rollstream.sandbox.harnesses.python_entry module:function INSTRUCTION`` calls
``await function(base_url, session, instruction, workdir)`` with the interceptor's URL and the
session id from the environment and the current directory (the workspace) as ``workdir``.
Its return value is the exit code (None: 0). Running it in its own process is what lets the
node's timeouts and cancellation kill it, and everything it started, like any other harness.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path

#: ``presets.BASE_URL_ENV`` and ``presets.SESSION_ENV``, spelled out: importing the presets
#: (schemas, pydantic, fastavro) would add half a second to every session's start.
BASE_URL_ENV = "ROLLSTREAM_BASE_URL"
SESSION_ENV = "ROLLSTREAM_SESSION"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the function named by ``argv[0]`` on the instruction ``argv[1]``; its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        usage = "python -m rollstream.sandbox.harnesses.python_entry module:function INSTRUCTION"
        print(f"usage: {usage}")
        return 2
    spec, instruction = args
    module_name, _, name = spec.partition(":")
    # ``python -m`` put the current directory (the workspace) first on sys.path already.
    function = getattr(importlib.import_module(module_name), name, None)
    if function is None or not inspect.iscoroutinefunction(function):
        print(f"{spec} is not an async function", file=sys.stderr)
        return 2
    result = asyncio.run(
        function(os.environ[BASE_URL_ENV], os.environ[SESSION_ENV], instruction, Path.cwd())
    )
    return 0 if result is None else int(result)


if __name__ == "__main__":
    sys.exit(main())
