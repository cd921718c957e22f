"""Which program each harness preset runs: npm's install, a Python harness's venv, bash, Python."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rollstream.errors import ConfigurationError
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.install import executable as installed_executable
from rollstream.sandbox.harnesses.presets import Command, Python, preset
from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES, python_executable


def resolve_executable(name: str, cache_dir: Path) -> Path:
    """The program preset ``name`` launches.

    The npm install's, a Python harness's venv's, bash, or this Python.
    """
    if name in PACKAGES:
        return installed_executable(name, cache_dir)
    if name in PYTHON_PACKAGES:
        found = python_executable(name, cache_dir)
        if found is None:
            raise ConfigurationError(
                f"the {name} harness is not installed: run `rollstream harness install`"
            )
        return found
    if name == Command.name:
        bash = shutil.which("bash")
        if bash is None:
            raise ConfigurationError("the command harness needs bash on PATH")
        return Path(bash)
    if name == Python.name:
        return Path(sys.executable)
    preset(name)  # raises the error naming the known presets
    raise ConfigurationError(f"no executable known for harness {name!r}")
