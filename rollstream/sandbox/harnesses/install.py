"""Installing the pinned harness versions from npm, once, into the rollstream cache.

Versions are pinned because the harnesses change their request shapes from release to release,
and the interceptor's translators are tested against these exact versions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from rollstream.errors import ConfigurationError, RollstreamError
from rollstream.host import require_tool

log = logging.getLogger(__name__)

#: npm package of each harness, pinned; the executable it installs.
PACKAGES: dict[str, tuple[str, str]] = {
    "claude-code": ("@anthropic-ai/claude-code@2.1.197", "claude"),
    "codex": ("@openai/codex@0.171.0", "codex"),
    "qwen-code": ("@qwen-code/qwen-code@0.15.10", "qwen"),
    "pi": ("@mariozechner/pi-coding-agent@0.73.1", "pi"),
    "gemini-cli": ("@google/gemini-cli@0.61.0", "gemini"),
    "opencode": ("opencode-ai@1.18.33", "opencode"),
    # 7.8.1, the newest, has no platform binaries on the registry here.
    "kilo": ("@kilocode/cli@7.7.7", "kilo"),
}
#: Harnesses tried and not runnable here, and why (``rollstream harness list`` says so).
UNAVAILABLE: dict[str, str] = {
    "crush": "@charmland/crush@0.96.1's npm package only downloads the program from GitHub at "
    "install (the Go module proxy refuses its module): it cannot be installed offline",
}
_COMPLETE_MARKER = ".complete"


class HarnessInstallError(RollstreamError):
    """npm could not install the harnesses (network, registry, disk)."""

    retriable = True


def install_dir(cache_dir: Path) -> Path:
    """Where this set of pinned versions lives; a new pin set gets a new directory."""
    specs = sorted(spec for spec, _ in PACKAGES.values())
    key = hashlib.sha256("\n".join(specs).encode()).hexdigest()[:12]
    return cache_dir / "harnesses" / key


def installed(cache_dir: Path) -> Path | None:
    """The ``node_modules/.bin`` folder of a complete install, or None."""
    target = install_dir(cache_dir)
    return target / "node_modules" / ".bin" if (target / _COMPLETE_MARKER).exists() else None


def executable(name: str, cache_dir: Path) -> Path:
    """The installed executable of harness ``name``; a clear error if it is not installed."""
    if name not in PACKAGES:
        raise ConfigurationError(f"unknown harness {name!r}; known: {', '.join(PACKAGES)}")
    bin_dir = installed(cache_dir)
    if bin_dir is None:
        raise ConfigurationError(
            f"the harnesses are not installed in {install_dir(cache_dir)}: "
            "run `rollstream harness install`"
        )
    return bin_dir / PACKAGES[name][1]


def install(cache_dir: Path, npm: str = "npm") -> Path:
    """Install every pinned harness (about 1.4 GB) unless already there; return the bin folder.

    npm installs into a temporary folder renamed into place at the end, so an interrupted
    install is never taken for a complete one. npm's own download cache is kept under
    ``cache_dir/npm`` so a reinstall needs no network.
    """
    done = installed(cache_dir)
    if done is not None:
        return done
    npm_path = require_tool(npm, "Node.js 20+ with npm to install the harnesses")
    target = install_dir(cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".install-") as tmp:
        staging = Path(tmp) / "pkg"
        staging.mkdir()
        (staging / "package.json").write_text(json.dumps({"private": True}))
        cmd = [
            npm_path,
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--cache",
            str(cache_dir / "npm"),
            *(spec for spec, _ in PACKAGES.values()),
        ]
        log.info("installing %s into %s", ", ".join(PACKAGES), target)
        proc = subprocess.run(cmd, cwd=staging, capture_output=True, text=True, check=False)
        missing = [
            exe
            for _, exe in PACKAGES.values()
            if not (staging / "node_modules/.bin" / exe).exists()
        ]
        if proc.returncode != 0 or missing:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
            raise HarnessInstallError(f"npm install of the harnesses failed:\n{tail}")
        (staging / _COMPLETE_MARKER).write_text("\n".join(s for s, _ in PACKAGES.values()))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target / "node_modules" / ".bin"
