"""The Compose stack run for real: one project of it, driven through the Compose binary.

The project image it runs is the set-up's (rollstream.dev.containers.project_image: built from
compose/Dockerfile on the local Debian base, named after its content, loaded into the run's
engine).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rollstream.dev.containers import DockerEngine
from tests.compose.stack import COMPOSE_DIR


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
