"""The Compose stack run for real: the project image built on the local base, and the stack.

The image is built from compose/Dockerfile with the classic builder (no BuildKit frontend can
be pulled here) on the Debian base (``PYTHON_IMAGE``, a build argument), from a context that
holds exactly what Dockerfile.dockerignore lets BuildKit send. Its tag names its content.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rollstream.dev.containers import DockerEngine
from rollstream.errors import ContainerEngineError
from tests.compose.docker_build import DOCKERFILE, ignore_patterns, ignored
from tests.compose.stack import COMPOSE_DIR, REPO

#: Directories never in the context and too large to walk for nothing.
_PRUNED = {".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def context_files() -> list[str]:
    """The repo's files BuildKit would send as the build context, sorted."""
    patterns = ignore_patterns()
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _PRUNED]
        for name in files:
            relative = (Path(folder) / name).relative_to(REPO).as_posix()
            if not ignored(relative, patterns):
                found.append(relative)
    return sorted(found)


def project_tag(base_tag: str, files: list[str]) -> str:
    """The content tag of the image: the context's ``files``, the Dockerfile and the base."""
    digest = hashlib.sha256(base_tag.encode())
    for relative in [*files, "compose/Dockerfile"]:
        digest.update(relative.encode() + b"\0" + (REPO / relative).read_bytes())
    return digest.hexdigest()[:12]


def build_project_image(engine: DockerEngine, base_tag: str, scratch: Path) -> str:
    """``rollstream:TAG`` (target rollstream) in ``engine``, built unless already there."""
    files = context_files()
    tag = project_tag(base_tag, files)
    if engine.api.image(f"rollstream:{tag}") is not None:
        return tag
    context = scratch / "context"
    for relative in files:
        (context / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, context / relative)
    shutil.copy2(DOCKERFILE, context / "Dockerfile")
    done = subprocess.run(
        [
            *(engine.settings.docker, "build", "--network", "host", "--target", "rollstream"),
            *("--build-arg", f"PYTHON_IMAGE={base_tag}", "-t", f"rollstream:{tag}"),
            str(context),
        ],
        env=engine.env() | {"DOCKER_BUILDKIT": "0"},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    shutil.rmtree(context, ignore_errors=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise ContainerEngineError(f"building rollstream:{tag} failed:\n{tail}")
    return tag


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ComposeProject:
    """One project of the stack: its files, variables and the compose binary to drive it."""

    binary: Path
    engine: DockerEngine
    name: str
    files: Sequence[Path]
    variables: dict[str, str]
    profiles: Sequence[str] = ("cpu",)
    log: list[str] = field(default_factory=list)
    #: (time, service, action) of its containers from the engine, once up.
    events: list[tuple[float, str, str]] = field(default_factory=list)

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``docker compose -p NAME -f ... --profile ... ARGS``, its output kept in ``log``."""
        argv = [str(self.binary), "-p", self.name]
        for path in self.files:
            argv += ["-f", str(path)]
        for profile in self.profiles:
            argv += ["--profile", profile]
        done = subprocess.run(
            [*argv, *args],
            env=self.engine.env() | self.variables,
            cwd=COMPOSE_DIR,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.log.append(
            f"$ compose {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}"
        )
        return done
