"""The private Docker daemon of a test run, and the local images, as session fixtures.

``docker_engine`` starts one daemon for the whole run on a directory of the run's own, and
stops it at the end; where none can start (no ``dockerd``, not root) every test that asks for
it is skipped, saying what is missing and how to get it. The images are built once per machine
(the base's root is cached under the user's cache) and imported once per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollstream.dev.containers import (
    DockerEngine,
    DockerSettings,
    ImageResult,
    base_image,
    busybox_image,
)
from rollstream.errors import ConfigurationError
from rollstream.settings import StatePaths

# The image cache is the user's (the base's root bootstraps once per machine).
IMAGE_CACHE = StatePaths().cache_dir


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    """A private Docker daemon (host networking only) for the whole test run."""
    state = tmp_path_factory.mktemp("docker")
    engine = DockerEngine(
        DockerSettings(dir=state / "engine"),
        StatePaths(state_dir=state, cache_dir=IMAGE_CACHE),
        outlive_parent=False,
    )
    try:
        engine.start()
    except ConfigurationError as exc:
        pytest.skip(f"no container engine: {exc}")
    yield engine
    engine.stop()


def engine_of_its_own(directory: Path, **settings: object) -> DockerEngine:
    """An engine of a test's own (not the session's), dying with the test process."""
    return DockerEngine(
        DockerSettings(dir=directory, **settings),  # type: ignore[arg-type]
        StatePaths(state_dir=directory.parent),
        outlive_parent=False,
    )


@pytest.fixture
def own_engine(tmp_path: Path, docker_engine: DockerEngine) -> Iterator[DockerEngine]:
    """A second daemon on a directory of the test's own (the session's keeps running)."""
    engine = engine_of_its_own(tmp_path / "engine")
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def docker_busybox(docker_engine: DockerEngine) -> ImageResult:
    """The busybox image (a shell and wget in 2 MB) in the run's daemon."""
    try:
        return busybox_image(docker_engine)
    except ConfigurationError as exc:
        pytest.skip(f"no busybox image: {exc}")


@pytest.fixture(scope="session")
def docker_base(docker_engine: DockerEngine) -> ImageResult:
    """The Debian base image in the run's daemon: bootstrapped once per machine (~1.5 min)."""
    try:
        return base_image(docker_engine, paths=StatePaths(cache_dir=IMAGE_CACHE))
    except ConfigurationError as exc:
        pytest.skip(f"no base image: {exc}")
