"""How the engine serves each family: the tiny model's architecture, template and vLLM parsers.

One table, read by the tiny-model builder (architecture, vocabulary, published template, special
tokens) and by the server (tool-call and reasoning parsers). Only families whose tiny model has
been served by the real engine in the tests are listed; a family's architecture is the nearest
one the CPU build runs (Qwen3-Coder is a mixture of experts: its template and vocabulary are
served on the dense Qwen3 architecture, so the experts' routing is not covered).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollstream.dev.engine.templates import FAMILY_TEMPLATES
from rollstream.errors import ConfigurationError
from rollstream.models.families import FAMILIES

#: A model small enough to start in seconds and write a hundred tokens a second on a CPU; the
#: CPU attention backend wants a head_dim of 32, 64, 80…
TINY_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "tie_word_embeddings": True,
}


@dataclass(frozen=True)
class EngineFamily:
    """One family as the engine serves it."""

    #: Hugging Face's ``model_type`` of the tiny model's architecture.
    model_type: str
    #: The tokenizer's special tokens by role, as the template reads them.
    specials: dict[str, str]
    #: vLLM's ``--tool-call-parser``.
    tool_parser: str
    #: How the plan reads this family's prompts and writes its turns (a key of plan.FORMATS).
    plan_format: str
    #: vLLM's ``--reasoning-parser``, or "" for a family that does not think.
    reasoning_parser: str = ""
    #: What the nearest architecture leaves uncovered, or "".
    not_covered: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    #: Tokens besides ``eos_token`` that end generation, as the real model's generation config
    #: lists them (gpt-oss stops at ``<|call|>`` as at ``<|return|>``).
    stops: tuple[str, ...] = ()
    #: vLLM's ``--tokenizer-mode``: "mistral" renders and tokenizes with mistral-common from
    #: the model's ``tekken.json``, as Mistral's own models are served (no chat template).
    tokenizer_mode: str = "auto"

    @property
    def eos(self) -> str:
        """The token that ends an assistant turn."""
        return self.specials["eos_token"]


_QWEN_SPECIALS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

ENGINE_FAMILIES: dict[str, EngineFamily] = {
    "qwen3": EngineFamily(
        "qwen3",
        _QWEN_SPECIALS,
        "hermes",
        "hermes-thinking",
        reasoning_parser="qwen3",
    ),
    "qwen3-coder": EngineFamily(
        "qwen3",
        _QWEN_SPECIALS,
        "qwen3_coder",
        "qwen3-coder",
        not_covered="Qwen3-Coder is a mixture of experts; served on dense Qwen3",
    ),
    "llama-3": EngineFamily(
        "llama",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "llama3_json",
        "llama3-json",
        config={"rope_theta": 500000.0},
    ),
    # vLLM renders and parses gpt-oss with openai-harmony (chosen by the model_type), not with a
    # chat template; the real model's 32 or 128 experts become four, two per token.
    "gpt-oss": EngineFamily(
        "gpt_oss",
        {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
        "openai",
        "harmony",
        reasoning_parser="openai_gptoss",
        stops=("<|endoftext|>", "<|call|>"),
        not_covered="four experts instead of 32 or 128; MXFP4 weights not covered (bf16)",
        config={
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "experts_per_token": 2,
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"],
        },
    ),
    # Mistral Nemo's v3 tekken format, rendered by mistral-common inside vLLM.
    "mistral": EngineFamily(
        "mistral",
        {"bos_token": "<s>", "eos_token": "</s>"},
        "mistral",
        "mistral-v3",
        tokenizer_mode="mistral",
        config={"rope_theta": 1000000.0},
    ),
}


def engine_family(name: str) -> EngineFamily:
    """The engine's entry for family ``name``; ConfigurationError naming those it serves."""
    found = ENGINE_FAMILIES.get(name)
    if found is None:
        raise ConfigurationError(
            f"the engine does not serve family {name!r} yet; it serves: "
            f"{', '.join(ENGINE_FAMILIES)}"
        )
    return found


def template_of(name: str) -> str:
    """The file name of the family's published template (templates.FAMILY_TEMPLATES)."""
    return FAMILY_TEMPLATES[name]


def vocabulary_of(name: str) -> str:
    """The cached vocabulary the family's tiny model is built on (the product's own table)."""
    return FAMILIES[name].vocabulary
