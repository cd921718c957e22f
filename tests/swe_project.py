"""An SWE-style instance made from a real project: inflection's sdist from PyPI, a planted bug.

The sdist (fetched once with pip, its hash pinned, kept under the user's cache) becomes a git
repository whose base commit has a bug planted in ``dasherize`` (only the first underscore
becomes a dash) and lacks the one test case that shows it. The test patch adds that case back:
it is the instance's FAIL_TO_PASS; other tests of the project's own suite, ids with spaces and
`` - `` among them, are PASS_TO_PASS. Scripted sessions then solve it, or not, in their diffs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollstream.settings import StatePaths

PROJECT = "inflection"
VERSION = "0.5.1"
SHA256 = "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"
MODULE = "inflection/__init__.py"
TESTS = "test_inflection.py"
CORRECT = "    return word.replace('_', '-')\n"
PLANTED = "    return word.replace('_', '-', 1)\n"
SHOWN_BY = '    ("person_street_address", "person-street-address"),\n'
FAIL_TO_PASS = ["test_inflection.py::test_dasherize[person_street_address-person-street-address]"]
PASS_TO_PASS = [
    "test_inflection.py::test_dasherize[street-street]",
    "test_inflection.py::test_dasherize[street_address-street-address]",
    "test_inflection.py::test_titleize[action web service-Action Web Service]",
    "test_inflection.py::test_humanize[employee_salary-Employee salary]",
    "test_inflection.py::test_ordinal[-1--1st]",
    "test_inflection.py::test_pluralize_empty_string",
]
#: A session that fixes the bug but breaks another function (a PASS_TO_PASS test then fails).
BREAKS_TITLEIZE = (
    "\n_titleize = titleize\n\n\ndef titleize(word):\n    return _titleize(word).upper()\n"
)


def sdist() -> Path:
    """The project's sdist, downloaded from PyPI once (hash-checked) into the user's cache."""
    cache = StatePaths().cache_dir / "sdists"
    archive = cache / f"{PROJECT}-{VERSION}.tar.gz"
    if archive.exists():
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    # Into a directory of this process's own, then renamed: two test workers may both fetch it.
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        requirement = Path(scratch) / f"{PROJECT}.txt"
        requirement.write_text(f"{PROJECT}=={VERSION} --hash=sha256:{SHA256}\n")
        fetched = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary"),
                *(":all:", "--require-hashes", "-r", str(requirement), "-d", scratch),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if fetched.returncode != 0:
            pytest.skip(f"the {PROJECT} sdist could not be downloaded from PyPI: {fetched.stderr}")
        os.replace(Path(scratch) / archive.name, archive)
    return archive


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *identity, "-C", str(repo), *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not once in {path}"
    path.write_text(text.replace(old, new))


@dataclass(frozen=True)
class SweProject:
    """The repository (``mirrors/<owner>__<name>``), its instance, and the patches around it."""

    mirrors: Path
    instance: dict[str, Any]
    fix: str  # the gold patch: what a solving session's diff does

    @property
    def repo(self) -> Path:
        """The repository's clone in ``mirrors``."""
        return self.mirrors / "pypi__inflection"


def build(root: Path) -> SweProject:
    """The repository at ``root/mirrors`` and its SWE-bench-format instance."""
    mirrors = root / "mirrors"
    repo = mirrors / "pypi__inflection"
    with tarfile.open(sdist()) as archive:
        archive.extractall(root / "unpacked", filter="data")
    mirrors.mkdir()
    (root / "unpacked" / f"{PROJECT}-{VERSION}").rename(repo)
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "inflection 0.5.1 from its sdist")
    _replace(repo / MODULE, CORRECT, PLANTED)
    _replace(repo / TESTS, SHOWN_BY, "")
    _git(repo, "commit", "--quiet", "-am", "the planted bug, and no test showing it")
    base = _git(repo, "rev-parse", "HEAD").strip()
    _replace(repo / TESTS, '    ("street_address",        "street-address"),\n',
             '    ("street_address",        "street-address"),\n' + SHOWN_BY)  # fmt: skip
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "--quiet", "--", TESTS)
    _replace(repo / MODULE, PLANTED, CORRECT)
    fix = _git(repo, "diff")
    _git(repo, "checkout", "--quiet", "--", MODULE)
    instance = {
        "instance_id": "pypi__inflection-1",
        "repo": "pypi/inflection",
        "base_commit": base,
        "problem_statement": "dasherize('person_street_address') gives 'person-street_address': "
        "every underscore should become a dash.",
        "test_patch": test_patch,
        "patch": fix,
        "FAIL_TO_PASS": json.dumps(FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(PASS_TO_PASS),
        "version": "0.5",
        "created_at": "2026-12-02T00:00:00Z",
        "hints_text": "",
    }
    return SweProject(mirrors, instance, fix)
