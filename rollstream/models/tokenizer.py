"""The served model's tokenizer: any Hugging Face tokenizer folder and its own chat template."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError

# transformers logs a warning at import when torch is missing; tokenizers need no torch.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


#: Claude Code's attribution line, first in its system prompt. Its value can change on every
#: request, so vLLM (0.32) drops it from system messages before the template runs (a prompt
#: keeping it would miss the prefix cache from there on); the families render as vLLM does.
BILLING_HEADER = "x-anthropic-billing-header"


def without_billing_header(message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` as vLLM's chat layer hands it to the template.

    A system message's text (or text part) that opens with Claude Code's billing header loses
    that line; a part that was only that line goes. Other messages are left as they are.
    """
    out = dict(message)
    content = out.get("content")
    if out.get("role") != "system" or not isinstance(content, str | list):
        return out
    kept: list[Any] = []
    for part in [content] if isinstance(content, str) else content:
        text = part if isinstance(part, str) else None
        if isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
        if not (isinstance(text, str) and text.startswith(BILLING_HEADER)):
            kept.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            kept.append(rest if isinstance(part, str) else {**part, "text": rest})
    out["content"] = (kept[0] if kept else "") if isinstance(content, str) else kept
    return out


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prepare OpenAI-style messages for a chat template, as vLLM does.

    Claude Code's billing header leaves the system prompt; content given as parts becomes text;
    tool-call arguments given as a JSON string become an object, so templates re-render them
    from parsed JSON (the bytes the model sampled are gone).
    """
    normalized = []
    for message in messages:
        out = without_billing_header(message)
        content = out.get("content")
        if isinstance(content, list):
            out["content"] = "".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            )
        elif content is None and not (out.get("role") == "assistant" and out.get("tool_calls")):
            # A tool-call turn keeps None, as vLLM passes it: templates (DeepSeek R1's) test
            # `content is none` to render the calls.
            out["content"] = ""
        if out.get("tool_calls"):
            calls = []
            for call in out["tool_calls"]:
                call = dict(call)
                function = dict(call.get("function") or {})
                if isinstance(function.get("arguments"), str):
                    # Unparseable arguments stay a string; the template renders them as they are.
                    with contextlib.suppress(ValueError):
                        function["arguments"] = json.loads(function["arguments"])
                call["function"] = function
                calls.append(call)
            out["tool_calls"] = calls
        normalized.append(out)
    return normalized


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas, never splitting a character.

    The approach of vLLM's ``detokenize_incrementally``: decode a short window before the new
    tokens and emit what the new tokens added, holding back while the text ends in an
    incomplete UTF-8 sequence.
    """

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_id: int) -> str:
        """Add one token; returns the text it completes (may be empty)."""
        self._ids.append(token_id)
        decode = self._tokenizer.decode
        prefix = decode(self._ids[self._prefix_offset : self._read_offset])
        full = decode(self._ids[self._prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end)."""
        prefix = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._tokenizer.decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        return full[len(prefix) :]


class ChatTokenizer:
    """A Hugging Face tokenizer folder: encoding, decoding and its chat template."""

    def __init__(self, path: Path, require_template: bool = True) -> None:
        from transformers import AutoTokenizer

        try:
            self._tok: Any = AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:
            raise ConfigurationError(f"cannot load a tokenizer from {path}: {exc}") from exc
        if require_template and not getattr(self._tok, "chat_template", None):
            raise ConfigurationError(f"the tokenizer in {path} has no chat template")
        self.path = path
        # The Rust tokenizer behind a fast tokenizer: decoding through it skips the wrapper's
        # per-call conversions, which dominate when decoding one token at a time.
        self._fast: Any = getattr(self._tok, "backend_tokenizer", None)
        self._token_text: dict[int, str] = {}
        self._splits: dict[int, tuple[int, int] | None] = {}

    @property
    def hf(self) -> Any:
        """The Hugging Face tokenizer itself (what the ``renderers`` library takes)."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return len(self._tok)

    def special_id(self, token: str) -> int | None:
        """The id of ``token`` when it is one token of the vocabulary, else None."""
        tid = self._tok.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != self._tok.unk_token_id and tid >= 0:
            return tid
        return None

    @cached_property
    def generation_stop_ids(self) -> frozenset[int]:
        """The ``eos_token_id`` of the folder's ``generation_config.json`` (one id or a list).

        A model's generation config names every token its server stops on (Llama 3's
        ``<|eom_id|>``, gpt-oss's ``<|call|>``...), which the tokenizer's one EOS does not.
        """
        try:
            config = json.loads((self.path / "generation_config.json").read_text())
        except (OSError, ValueError):
            return frozenset()
        eos = config.get("eos_token_id") if isinstance(config, dict) else None
        values = eos if isinstance(eos, list) else [eos]
        return frozenset(int(v) for v in values if isinstance(v, int))

    @cached_property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end a generation: EOS, the generation config's, end of turn / text."""
        ids = {self._tok.eos_token_id} if self._tok.eos_token_id is not None else set()
        ids |= self.generation_stop_ids
        for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"):
            tid = self.special_id(token)
            if tid is not None:
                ids.add(tid)
        return frozenset(ids)

    @cached_property
    def eos_id(self) -> int:
        """The end-of-turn token a model samples to finish its answer."""
        eos = self._tok.eos_token_id
        return int(eos) if eos is not None else min(self.stop_ids)

    @cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of special tokens (skipped when decoding generated text)."""
        return frozenset(self._tok.all_special_ids)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text of a conversation, through the tokenizer's own chat template."""
        rendered: str = self._tok.apply_chat_template(
            normalize_messages(messages),
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **template_kwargs,
        )
        return rendered

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in the text are recognised."""
        ids: list[int] = self._tok.encode(text, add_special_tokens=False)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``."""
        if self._fast is not None:
            fast: str = self._fast.decode(ids, skip_special_tokens=skip_special_tokens)
            return fast
        text: str = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        return text

    def token_text(self, token_id: int) -> str:
        """The text of one token on its own (what logprobs entries show)."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self._tok.decode([token_id], skip_special_tokens=False)
            self._token_text[token_id] = text
        return text

    def split_token(self, token_id: int) -> tuple[int, int] | None:
        """Two tokens that together spell ``token_id`` (a non-canonical tokenization), if any.

        Sampling can produce such pairs where re-tokenizing the same text gives one token; the
        scripted policy uses them so captured ids differ from a re-tokenization, as in reality.
        """
        if token_id in self._splits:
            return self._splits[token_id]
        result = None
        if token_id not in self.special_ids:
            piece = self._tok.convert_ids_to_tokens(token_id)
            vocab = self._vocab
            if isinstance(piece, str) and len(piece) > 1:
                for k in range(len(piece) - 1, 0, -1):
                    left, right = vocab.get(piece[:k]), vocab.get(piece[k:])
                    if left is not None and right is not None:
                        result = (left, right)
                        break
        self._splits[token_id] = result
        return result

    @cached_property
    def _vocab(self) -> dict[str, int]:
        vocab: dict[str, int] = self._tok.get_vocab()
        return vocab

    def incremental_decoder(self) -> IncrementalDecoder:
        """A decoder for one generation's stream of tokens."""
        return IncrementalDecoder(self)
