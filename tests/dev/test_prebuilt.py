"""The set-up's builds: started in the background, waited for with a bound, outside test timeouts.

Stand-in builds (shell commands that take a while and leave a file) drive the mechanism; the
real ones (Compose, the base's root, the project image) are the Compose test's and the Docker
tests' own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rollstream.dev import prebuilt
from rollstream.dev.containers.compose_cli import compose_path
from rollstream.settings import StatePaths

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]


def _stand_in(
    tmp_path: Path, script: str, name: str = "thing", bound: float = 60
) -> prebuilt.Prebuilt:
    """A build that runs ``script`` (``$OUT`` is the file whose existence means done)."""
    out = tmp_path / f"{name}.out"
    return prebuilt.Prebuilt(
        name,
        f"a stand-in {name}",
        5,
        bound,
        out.is_file,
        ("sh", "-c", f"OUT={out}; {script}"),
    )


def _paths(tmp_path: Path) -> StatePaths:
    return StatePaths(cache_dir=tmp_path / "cache", state_dir=tmp_path / "state")


def test_a_build_already_made_is_ready_at_once_and_nothing_runs(tmp_path: Path) -> None:
    item = _stand_in(tmp_path, 'echo ran >> "$OUT.runs"; touch "$OUT"')
    (tmp_path / "thing.out").touch()
    outcome = prebuilt.wait(item, _paths(tmp_path))
    assert (outcome.state, outcome.waited_s) == ("ready", 0.0)
    assert not (tmp_path / "thing.out.runs").exists()
    assert not prebuilt.log_path(_paths(tmp_path), "thing").exists()


def test_a_wait_starts_the_build_and_follows_it_to_the_end(tmp_path: Path) -> None:
    item = _stand_in(tmp_path, 'sleep 1; echo made; touch "$OUT"')
    outcome = prebuilt.wait(item, _paths(tmp_path), poll_s=0.1)
    assert outcome.state == "ready" and outcome.waited_s >= 1.0
    log = prebuilt.log_path(_paths(tmp_path), "thing").read_text()
    assert "prebuilt" in log and "build thing" in log and "made" in log


def test_a_machine_that_cannot_build_it_makes_it_unavailable_with_the_reason(
    tmp_path: Path,
) -> None:
    script = f'echo "debootstrap not found"; exit {prebuilt.UNAVAILABLE}'
    outcome = prebuilt.wait(_stand_in(tmp_path, script), _paths(tmp_path), poll_s=0.1)
    assert outcome.state == "unavailable"
    assert "debootstrap not found" in outcome.detail and "stand-in" in outcome.detail


def test_a_failed_build_says_what_its_log_said(tmp_path: Path) -> None:
    script = "echo step one; echo 'go: module lookup refused' >&2; exit 1"
    outcome = prebuilt.wait(_stand_in(tmp_path, script), _paths(tmp_path), poll_s=0.1)
    assert outcome.state == "failed"
    assert "step one" in outcome.detail and "module lookup refused" in outcome.detail


def test_a_build_past_its_bound_fails_the_wait_and_keeps_running(tmp_path: Path) -> None:
    item = _stand_in(tmp_path, 'echo started; sleep 2; touch "$OUT"', bound=0.5)
    outcome = prebuilt.wait(item, _paths(tmp_path), poll_s=0.1)
    assert outcome.state == "failed"
    assert "not ready after 0s" in outcome.detail and "started" in outcome.detail
    deadline = time.monotonic() + 10
    while not item.ready() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert item.ready()  # the build went on; a later wait finds it


def test_waits_while_a_build_is_under_way_build_it_once(tmp_path: Path) -> None:
    """Two waiters and the set-up's start: one build runs, the others wait on its lock."""
    script = (
        f'exec 9>>"{tmp_path}/lock"; flock 9; '
        '[ -f "$OUT" ] || { sleep 1; echo built >> "$OUT.runs"; touch "$OUT"; }'
    )
    item = _stand_in(tmp_path, script)
    paths = _paths(tmp_path)
    started = prebuilt.launch(item, paths)  # what `make test` does first
    outcomes: list[prebuilt.Outcome] = []
    waiters = [
        threading.Thread(target=lambda: outcomes.append(prebuilt.wait(item, paths, poll_s=0.1)))
        for _ in range(2)
    ]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join(30)
    assert [o.state for o in outcomes] == ["ready", "ready"]
    assert (tmp_path / "thing.out.runs").read_text() == "built\n"
    assert started.wait(10) == 0


FAKE_GO = """#!/bin/sh
sleep 1
printf '#!/bin/sh\\necho compose\\n' > "$GOBIN/cmd"
chmod +x "$GOBIN/cmd"
"""


def _cli(tmp_path: Path, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"ROLLSTREAM_CACHE_DIR": str(tmp_path / "cache"), "PATH": path}
    return subprocess.run(
        [sys.executable, "-m", "rollstream.dev.prebuilt", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_returns_at_once_says_what_it_builds_and_the_build_finishes(
    tmp_path: Path,
) -> None:
    go = tmp_path / "bin" / "go"
    go.parent.mkdir()
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    began = time.monotonic()
    done = _cli(tmp_path, "start", "compose", path=f"{go.parent}:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 30
    assert "compose: building in the background: Docker Compose" in done.stdout
    assert "usually about 6 min" in done.stdout
    binary = compose_path(tmp_path / "cache")
    deadline = time.monotonic() + 30
    while not binary.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert binary.exists(), prebuilt.log_path(_paths(tmp_path), "compose").read_text()
    again = _cli(tmp_path, "start", "compose", path=f"{go.parent}:/usr/bin:/bin")
    assert again.stdout.startswith("compose: ready")


def test_a_build_without_its_tool_exits_unavailable_saying_what_to_install(
    tmp_path: Path,
) -> None:
    done = _cli(tmp_path, "build", "compose", path="/nonexistent")
    assert done.returncode == prebuilt.UNAVAILABLE, done.stdout + done.stderr
    assert "'go' not found on PATH" in done.stdout and "Traceback" not in done.stderr


def test_status_says_where_each_build_stands(tmp_path: Path) -> None:
    binary = compose_path(tmp_path / "cache")
    binary.parent.mkdir(parents=True)
    binary.touch()
    done = _cli(tmp_path, "status", path=os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = ["compose", "base-root", "project-image", "engine", "python-harnesses"]
    assert [line.split(":")[0] for line in lines] == names
    assert lines[0].startswith("compose: ready")
    assert lines[1].startswith("base-root: not built") and "base-root.log" in lines[1]
    assert lines[3].startswith("engine: not built")  # the cache here has no engine
    assert lines[4].startswith("python-harnesses: not built")


def test_an_unknown_build_is_refused_by_name(tmp_path: Path) -> None:
    done = _cli(tmp_path, "status", "nope", path=os.environ["PATH"])
    assert done.returncode == 2 and "unknown build nope" in done.stderr


# -- the suite's side: the wait happens before the test's timeout starts ---------------------

CONFTEST = """
import pytest
from rollstream.dev import prebuilt
from tests import prebuilt_wait

def stand_in(name, script):
    out = {tmp!r} + "/" + name + ".out"
    import os
    return prebuilt.Prebuilt(
        name, "a stand-in " + name, 5, 60, lambda: os.path.isfile(out),
        ("sh", "-c", f"OUT={{out}}; echo run >> {tmp!r}/{{name}}.runs; {{script}}"),
    )

FAKE = {{
    "slow": stand_in("slow", 'sleep 3; touch "$OUT"'),
    "missing": stand_in("missing", 'echo "no debootstrap here"; exit 3'),
    "broken": stand_in("broken", 'echo "mirror refused"; exit 1'),
}}

def pytest_configure(config):
    prebuilt_wait._registry = lambda: FAKE
    config.pluginmanager.register(prebuilt_wait, "rollstream-prebuilt")
"""

TESTS = """
import time
import pytest

@pytest.mark.timeout(2)
@pytest.mark.prebuilt("slow")
def test_after_a_slow_build():
    pass

@pytest.mark.timeout(2)
def test_the_same_build_inside_the_test_times_out():
    time.sleep(3)

@pytest.mark.prebuilt("missing")
def test_needs_missing():
    pass

@pytest.mark.prebuilt("broken")
def test_needs_broken_1():
    pass

@pytest.mark.prebuilt("broken")
def test_needs_broken_2():
    pass
"""


def test_the_suite_waits_outside_the_timeout_skips_what_cannot_be_built_and_fails_what_broke(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("ROLLSTREAM_CACHE_DIR", str(tmp_path / "cache"))
    pytester.makeconftest(CONFTEST.format(tmp=str(tmp_path)))
    pytester.makepyfile(test_builds=TESTS)
    pytester.makeini(
        "[pytest]\nmarkers =\n    prebuilt(*names): set-up builds\nfilterwarnings = error\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, failed=1, errors=2, skipped=1)
    out = result.stdout.str()
    assert "Timeout" in out  # the control: 3 s inside a 2 s test is cut
    assert "no debootstrap here" in out  # the skip's reason
    assert out.count("mirror refused") >= 2  # both tests that need it fail with its log
    assert re.search(
        r"slow: ready after [34]s, before test_builds.py::test_after_a_slow_build", out
    )
    # Once per worker: the broken build ran once for its two tests.
    assert (tmp_path / "broken.runs").read_text() == "run\n"
