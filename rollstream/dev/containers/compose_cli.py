"""Docker Compose v2, built from its Go module once per machine and cached.

Debian's ``docker-compose`` package is the old Python v1, which cannot read the project's
Compose file, and no release binary can be downloaded here; the Go module proxy can serve the
sources. ``go install`` takes about 6 minutes the first time (mostly downloads): one of the
set-up's background builds (rollstream.dev.prebuilt), which the Compose test waits for. A lock
held during the build is what a builder and a second caller agree on.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

from rollstream.errors import ContainerEngineError
from rollstream.host import exclusive, require_tool
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

#: The release the project's Compose file is checked against (``service_completed_successfully``,
#: ``required: false`` and ``!reset`` need 2.24 or later).
COMPOSE_VERSION = "v2.32.4"
COMPOSE_MODULE = "github.com/docker/compose/v2/cmd"


def compose_path(cache_dir: Path, version: str = COMPOSE_VERSION) -> Path:
    """Where the built binary of ``version`` lives in the cache."""
    return cache_dir / "bin" / f"docker-compose-{version}"


def _beside(binary: Path, suffix: str) -> Path:
    # Not with_suffix: the version's last dot is no suffix (docker-compose-v2.32.4).
    return binary.with_name(binary.name + suffix)


def ensure_compose(
    paths: StatePaths | None = None, version: str = COMPOSE_VERSION, go: str = "go"
) -> Path:
    """The cached Compose binary, built with ``go install`` first if missing (or waited for).

    The Go module and build caches go under the rollstream cache too. A failed build leaves
    no binary and raises a ContainerEngineError with go's last lines.
    """
    cache_dir = (paths or StatePaths()).cache_dir
    binary = compose_path(cache_dir, version)
    with exclusive(_beside(binary, ".lock")):  # a build under way: wait for it
        if binary.exists():
            return binary
        go_path = require_tool(go, "Go 1.22+ to build Docker Compose v2 (`apt-get install golang`)")
        began = time.monotonic()
        log.info("building Docker Compose %s with go install (about 6 minutes once)", version)
        with tempfile.TemporaryDirectory(dir=binary.parent, prefix=".build-") as tmp:
            env = os.environ | {
                "GOBIN": tmp,
                "GOMODCACHE": str(cache_dir / "go" / "mod"),
                "GOCACHE": str(cache_dir / "go" / "build"),
                "GOFLAGS": "-buildvcs=false",
            }
            done = subprocess.run(
                [go_path, "install", f"{COMPOSE_MODULE}@{version}"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            built = Path(tmp) / "cmd"
            if done.returncode != 0 or not built.exists():
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise ContainerEngineError(f"building Docker Compose {version} failed:\n{tail}")
            built.replace(binary)  # whole or not at all
        log.info("Docker Compose %s built in %.0fs: %s", version, time.monotonic() - began, binary)
    return binary
