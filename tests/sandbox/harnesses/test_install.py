"""Installing the pinned harnesses: a staged npm install, never taken for complete when broken."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rollstream.errors import ConfigurationError, MissingToolError
from rollstream.sandbox.harnesses.install import (
    PACKAGES,
    HarnessInstallError,
    executable,
    install,
    install_dir,
    installed,
)

FAKE_NPM = f"""#!/bin/sh
# Records its arguments, then creates the executables unless told to fail.
echo "$@" > "$LOG"
[ -n "$FAIL" ] && {{ echo "npm ERR! 404 Not Found" >&2; exit 1; }}
mkdir -p node_modules/.bin
for exe in {" ".join(exe for _, exe in PACKAGES.values())}; do
  printf '#!/bin/sh\\n' > node_modules/.bin/$exe
done
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    npm = tmp_path / "bin" / "npm"
    npm.parent.mkdir()
    npm.write_text(FAKE_NPM)
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("LOG", str(tmp_path / "npm.log"))
    return npm


def test_install_is_staged_pinned_and_idempotent(fake_npm: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert installed(cache) is None
    with pytest.raises(ConfigurationError, match="rollstream harness install"):
        executable("pi", cache)
    bin_dir = install(cache, npm=str(fake_npm))
    assert bin_dir == install_dir(cache) / "node_modules" / ".bin"
    args = (tmp_path / "npm.log").read_text().split()
    assert {spec for spec, _ in PACKAGES.values()} <= set(args)
    assert args[args.index("--cache") + 1] == str(cache / "npm")
    assert executable("codex", cache) == bin_dir / "codex"
    assert executable("gemini-cli", cache) == bin_dir / "gemini"
    (tmp_path / "npm.log").unlink()
    assert install(cache, npm=str(fake_npm)) == bin_dir
    assert not (tmp_path / "npm.log").exists()  # already there: npm not run again
    assert [p.name for p in install_dir(cache).parent.iterdir()] == [install_dir(cache).name]


def test_a_failed_install_leaves_nothing(
    fake_npm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL", "1")
    cache = tmp_path / "cache"
    with pytest.raises(HarnessInstallError, match="404 Not Found") as info:
        install(cache, npm=str(fake_npm))
    assert info.value.retriable
    assert installed(cache) is None
    assert os.listdir(install_dir(cache).parent) == []


def test_missing_npm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MissingToolError, match="npm"):
        install(tmp_path, npm="no-such-npm")
