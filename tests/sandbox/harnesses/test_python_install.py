"""Installing the Python harnesses: a venv each, pinned, complete only once marked so."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rollstream.errors import ConfigurationError
from rollstream.sandbox.harnesses.install import HarnessInstallError
from rollstream.sandbox.harnesses.python_install import (
    PYTHON_PACKAGES,
    install_python,
    python_executable,
    venv_dir,
)

NAME = "mini-swe-agent"
#: A Python whose ``-m venv ROOT`` makes ROOT/bin/python: one whose ``-m pip install`` logs its
#: arguments and makes the harness's executable, unless told to fail.
FAKE_PYTHON = """#!/bin/sh
root="$3"
mkdir -p "$root/bin"
cat > "$root/bin/python" <<'PIP'
#!/bin/sh
echo "$@" >> "$LOG"
[ -n "$FAIL" ] && { echo "ERROR: No matching distribution" >&2; exit 1; }
printf '#!/bin/sh\\n' > "$(dirname "$0")/EXE"
PIP
sed -i "s/EXE/$EXE/" "$root/bin/python"
chmod +x "$root/bin/python"
"""


@pytest.fixture
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("LOG", str(tmp_path / "pip.log"))
    monkeypatch.setenv("EXE", PYTHON_PACKAGES[NAME][1])
    return str(python)


def test_a_harness_gets_a_venv_of_its_own_pinned_once(fake_python: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert python_executable(NAME, cache) is None
    exe = install_python(NAME, cache, python=fake_python)
    assert exe == venv_dir(NAME, cache) / "bin" / PYTHON_PACKAGES[NAME][1]
    args = (tmp_path / "pip.log").read_text().split()
    assert args[:2] == ["-m", "pip"] and set(PYTHON_PACKAGES[NAME][0]) <= set(args)
    assert args[args.index("--cache-dir") + 1] == str(cache / "pip")
    assert python_executable(NAME, cache) == exe
    (tmp_path / "pip.log").unlink()
    assert install_python(NAME, cache, python=fake_python) == exe
    assert not (tmp_path / "pip.log").exists()  # already there: pip not run again


def test_a_failed_install_is_not_taken_for_one_and_is_made_again(
    fake_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(HarnessInstallError, match="No matching distribution"):
        install_python(NAME, cache, python=fake_python)
    assert python_executable(NAME, cache) is None  # a venv is there, but not marked complete
    assert venv_dir(NAME, cache).exists()
    monkeypatch.delenv("FAIL")
    assert install_python(NAME, cache, python=fake_python).exists()


def test_an_unknown_harness_is_named() -> None:
    with pytest.raises(ConfigurationError, match="known: mini-swe-agent"):
        python_executable("nope", Path("/nonexistent"))
