"""``rollstream docker start|status|images|stop`` on a state directory of the test's own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.dev.containers import DockerEngine, DockerSettings, busybox_image
from rollstream.settings import StatePaths

pytestmark = pytest.mark.docker


def _docker(*args: str) -> Result:
    return CliRunner().invoke(cli, ["docker", *args])


# `docker start` leaves its daemon running on purpose; run in this process (not as a command of
# its own, which would exit), the Popen object of it is collected while it runs and says so.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_start_status_images_stop(docker_engine: DockerEngine, tmp_path: Path) -> None:
    engine = DockerEngine(DockerSettings(), StatePaths())
    assert engine.dir == tmp_path / "state" / "docker", "the test's own state directory"
    try:
        started = _docker("start")
        assert started.exit_code == 0, started.output
        assert f"export DOCKER_HOST={engine.docker_host}\n" in started.output
        again = _docker("start")
        assert again.output.startswith("already running: pid ")
        status = _docker("status", "--json")
        assert status.exit_code == 0, status.output
        record = json.loads(status.output)
        assert record["healthy"] and record["docker_host"] == engine.docker_host
        assert os.path.exists(f"/proc/{record['pid']}")
        busybox_image(engine)
        listed = _docker("images", "--no-build")
        assert listed.exit_code == 0, listed.output
        assert "rollstream-busybox:latest" in listed.output
    finally:
        stopped = _docker("stop")
    assert stopped.output == "stopped\n"
    assert _docker("status").exit_code == 1
    assert _docker("stop").output == "not running\n"


def test_images_without_a_daemon_says_to_start_one() -> None:
    result = _docker("images")
    assert result.exit_code != 0
    assert "run `start` first" in result.output
