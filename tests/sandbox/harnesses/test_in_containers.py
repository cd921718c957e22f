"""Real harnesses in real containers: Claude Code and Codex in the docker runtime.

Each session's container comes from the Debian base image (Node.js from Debian, no harness);
the harnesses installed on the host are mounted read-only, as ``ROLLSTREAM_NODE_DOCKER_MOUNTS``
does for a node. The harness reaches the interceptor over host networking, writes its file in
the bind-mounted workspace, and every call it makes is recorded with its tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.containers import DockerEngine, ImageResult
from rollstream.sandbox.docker import DockerRuntime
from rollstream.schemas import CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.harness_stack import harnesses_installed, scripted_interceptor, solve_session

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
async def test_a_harness_solves_its_task_in_a_container_and_every_call_is_recorded(
    harness: str,
    docker_engine: DockerEngine,
    docker_base: ImageResult,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    docker = pytest.importorskip("docker")
    harness_bin = harnesses_installed()
    client: Any = docker.DockerClient(base_url=docker_engine.docker_host)
    # The npm install's root: .bin's entries link into its node_modules.
    runtime = DockerRuntime(
        docker_base.tag, tmp_path / "sessions", mounts=[harness_bin.parents[1]], client=client
    )
    try:
        async with scripted_interceptor(kafka_settings, tmp_path / "state") as interceptor:
            records = await solve_session(
                harness, interceptor, kafka_settings, harness_bin, tmp_path, runtime
            )
    finally:
        await runtime.close()
        client.close()
    assert len(records) >= 3  # the scripted turns: write, read back, answer
    assert [r.seq for r in records] == list(range(len(records)))
    assert all(r.status is CallStatus.OK and r.has_tokens for r in records)
