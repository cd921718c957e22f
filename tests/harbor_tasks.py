"""Harbor task directories, written as the format has them (Harbor's hello-world, made local)."""

from __future__ import annotations

from pathlib import Path

#: The tests of the hello task: the agent's file where the image works, the image's own file
#: still there beside it; the reward in Harbor's place.
HELLO_TEST = """#!/bin/bash
if [ "$(cat /app/hello.txt 2>/dev/null)" = polar ] && [ "$(cat /app/seed.txt)" = seed ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def write_task(
    root: Path,
    name: str = "hello",
    *,
    base: str = "debian:bookworm",
    toml: str = "",
    test_sh: str = HELLO_TEST,
    instruction: str = "Create hello.txt with polar.",
) -> Path:
    """A Harbor task directory under ``root``: an image working in /app with a file of its own."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text(instruction)
    (task / "task.toml").write_text(
        'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n'
        "[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 240.0\n" + toml
    )
    # COPY, not RUN: the image builds without a network.
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {base}\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n"
    )
    (task / "environment" / "seed.txt").write_text("seed\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    return task
