"""Choosing a session runtime from settings: ``local`` (a process) or ``docker`` (a container)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic_settings import BaseSettings

from rollstream.sandbox.runtime import LocalRuntime, Runtime
from rollstream.settings import env_name


class RuntimeSettings(Protocol):
    """What choosing a runtime reads (``NodeSettings`` has it; the sandbox does not import it)."""

    @property
    def runtime(self) -> str:
        """``local`` or ``docker``."""

    @property
    def work_root(self) -> Path | None:
        """Where session directories go (a temporary directory when unset)."""

    @property
    def keep_workdirs(self) -> bool:
        """Whether session directories outlive their session."""

    @property
    def isolation(self) -> str:
        """``namespace`` (policy code behind a network wall) or ``none``."""

    @property
    def docker_image(self) -> str:
        """The image of a session's container."""

    @property
    def docker_network(self) -> str:
        """The network a session's container joins."""

    @property
    def docker_mounts(self) -> tuple[Path, ...]:
        """Host directories mounted read-only in each session's container."""

    @property
    def prewarm(self) -> int:
        """How many containers to start ahead of their session."""


def make_runtime(settings: RuntimeSettings) -> Runtime:
    """The runtime the settings name (``local`` or ``docker``)."""
    if settings.runtime == "docker":
        from rollstream.sandbox.docker import DockerRuntime  # the SDK only when asked

        return DockerRuntime(
            settings.docker_image,
            settings.work_root,
            settings.keep_workdirs,
            network=settings.docker_network,
            prewarm=settings.prewarm,
            mounts=settings.docker_mounts,
            chosen_by=_name(settings, "runtime"),
            walls=settings.isolation == "namespace",
            walls_chosen_by=_name(settings, "isolation"),
        )
    return LocalRuntime(
        settings.work_root,
        settings.keep_workdirs,
        walls=settings.isolation == "namespace",
        chosen_by=_name(settings, "isolation"),
    )


def _name(settings: RuntimeSettings, field: str) -> str:
    """The environment variable of ``field`` (or the field, for settings not read from it)."""
    if isinstance(settings, BaseSettings):
        return env_name(type(settings), field)
    return f"the {field} setting"
