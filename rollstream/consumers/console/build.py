"""Building the console's front end: ``npm ci`` from the committed lock file, then esbuild.

The lock file pins every package (Preact, htm, uPlot, esbuild), so a build is reproducible;
npm's download cache is kept under the rollstream cache. A build is skipped when ``dist`` was
made from the same sources (a digest of them is kept beside it).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from rollstream.consumers.console.assets import Assets, web_dir
from rollstream.errors import ConfigurationError
from rollstream.host import require_tool
from rollstream.settings import StatePaths

#: Bound on each npm step (downloads included) and on the bundling.
STEP_TIMEOUT_S = 600
_STAMP = ".sources"


def sources_digest(web: Path) -> str:
    """A digest of what the build reads: the lock file, the build script, the sources."""
    digest = hashlib.sha256()
    files = [web / "package.json", web / "package-lock.json", web / "build.mjs"]
    files += sorted((web / "src").rglob("*"))
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(web)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _run(cmd: list[str], web: Path, what: str) -> None:
    done = subprocess.run(
        cmd, cwd=web, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise ConfigurationError(f"{what} failed in {web}:\n{tail}")


def build_front_end(web: Path | None = None, cache_dir: Path | None = None) -> Iterator[str]:
    """Build ``web/dist`` unless it is up to date; yields a line per step."""
    web = web or web_dir()
    dist = Assets(web / "dist")
    digest = sources_digest(web)
    stamp = web / "dist" / _STAMP
    if not dist.missing() and stamp.is_file() and stamp.read_text() == digest:
        yield f"console front end up to date in {web / 'dist'}"
        return
    npm = require_tool("npm", "Node.js 20+ with npm to build the console's front end")
    node = require_tool("node", "Node.js 20+ to build the console's front end")
    cache = (cache_dir or StatePaths().cache_dir) / "npm"
    yield "console front end: npm ci (pinned by package-lock.json)"
    _run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--cache", str(cache)],
        web,
        "npm ci",
    )
    yield "console front end: bundling with esbuild"
    _run([node, "build.mjs"], web, "the esbuild bundle")
    dist.require()
    stamp.write_text(digest)
    yield f"console front end built in {web / 'dist'}"
