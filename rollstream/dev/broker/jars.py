"""Fetch the broker's classpath from Maven Central once, into the rollstream cache."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from rollstream.errors import BrokerError
from rollstream.host import require_tool

log = logging.getLogger(__name__)

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_COMPLETE_MARKER = ".complete"


def jar_dir(cache_dir: Path, version: str) -> Path:
    """Where the jars of Kafka ``version`` live once fetched."""
    return cache_dir / "kafka" / version / "lib"


def jar_stamp(version: str) -> str:
    """What a complete fetch's marker holds: the version and a digest of the pom it used.

    A pom whose jars changed then fetches again, rather than run on a classpath that lacks one.
    """
    pom = resources.files("rollstream.dev.broker").joinpath("pom.xml")
    return f"{version} {hashlib.sha256(pom.read_bytes()).hexdigest()[:16]}"


def ensure_jars(cache_dir: Path, version: str, mvn: str = "mvn") -> Path:
    """Return the directory holding Kafka ``version``'s jars, fetching them with Maven if missing.

    The download goes into a temporary directory renamed into place at the end, so an interrupted
    fetch never leaves a half-filled classpath that would be taken for complete.
    """
    target = jar_dir(cache_dir, version)
    pom = resources.files("rollstream.dev.broker").joinpath("pom.xml")
    stamp = jar_stamp(version)
    marker = target / _COMPLETE_MARKER
    if marker.exists() and marker.read_text().strip() == stamp:
        return target
    mvn_path = require_tool(mvn, "Maven (e.g. `apt-get install maven`) to fetch the Kafka jars")
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp,
        resources.as_file(pom) as pom_path,
    ):
        staging = Path(tmp) / "lib"
        cmd = [
            mvn_path,
            "-B",
            "-q",
            "-f",
            str(pom_path),
            f"-Dkafka.version={version}",
            f"-Dmaven.repo.local={cache_dir / 'm2'}",
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        log.info("fetching Kafka %s jars with Maven into %s", version, target)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise BrokerError(f"fetching Kafka {version} jars with Maven failed:\n{tail}")
        (staging / _COMPLETE_MARKER).write_text(stamp)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target
