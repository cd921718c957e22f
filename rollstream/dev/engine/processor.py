"""The logits processor that plays the plan inside vLLM (``--logits-processors``).

For each request it decodes the prompt vLLM rendered, asks the plan (plan.py) what the model
writes next, tokenizes that text with the served tokenizer and, step by step, leaves only the
planned token sampleable; after the plan's last token, the end-of-turn token. Everything else is
vLLM's own: the chat template, sampling, the tool-call and reasoning parsers, streaming, token
ids. The logprobs vLLM reports are the model's own (``logprobs_mode`` raw_logprobs, computed
before any processor), so they are not the forced 0.

Loaded by vLLM's processes from a copy beside plan.py (serve.py): it imports vLLM, torch,
transformers and the standard library, never rollstream. The plan file is named by
``ROLLSTREAM_ENGINE_PLAN``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from .plan import PLAN_ENV, answer

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

log = logging.getLogger("rollstream.engine.plan")


@dataclass
class _Planned:
    """One request's planned tokens and the live list of what it has written so far."""

    tokens: list[int]
    written: list[int]


class PlanProcessor(LogitsProcessor):  # type: ignore[misc]  # vLLM is not in rollstream's venv
    """Forces each request's planned answer, token by token (see the module docstring)."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        with open(os.environ[PLAN_ENV], encoding="utf-8") as handle:
            self.plan: dict[str, Any] = json.load(handle)
        model = vllm_config.model_config
        fast = Path(model.tokenizer) / "tokenizer.json"
        # The fast tokenizer reads the format's special tokens ([TOOL_CALLS], <|channel|>) out
        # of the planned text as the model would sample them. AutoTokenizer would load
        # transformers' mistral-common backend for a folder with tekken.json, which encodes
        # them as ordinary text, as a model never writes them.
        self.tokenizer = (
            PreTrainedTokenizerFast(tokenizer_file=str(fast))
            if fast.is_file()
            else AutoTokenizer.from_pretrained(model.tokenizer)
        )
        eos = self.tokenizer.convert_tokens_to_ids(self.plan["eos"])
        assert isinstance(eos, int), f"{self.plan['eos']!r} is no single token"
        self.eos = eos
        self.requests: dict[int, _Planned] = {}

    def is_argmax_invariant(self) -> bool:
        """It changes what is sampled, greedy included."""
        return False

    def _start(
        self, params: SamplingParams, prompt: list[int] | None, written: list[int]
    ) -> _Planned | None:
        if not prompt:
            return None
        text = self.tokenizer.decode(prompt, skip_special_tokens=False)
        assert isinstance(text, str)
        planned = answer(self.plan, text)
        tokens = [*self.tokenizer.encode(planned, add_special_tokens=False), self.eos]
        log.debug("plan: %d prompt tokens -> %r", len(prompt), planned[:120])
        return _Planned(tokens, written)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Plan the requests that joined the batch; forget those that left."""
        process_dict_updates(self.requests, batch_update, self._start)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Leave each planned request one sampleable token: the next of its plan."""
        for row, planned in self.requests.items():
            step = len(planned.written)
            token = planned.tokens[step] if step < len(planned.tokens) else self.eos
            keep = logits[row, token].clone()
            logits[row].fill_(float("-inf"))
            logits[row, token] = keep if torch.isfinite(keep) else 0.0
        return logits
