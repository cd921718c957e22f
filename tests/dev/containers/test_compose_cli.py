"""Docker Compose v2 built once into the cache: a stand-in ``go`` records what it was asked."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from rollstream.dev.containers.compose_cli import (
    COMPOSE_MODULE,
    COMPOSE_VERSION,
    compose_path,
    ensure_compose,
)
from rollstream.errors import ContainerEngineError, MissingToolError
from rollstream.settings import StatePaths

#: Writes a binary where GOBIN says, after SLEEP seconds, and logs its arguments and caches.
FAKE_GO = """#!/bin/sh
echo "$@ GOMODCACHE=$GOMODCACHE" >> "{log}"
sleep {sleep}
[ "{fail}" = 1 ] && {{ echo "go: module lookup disabled" >&2; exit 1; }}
printf '#!/bin/sh\\necho compose\\n' > "$GOBIN/cmd"
chmod +x "$GOBIN/cmd"
"""


def _fake_go(tmp_path: Path, *, sleep: float = 0, fail: bool = False) -> tuple[str, Path]:
    log = tmp_path / "go.log"
    go = tmp_path / "go"
    go.write_text(FAKE_GO.format(log=log, sleep=sleep, fail=int(fail)))
    go.chmod(0o755)
    return str(go), log


def test_it_builds_once_into_the_cache(tmp_path: Path) -> None:
    go, log = _fake_go(tmp_path)
    paths = StatePaths(cache_dir=tmp_path / "cache")
    binary = ensure_compose(paths, go=go)
    assert binary == compose_path(paths.cache_dir) and binary.name.endswith(COMPOSE_VERSION)
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "compose\n"
    assert ensure_compose(paths, go=go) == binary
    calls = log.read_text().splitlines()
    assert len(calls) == 1  # the second call found it
    assert f"install {COMPOSE_MODULE}@{COMPOSE_VERSION}" in calls[0]
    assert f"GOMODCACHE={paths.cache_dir / 'go' / 'mod'}" in calls[0]


def test_a_failed_build_leaves_no_binary_and_says_why(tmp_path: Path) -> None:
    go, _ = _fake_go(tmp_path, fail=True)
    paths = StatePaths(cache_dir=tmp_path / "cache")
    with pytest.raises(ContainerEngineError, match="module lookup disabled"):
        ensure_compose(paths, go=go)
    binary = compose_path(paths.cache_dir)
    assert not binary.exists()
    assert {p.name for p in binary.parent.iterdir()} == {f"{binary.name}.lock"}


def test_without_go_it_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MissingToolError, match="Docker Compose"):
        ensure_compose(StatePaths(cache_dir=tmp_path), go="no-such-go")


def test_a_second_caller_waits_for_the_build_under_way(tmp_path: Path) -> None:
    go, log = _fake_go(tmp_path, sleep=1.5)
    paths = StatePaths(cache_dir=tmp_path / "cache")
    results: list[Path] = []
    first = threading.Thread(target=lambda: results.append(ensure_compose(paths, go=go)))
    first.start()
    time.sleep(0.5)  # the first holds the lock by now
    began = time.monotonic()
    results.append(ensure_compose(paths, go=go))
    waited = time.monotonic() - began
    first.join()
    assert results[0] == results[1]
    assert len(log.read_text().splitlines()) == 1 and waited > 0.5
