"""Missing tools and impossible set-ups give a one-line error naming what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.dev.broker import BrokerSettings, LocalBroker, local_kafka
from rollstream.dev.broker.jars import ensure_jars, jar_dir, jar_stamp
from rollstream.errors import BrokerError, MissingToolError
from rollstream.settings import StatePaths


def test_missing_maven_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MissingToolError) as info:
        ensure_jars(tmp_path, "4.1.2", mvn="no-such-mvn")
    message = str(info.value)
    assert "\n" not in message
    assert "'no-such-mvn' not found" in message and "Maven" in message


def test_missing_java_names_what_to_install(tmp_path: Path) -> None:
    broker = LocalBroker(
        BrokerSettings(java="no-such-java", data_dir=tmp_path / "kafka"),
        StatePaths(state_dir=tmp_path, cache_dir=tmp_path),
        record_state=False,
    )
    with pytest.raises(MissingToolError, match=r"'no-such-java' not found on PATH: install .*Java"):
        broker.start()


def test_cached_jars_are_reused_without_maven(tmp_path: Path) -> None:
    lib = jar_dir(tmp_path, "9.9.9")
    lib.mkdir(parents=True)
    (lib / ".complete").write_text(jar_stamp("9.9.9"))
    assert ensure_jars(tmp_path, "9.9.9", mvn="no-such-mvn") == lib


def test_jars_fetched_with_another_pom_are_fetched_again(tmp_path: Path) -> None:
    # A cache fetched with an older pom: its marker names the version alone.
    lib = jar_dir(tmp_path, "9.9.9")
    lib.mkdir(parents=True)
    (lib / ".complete").write_text("9.9.9")
    with pytest.raises(MissingToolError, match="no-such-mvn"):
        ensure_jars(tmp_path, "9.9.9", mvn="no-such-mvn")


def test_a_failed_fetch_shows_maven_output_and_leaves_no_half_cache(tmp_path: Path) -> None:
    # A Maven that leaves one jar behind and fails, as a download cut off half-way would.
    fake = tmp_path / "mvn"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case $a in -DoutputDirectory=*) d=${a#-DoutputDirectory=};; esac; done\n'
        'mkdir -p "$d" && touch "$d/partial.jar"\n'
        "echo '[ERROR] Could not resolve org.apache.kafka:kafka_2.13:0.0.0'\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(BrokerError, match=r"(?s)Maven failed.*Could not resolve"):
        ensure_jars(tmp_path, "0.0.0", mvn=str(fake))
    assert not jar_dir(tmp_path, "0.0.0").exists()
    assert not list(jar_dir(tmp_path, "0.0.0").parent.glob(".fetch-*"))


def test_a_secure_cluster_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    settings = BrokerSettings(secure=True, nodes=3, data_dir=tmp_path / "kafka")
    with pytest.raises(BrokerError, match="--secure runs one broker"):
        local_kafka(settings, StatePaths(state_dir=tmp_path, cache_dir=tmp_path))
