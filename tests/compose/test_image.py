"""compose/Dockerfile and its build context, read statically."""

from __future__ import annotations

import json
import tomllib

from rollstream.dev.containers.build_context import DOCKERFILE, ignore_patterns, ignored
from tests.compose.docker_build import copy_sources, effective, stages
from tests.compose.stack import COMPOSE_DIR, REPO, Stack, base_doc


def test_compose_builds_our_dockerfile_targets() -> None:
    stack = Stack(base_doc())
    targets = {stack.services[n]["build"]["target"] for n in stack.rollstream_services()}
    assert targets == {"rollstream", "node"}
    assert targets <= set(stages())
    for name in stack.rollstream_services():
        build = stack.services[name]["build"]
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert context == REPO
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE


def test_the_image_runs_the_rollstream_script_as_a_user() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for target in ("rollstream", "node"):
        assert json.loads(effective(target, "ENTRYPOINT") or "[]") == ["rollstream"]
        assert effective(target, "USER") not in (None, "root", "0")
    assert "rollstream" in scripts
    assert stages()["rollstream"].base.startswith("${PYTHON_IMAGE}")


def test_the_build_context_holds_what_pip_install_needs() -> None:
    patterns = ignore_patterns()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    sources = copy_sources()
    assert {"pyproject.toml", pyproject["project"]["readme"], "rollstream"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), source
        assert not ignored(source, patterns), source
    package_files = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "rollstream").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert package_files
    assert [f for f in package_files if ignored(f, patterns)] == []
    for outside in (
        ".venv/bin/python",
        "tests/conftest.py",
        ".git/HEAD",
        "rollstream/__pycache__/x.pyc",
    ):
        assert ignored(outside, patterns), outside


def test_ignore_matching_follows_buildkit() -> None:
    assert ignored("a/b/c.txt", ["a"])
    assert not ignored("a/b/c.txt", ["a", "!a/b"])
    assert ignored("a/b/c.pyc", ["**/*.pyc"])
    assert ignored("c.pyc", ["**/*.pyc"])
    assert not ignored("ab/c", ["a"])
    assert not ignored("x", [])


def test_the_package_data_is_in_the_build_context() -> None:
    patterns = ignore_patterns()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data: dict[str, list[str]] = pyproject["tool"]["setuptools"]["package-data"]
    for package, globs in package_data.items():
        folder = REPO / package.replace(".", "/")
        for glob in globs:
            matched = [p.relative_to(REPO).as_posix() for p in folder.glob(glob) if p.is_file()]
            assert matched, f"{package}: {glob}"
            assert [m for m in matched if ignored(m, patterns)] == [], f"{package}: {glob}"
