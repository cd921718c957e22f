"""The scripted policy: answers from scenarios, with token ids and logprobs like a sampler's.

Its distribution, which the logprobs report: at each step the scripted token has probability
``p``, drawn uniformly from [0.55, 0.99] per token (seeded by session and turn), and the
remaining ``1 - p`` is spread evenly over the rest of the vocabulary. ``temperature`` is
ignored. The ids are the script's text tokenized, except that some tokens (``split_rate``) are
emitted as two smaller tokens spelling the same bytes, as sampling sometimes does; re-tokenizing
the text then gives different ids.

With a ``scorer`` (the tiny policy; ``--scripted-logprobs tiny``) the tokens are still the
script's, but each one's logprob (and the top alternatives) is the tiny model's at that point,
teacher-forced. Harnesses still complete their tasks, and a trainer that updates the tiny
model's weights (the example trainer) sees logprobs it can recompute exactly, which change
with every weight update.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace

from rollstream.backend.policies.base import GenerationRequest, Sample
from rollstream.backend.policies.tiny import TinyGeneration, TinyPolicy
from rollstream.backend.scenarios import (
    ScenarioFile,
    count_assistant_turns,
    count_prompt_turns,
    offered_tools,
    tools_in_prompt,
    turn_text,
)
from rollstream.models.tokenizer import ChatTokenizer


@dataclass
class ScriptedGeneration:
    """Replays a fixed token list, then the end-of-turn token forever."""

    tokens: list[int]
    probs: list[float]
    eos: int
    vocab_size: int
    top_k: int
    position: int = 0
    scorer: TinyGeneration | None = None

    def next_token(self) -> Sample:
        """The next scripted token with its logprob under the scripted distribution."""
        if self.position < len(self.tokens):
            token, p = self.tokens[self.position], self.probs[self.position]
        else:
            token, p = self.eos, self.probs[-1] if self.probs else 0.99
        self.position += 1
        if self.scorer is not None:
            return self.scorer.force(token)
        logprob = math.log(p)
        top: list[tuple[int, float]] = []
        if self.top_k:
            rest = math.log((1 - p) / (self.vocab_size - 1))
            others = (t for t in range(self.vocab_size) if t != token)
            top = [(token, logprob)] + [(next(others), rest) for _ in range(self.top_k - 1)]
        return Sample(token, logprob, top)


class ScriptedPolicy:
    """Serves scenario turns; see the module docstring for its distribution."""

    name = "scripted"

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        scenarios: ScenarioFile,
        seed: int = 0,
        split_rate: float = 0.08,
        scorer: TinyPolicy | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.scenarios = scenarios
        self.seed = seed
        self.split_rate = split_rate
        self.eos = tokenizer.eos_id
        self.scorer = scorer

    def text_for(self, request: GenerationRequest, rng: random.Random) -> str:
        """What the model says to this request."""
        if request.messages is not None:
            offered = offered_tools(request.tools)
            turn_index = count_assistant_turns(request.messages)
        else:  # a raw prompt: read the tools and turns from the rendered text
            prompt = self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
            offered = tools_in_prompt(prompt)
            turn_index = count_prompt_turns(prompt, "<|im_start|>assistant", "<tool_call>")
        if not offered:
            return self.scenarios.side_call_text
        scenario = self.scenarios.choose(request.session, self.seed)
        if turn_index >= len(scenario.turns):
            return scenario.final_text
        return turn_text(scenario.turns[turn_index], offered, rng)

    def start(self, request: GenerationRequest) -> ScriptedGeneration:
        """Tokenize the turn's text (with occasional split tokens) and its probabilities."""
        key = f"{self.seed}:{request.session}:{len(request.prompt_ids)}:{request.seed}"
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))
        tokens: list[int] = []
        for token in self.tokenizer.encode(self.text_for(request, rng)):
            split = self.tokenizer.split_token(token)
            if split is not None and rng.random() < self.split_rate:
                tokens += split
            else:
                tokens.append(token)
        tokens.append(self.eos)
        probs = [rng.uniform(0.55, 0.99) for _ in tokens]
        return ScriptedGeneration(
            tokens,
            probs,
            self.eos,
            self.tokenizer.vocab_size,
            request.top_logprobs,
            # At temperature 1 whatever the harness asked: the script ignores temperature, and a
            # trainer recomputing these logprobs then needs no per-call setting.
            scorer=self.scorer.start(replace(request, temperature=1.0)) if self.scorer else None,
        )
