"""A transformers causal LM as the policy, when torch is installed.

Torch is not a dependency of rollstream (on Python 3.12 it pulls a multi-GB CUDA build); the
tiny numpy policy serves where it is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollstream.dev.backend.policies.base import GenerationRequest, Sample
from rollstream.errors import ConfigurationError
from rollstream.models.tokenizer import ChatTokenizer


class HFGeneration:
    """Token-by-token sampling with the model's KV cache."""

    def __init__(self, policy: HFPolicy, request: GenerationRequest) -> None:
        torch = policy.torch
        self.policy = policy
        self.request = request
        self.generator = torch.Generator().manual_seed(
            request.seed if request.seed is not None else int(torch.seed())
        )
        self.next_input = torch.tensor([request.prompt_ids])
        self.past: Any = None

    def next_token(self) -> Sample:
        """Run one forward step and sample from the (temperature-scaled) distribution."""
        torch = self.policy.torch
        with torch.no_grad():
            out = self.policy.model(
                input_ids=self.next_input, past_key_values=self.past, use_cache=True
            )
        self.past = out.past_key_values
        logits = out.logits[0, -1].float()
        temperature = self.request.temperature
        logprobs = torch.log_softmax(logits / max(temperature, 1e-3), dim=-1)
        if temperature <= 0:
            token = int(logprobs.argmax())
        else:
            token = int(torch.multinomial(logprobs.exp(), 1, generator=self.generator))
        top: list[tuple[int, float]] = []
        if self.request.top_logprobs:
            values, ids = logprobs.topk(self.request.top_logprobs)
            top = [(int(i), float(v)) for i, v in zip(ids, values, strict=True)]
        self.next_input = torch.tensor([[token]])
        return Sample(token, float(logprobs[token]), top)


class HFPolicy:
    """Loads ``AutoModelForCausalLM`` from a folder; needs torch."""

    name = "hf"

    def __init__(self, path: Path, tokenizer: ChatTokenizer, seed: int = 0) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise ConfigurationError(
                "the hf policy needs torch (pip install torch); use the tiny policy without it"
            ) from exc
        self.torch = torch
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
        self.tokenizer = tokenizer

    def start(self, request: GenerationRequest) -> HFGeneration:
        """Begin a generation."""
        return HFGeneration(self, request)
