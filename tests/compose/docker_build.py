"""compose/Dockerfile read statically: its instructions, stages, environment and copies."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from rollstream.dev.containers.build_context import DOCKERFILE


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    result = []
    for text in logical:
        word, _, args = text.strip().partition(" ")
        result.append((word.upper(), args.strip()))
    return result


def dockerfile_env(path: Path = DOCKERFILE) -> dict[str, str]:
    """The ENV variables the image sets (``ENV A=1 B=2`` form)."""
    env: dict[str, str] = {}
    for word, args in dockerfile_instructions(path):
        if word == "ENV":
            env |= dict(item.split("=", 1) for item in shlex.split(args))
    return env


@dataclass
class Stage:
    """One build stage: its base (an image or an earlier stage) and its instructions."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def stages(path: Path = DOCKERFILE) -> dict[str, Stage]:
    """The named stages of a Dockerfile, in order."""
    result: dict[str, Stage] = {}
    current: Stage | None = None
    for word, args in dockerfile_instructions(path):
        if word == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(result))
            current = result[name] = Stage(name, parts[0])
        elif current is not None:
            current.instructions.append((word, args))
    return result


def effective(stage_name: str, word: str, path: Path = DOCKERFILE) -> str | None:
    """The last ``word`` instruction in force in a stage, following its base stages."""
    all_stages = stages(path)
    stage: Stage | None = all_stages[stage_name]
    while stage is not None:
        for instruction, args in reversed(stage.instructions):
            if instruction == word:
                return args
        stage = all_stages.get(stage.base)
    return None


def copy_sources(path: Path = DOCKERFILE) -> list[str]:
    """The context paths COPY takes (COPY --from copies between stages and is skipped)."""
    sources: list[str] = []
    for word, args in dockerfile_instructions(path):
        if word not in ("COPY", "ADD"):
            continue
        parts = shlex.split(args)
        if any(p.startswith("--from") for p in parts):
            continue
        sources.extend(p for p in parts[:-1] if not p.startswith("--"))
    return sources
