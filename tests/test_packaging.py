"""The trainer client installs from its extra alone and runs: no interceptor, models or tools.

Trainers live in environments that pin their own torch, transformers and friends; the client
must not bring them. This installs ``rollstream[trainer]`` (the base install) from this checkout
into a venv of its own, checks what came with it, and reads GRPO groups from the real broker
with the client from that venv.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rollstream.schemas import AvroSerializer, TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.trainer.records import group_of

ROOT = Path(__file__).resolve().parent.parent

# One worker runs the module: pip builds the checkout in its own build/ folder, and two builds
# at once (the module fixture set up on each xdist worker) collide there ("File exists").
pytestmark = pytest.mark.xdist_group("packaging")
#: What the trainer's environment must not get (each belongs to another extra).
ELSEWHERE = ("mitmproxy", "transformers", "tokenizers", "pyarrow", "aiohttp", "matplotlib")

READER = """
import asyncio, json, sys
from rollstream.settings import KafkaSettings
from rollstream.consumers.trainer import TrainerSettings, TrajectoryStream, to_batch

async def main():
    kafka = KafkaSettings(bootstrap_servers=sys.argv[1], topic_prefix=sys.argv[2])
    groups = []
    async with TrajectoryStream(TrainerSettings(), "packaging", kafka) as stream:
        async for group in stream.groups():
            groups.append([group.group_id, len(to_batch(group, layout="packed").trajectory_ids)])
            if len(groups) == 2:
                break
        await stream.commit()
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in json.loads(sys.argv[3]))
    print(json.dumps({"groups": sorted(groups), "heavy": heavy}))

asyncio.run(main())
"""


def _pip(venv: Path, *args: str) -> str:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def trainer_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with ``rollstream[trainer]`` installed from this checkout (not editable)."""
    venv = tmp_path_factory.mktemp("trainer-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    _pip(venv, "install", "-q", f"{ROOT}[trainer]")
    return venv


def test_the_base_install_is_the_trainer_client_s_needs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["trainer"] == []
    names = {dep.split("[")[0].split(">")[0].split("=")[0] for dep in project["dependencies"]}
    assert not names & set(ELSEWHERE)


def test_the_trainer_extra_installs_nothing_of_the_other_parts(trainer_venv: Path) -> None:
    installed = {
        line.split("==")[0].split(" @ ")[0].lower()
        for line in _pip(trainer_venv, "freeze").splitlines()
    }
    assert "rollstream" in installed and "aiokafka" in installed
    assert not installed & set(ELSEWHERE)


async def test_the_trainer_client_runs_from_its_extra_alone(
    trainer_venv: Path,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    producer = await producer_factory()
    serializer = AvroSerializer()
    for record in group_of("a", 3) + group_of("b", 2):
        await producer.send_and_wait(rollstream_topics.scored, serializer.encode(record))
    reader = await asyncio.create_subprocess_exec(
        str(trainer_venv / "bin" / "python"),
        "-c",
        READER,
        kafka_settings.bootstrap_servers,
        kafka_settings.topic_prefix,
        json.dumps(ELSEWHERE),
        cwd=trainer_venv,  # not the checkout: the installed package is the one imported
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(reader.communicate(), 120)
    assert reader.returncode == 0, err.decode()
    outcome = json.loads(out.decode().strip().splitlines()[-1])
    assert outcome == {"groups": [["a", 3], ["b", 2]], "heavy": []}
