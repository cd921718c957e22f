"""The project image's names and dependency list: what makes the set-up build it again, or not.

(The build itself runs in the set-up, and the Compose test runs what it made.)
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from rollstream.dev.containers import build_context, project_image
from rollstream.dev.containers.engine import DockerEngine
from rollstream.dev.containers.settings import DockerSettings
from rollstream.errors import ConfigurationError, ContainerEngineError
from rollstream.settings import StatePaths

PYPROJECT = """
[project]
name = "rollstream"
dependencies = ["aiokafka>=0.14"]

[project.optional-dependencies]
models = ["jinja2>=3.1"]
interceptor = ["rollstream[models]", "mitmproxy>=12"]
dev = ["rollstream[interceptor, models]", "matplotlib"]
all = ["rollstream[dev]", "docker>=7"]
"""


def test_the_dependency_list_follows_the_project_s_own_extras(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    assert build_context.requirements(pyproject) == sorted(
        ["aiokafka>=0.14", "jinja2>=3.1", "mitmproxy>=12", "matplotlib", "docker>=7"]
    )
    assert build_context.requirements(pyproject, "interceptor") == [
        "aiokafka>=0.14",
        "jinja2>=3.1",
        "mitmproxy>=12",
    ]
    with pytest.raises(ConfigurationError, match="no extra 'gpu'"):
        build_context.requirements(pyproject, "gpu")


def test_the_real_dependency_list_is_what_pip_install_all_installs() -> None:
    found = build_context.requirements()
    project = tomllib.loads(build_context.PYPROJECT.read_text())["project"]
    assert not [r for r in found if r.startswith("rollstream")]
    assert set(project["dependencies"]) <= set(found)
    for extra in ("interceptor", "producers", "consumers", "export", "docker"):
        own = [r for r in project["optional-dependencies"][extra] if "rollstream" not in r]
        assert set(own) <= set(found), extra


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "compose").mkdir(parents=True)
    (repo / "rollstream").mkdir()
    (repo / "tests").mkdir()
    (repo / "compose" / "Dockerfile").write_text("FROM x\n")
    (repo / "compose" / "Dockerfile.dockerignore").write_text(
        build_context.DOCKERIGNORE.read_text()
    )
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "README.md").write_text("readme\n")
    (repo / "rollstream" / "a.py").write_text("A = 1\n")
    (repo / "tests" / "test_a.py").write_text("def test(): pass\n")
    return repo


def test_the_image_is_named_after_what_its_build_reads_and_nothing_else(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    files = build_context.context_files(repo)
    assert files == ["README.md", "pyproject.toml", "rollstream/a.py"]
    key = build_context.content_key("base:1", files, repo)
    (repo / "tests" / "test_a.py").write_text("def test(): assert True\n")  # not in the context
    assert build_context.content_key("base:1", build_context.context_files(repo), repo) == key
    assert build_context.content_key("base:2", files, repo) != key  # another base
    (repo / "compose" / "Dockerfile").write_text("FROM y\n")
    assert build_context.content_key("base:1", files, repo) != key
    (repo / "compose" / "Dockerfile").write_text("FROM x\n")
    (repo / "rollstream" / "a.py").write_text("A = 2\n")
    assert build_context.content_key("base:1", files, repo) != key


def test_names_and_saved_copies_live_under_the_cache(tmp_path: Path) -> None:
    names = project_image.project_image(DockerSettings(), StatePaths(cache_dir=tmp_path))
    assert names.reference == f"rollstream:{names.tag}"
    assert names.deps_reference == f"rollstream-deps:{names.deps_tag}"
    assert names.saved == tmp_path / "images" / f"rollstream-image-{names.tag}.tar"
    assert names.deps_saved.parent == names.saved.parent
    assert not project_image.is_saved(StatePaths(cache_dir=tmp_path))


def test_a_test_never_builds_the_image_it_lacks(tmp_path: Path) -> None:
    """Loading finds the set-up's saved copy or says which set-up step makes it."""
    asked: list[str] = []
    engine = cast(
        DockerEngine,
        SimpleNamespace(
            settings=DockerSettings(),
            api=SimpleNamespace(image=lambda ref: asked.append(ref)),
            docker=lambda *a, **k: pytest.fail(f"docker {a} ran"),
        ),
    )
    with pytest.raises(ContainerEngineError, match="prebuilt build project-image"):
        project_image.load_project_image(engine, StatePaths(cache_dir=tmp_path))
    assert asked and asked[0].startswith("rollstream:")


def test_old_saved_images_are_removed_beyond_the_newest_and_never_the_other_kind(
    tmp_path: Path,
) -> None:
    for age, name in enumerate(["c", "b", "a"]):
        for prefix in (project_image.PROJECT_SAVED, project_image.DEPS_SAVED):
            path = tmp_path / f"{prefix}{name}.tar"
            path.write_text(name)
            os.utime(path, (1000 - age, 1000 - age))  # c newest
    project_image._prune(tmp_path, project_image.PROJECT_SAVED, 2)
    deps = project_image.DEPS_SAVED
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{deps}a.tar", f"{deps}b.tar", f"{deps}c.tar"]
        + [f"{project_image.PROJECT_SAVED}{n}.tar" for n in "bc"]
    )
    project_image._prune(tmp_path, deps, 1)
    assert {p.name for p in tmp_path.glob(f"{deps}*")} == {f"{deps}c.tar"}
