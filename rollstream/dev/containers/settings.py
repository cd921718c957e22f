"""Settings of the local container engine and its images (``ROLLSTREAM_DOCKER_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: What the base image holds by default: Python with venv for the project's images, the CA
#: store, git and patch to apply a session's diff in a task's container, Node.js for the
#: harnesses (the host's npm install mounted, or one in a task image built on this base), and a
#: JRE for the local Kafka broker in the project's image (compose/local-kafka.yml).
DEFAULT_BASE_PACKAGES = (
    "python3,python3-venv,python3-pytest,ca-certificates,git,patch,nodejs,openjdk-21-jre-headless"
)


class DockerSettings(BaseSettings):
    """How ``rollstream docker`` and the test fixture run a private Docker daemon."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_DOCKER_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    dir: Path | None = Field(
        default=None,
        description="The daemon's directory: data root, exec root, socket, pid file and log. "
        "Default: STATE_DIR/docker.",
    )
    dockerd: str = Field(default="dockerd", description="The Docker daemon executable.")
    docker: str = Field(default="docker", description="The Docker command-line client.")
    storage_driver: str = Field(
        default="overlay2",
        description="Storage driver; vfs works too but copies the whole image per container.",
    )
    start_timeout: float = Field(
        default=60.0, gt=0, description="Seconds to wait for the daemon's API to answer."
    )
    stop_timeout: float = Field(
        default=30.0, gt=0, description="Seconds to wait after SIGTERM before SIGKILL."
    )
    suite: str = Field(default="trixie", description="Debian release of the base image.")
    mirror: str | None = Field(
        default=None,
        description="Debian mirror for the base image. Default: the one apt uses on this "
        "machine, else http://deb.debian.org/debian.",
    )
    base_packages: str = Field(
        default=DEFAULT_BASE_PACKAGES,
        description="Comma-separated Debian packages of the base image (debootstrap --include).",
    )
    debootstrap: str = Field(default="debootstrap", description="The debootstrap executable.")
    busybox: str = Field(
        default="busybox", description="A statically linked busybox (Debian's busybox-static)."
    )

    def packages(self) -> tuple[str, ...]:
        """The base image's packages, sorted and without duplicates (part of its name)."""
        return tuple(sorted({p.strip() for p in self.base_packages.split(",") if p.strip()}))
