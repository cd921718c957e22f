"""What makes one model family: its renderer, its vocabulary here, and its format's tokens.

Format knowledge lives here as data of each family (:data:`rollstream.models.families.FAMILIES`),
not as branches in the code that renders and parses every family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FamilySpec:
    """How to build one family: its renderer, its vocabulary here, its options."""

    renderer: str
    vocabulary: str
    config: dict[str, Any] = field(default_factory=dict)
    thinks: bool = False
    #: Why the vocabulary is a stand-in (no registry ships the real one), or "".
    stand_in: str = ""
    #: The template takes one system message, first: leading ones are joined, later ones
    #: become user messages.
    single_system: bool = False
    #: A call may also be a bare JSON object opening the turn, without the family's call token
    #: (Llama 3.1 writes ``{"name": ..., "parameters": ...}`` with or without <|python_tag|>).
    json_calls: bool = False
    #: vLLM's parsers for the family hand out reasoning and content as the model wrote them,
    #: whitespace included (vLLM 0.32's qwen3 reasoning parser and hermes tool parser; checked
    #: on vLLM's own tokens in tests/models/test_parse_on_vllm.py). Otherwise stripped.
    verbatim: bool = False
    #: A turn's header as (its opening token, the token that closes it), where a generation
    #: prompt may leave it open: vLLM's harmony prompt ends ``<|start|>assistant`` and the model
    #: writes the channel (renderers' ends ``…<|channel|>analysis<|message|>``); the parser reads
    #: a completion with the header's part from the prompt.
    header: tuple[str, ...] = ()
    #: The special tokens that open a tool call in the format: a streamed turn is parsed for
    #: calls only once one is sampled (none: calls are plain text, looked for from the start).
    call_opens: tuple[str, ...] = ()
    #: What ends reasoning in the sampled text: a call that cannot be parsed reaches the
    #: harness as the text after it, as vLLM hands it out.
    reasoning_close: str = ""
    #: How the family's server writes a call's id (``name``, ``index``); "" for the default.
    call_id_format: str = ""
