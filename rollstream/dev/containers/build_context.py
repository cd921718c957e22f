"""What compose/Dockerfile is built from: the checkout's build context and its dependency list.

The context is what ``Dockerfile.dockerignore`` lets BuildKit send (matched here as BuildKit
matches it, so a context made by hand for the classic builder holds the same files); the
dependency list is what ``pip install '.[all]'`` installs, read from pyproject.toml.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path

from rollstream.errors import ConfigurationError

#: The checkout this package runs from (an editable install: `make` installs one).
REPO = Path(__file__).resolve().parents[3]
COMPOSE_DIR = REPO / "compose"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"
DOCKERIGNORE = COMPOSE_DIR / "Dockerfile.dockerignore"
PYPROJECT = REPO / "pyproject.toml"
#: Directories never in the context and too large to walk for nothing.
_PRUNED = {".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
_EXTRA = re.compile(r"^\s*([A-Za-z0-9_.-]+)\[([^\]]+)\]\s*$")


def require_checkout() -> Path:
    """The checkout's root; a clear error where the package was installed without one."""
    if not DOCKERFILE.is_file() or not PYPROJECT.is_file():
        raise ConfigurationError(
            f"no rollstream checkout at {REPO} (compose/Dockerfile, pyproject.toml): the "
            "project image is built from a clone (`pip install -e .`)"
        )
    return REPO


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def ignore_patterns(path: Path = DOCKERIGNORE) -> list[str]:
    """The patterns of a .dockerignore file, comments and blank lines dropped."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether a context path is left out, as BuildKit decides.

    A pattern matches a path or any of its parent directories; the last matching pattern
    wins, and ``!`` re-includes.
    """
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for raw in patterns:
        negate = raw.startswith("!")
        regex = _glob_regex(raw.removeprefix("!").strip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = not negate
    return result


def context_files(repo: Path = REPO) -> list[str]:
    """The checkout's files BuildKit would send as the build context, sorted."""
    patterns = ignore_patterns(repo / "compose" / DOCKERIGNORE.name)
    found = []
    for folder, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in _PRUNED]
        for name in files:
            relative = (Path(folder) / name).relative_to(repo).as_posix()
            if not ignored(relative, patterns):
                found.append(relative)
    return sorted(found)


def content_key(base_tag: str, files: list[str], repo: Path = REPO) -> str:
    """A name for what a build of ``files`` on ``base_tag`` makes (the Dockerfile included)."""
    digest = hashlib.sha256(base_tag.encode())
    for relative in [*files, f"compose/{DOCKERFILE.name}"]:
        digest.update(relative.encode() + b"\0" + (repo / relative).read_bytes())
    return digest.hexdigest()[:12]


def requirements(pyproject: Path = PYPROJECT, extra: str = "all") -> list[str]:
    """What ``pip install '.[extra]'`` installs: the dependencies and the extra's, resolved.

    An extra naming the project's own extras (``rollstream[models]``) is followed; the result
    is sorted and without duplicates, one requirement per line for ``pip install -r``.
    """
    project = tomllib.loads(pyproject.read_text())["project"]
    name = project["name"]
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    found: set[str] = set(project.get("dependencies", []))
    pending, seen = [extra], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        if current not in extras:
            raise ConfigurationError(f"{pyproject}: no extra {current!r}")
        seen.add(current)
        for requirement in extras[current]:
            own = _EXTRA.match(requirement)
            if own and own.group(1) == name:
                pending += [e.strip() for e in own.group(2).split(",")]
            else:
                found.add(requirement)
    return sorted(found)
