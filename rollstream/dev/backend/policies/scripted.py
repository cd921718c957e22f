"""The scripted policy: answers from scenarios, with token ids and logprobs like a sampler's.

Its distribution, which the logprobs report: at each step the scripted token has probability
``p``, drawn uniformly from [0.55, 0.99] per token (seeded by session and turn), and the
remaining ``1 - p`` is spread evenly over the rest of the vocabulary. ``temperature`` is
ignored. The ids are the script's turn as the served model writes it, except that some tokens
(``split_rate``) are emitted as two smaller tokens spelling the same bytes, as sampling sometimes
does; re-tokenizing the text then gives different ids. Special tokens are never split.

With a renderer family (``--family qwen3``...) a turn is an assistant message (text, tool calls,
and a short reasoning for a family that thinks) written by ``Family.completion_ids``, so the
tokens are in the family's native format (its reasoning tags, its tool-call syntax). The generic
family keeps the script's text with Hermes ``<tool_call>`` blocks, as the shipped template reads.

With a ``scorer`` (the tiny policy; ``--scripted-logprobs tiny``) the tokens are still the
script's, but each one's logprob (and the top alternatives) is the tiny model's at that point,
teacher-forced. Harnesses still complete their tasks, and a trainer that updates the tiny
model's weights (the example trainer) sees logprobs it can recompute exactly, which change
with every weight update.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import random
from dataclasses import dataclass, replace
from typing import Any

from rollstream.dev.backend.policies.base import GenerationRequest, PolicyError, Sample
from rollstream.dev.backend.policies.scenarios import (
    ScenarioFile,
    Turn,
    asks_for_summary,
    count_assistant_turns,
    count_prompt_turns,
    count_text_turns,
    offered_tools,
    scenario_named,
    scripted_tools,
    summary_of,
    tools_in_prompt,
    turn_calls,
    turn_text,
    turns_mentioned,
)
from rollstream.dev.backend.policies.tiny import TinyGeneration, TinyPolicy
from rollstream.dev.backend.prompt_reader import PromptReader
from rollstream.models.family import Family, Message
from rollstream.models.template_family import TemplateFamily
from rollstream.models.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

#: The conversation a raw prompt's answer is written after: only the sampled part is used.
_RAW_HISTORY: list[Message] = [{"role": "user", "content": "Continue."}]


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
        family: Family | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.scenarios = scenarios
        self.seed = seed
        self.split_rate = split_rate
        self.scorer = scorer
        # The generic family keeps the text path: Hermes blocks, as the shipped template reads.
        self.family = None if isinstance(family, TemplateFamily) else family
        self.eos = tokenizer.eos_id if self.family is None else self.family.end_of_turn_id
        self._reader: PromptReader | None = None
        self._warned = False

    def text_for(self, request: GenerationRequest, rng: random.Random) -> str:
        """What the model says to this request."""
        prompt = ""
        if request.messages is not None:
            offered = offered_tools(request.tools)
            turn_index = count_assistant_turns(request.messages)
        else:  # a raw prompt: read the tools and turns from the rendered text
            prompt = self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
            offered = tools_in_prompt(prompt)
            turn_index = count_prompt_turns(prompt, "<|im_start|>assistant", "<tool_call>")
        summary = self._summary(request)
        if summary is not None:
            return summary
        if not offered:
            untooled = self._text_turn(request)
            return self.scenarios.side_call_text if untooled is None else untooled.text or ""
        scenario = self.scenarios.choose(
            request.session, self.seed, scenario_named(request.messages, prompt)
        )
        if turn_index >= len(scenario.turns):
            return scenario.final_text
        return turn_text(scenario.turns[turn_index], offered, rng)

    def _text_turn(self, request: GenerationRequest) -> Turn | None:
        """The turn of a text scenario answering a request without tools; None: a side call."""
        if request.messages is None:
            return None
        try:
            scenario = self.scenarios.choose(
                request.session, self.seed, scenario_named(request.messages)
            )
        except PolicyError:  # a key naming no scenario: its side calls still get their answer
            return None
        if scenario.protocol != "text":
            return None
        index = count_text_turns(request.messages, scenario)
        return (
            scenario.turns[index] if index < len(scenario.turns) else Turn(text=scenario.final_text)
        )

    def _summary(self, request: GenerationRequest) -> str | None:
        """The summary of a scenario's thread where the request asks for one (compaction).

        Tools or not: Claude Code offers its tools to the call that asks for the summary.
        """
        messages = request.messages
        if messages is None or not asks_for_summary(messages):
            return None
        named = scenario_named(messages)
        if named is None:
            return None
        try:
            scenario = self.scenarios.by_name(named)
        except PolicyError:  # a task naming no scenario of ours: a side call as any other
            return None
        return summary_of(
            named, count_assistant_turns(messages) or turns_mentioned(scenario, messages)
        )

    def _position(self, request: GenerationRequest) -> tuple[list[str], int]:
        """The tools the request offers and the index of the scenario turn it asks for."""
        if request.messages is not None:
            return offered_tools(request.tools), count_assistant_turns(request.messages)
        # A raw prompt: the family's own rendering says which tools and how many turns.
        assert self.family is not None
        if self._reader is None:
            self._reader = PromptReader(self.family, scripted_tools(self.scenarios))
        return self._reader.offered(request.prompt_ids), self._reader.turn_index(request.prompt_ids)

    def answer_for(self, request: GenerationRequest, rng: random.Random) -> Message:
        """The assistant message the model writes for this request (a renderer family's path)."""
        assert self.family is not None
        offered, turn_index = self._position(request)
        turn: Turn | None = None
        summary = self._summary(request)
        if summary is not None:
            text = summary
        elif not offered:
            turn = self._text_turn(request)
            text = self.scenarios.side_call_text if turn is None else turn.text or ""
        else:
            prompt = (
                self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
                if request.messages is None
                else ""
            )
            named = scenario_named(request.messages, prompt)
            scenario = self.scenarios.choose(request.session, self.seed, named)
            if turn_index < len(scenario.turns):
                turn = scenario.turns[turn_index]
            text = scenario.final_text if turn is None else turn.text or ""
        calls = turn_calls(turn, offered, rng) if turn is not None else []
        answer: Message = {"role": "assistant", "content": text}
        if calls:
            # Ids unique in the conversation, as models number their calls (Kimi's ids are
            # functions.NAME:N with N counting every call so far): a harness that sees an id
            # again takes the call for answered and asks once more, for ever.
            before = _calls_before(request)
            answer["tool_calls"] = [
                {
                    "id": self.family.call_id(name, before + index),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for index, (name, arguments) in enumerate(calls)
            ]
        if self.family.thinks:
            answer["reasoning_content"] = reasoning_for(turn, bool(offered) or turn is not None)
        return answer

    def _family_tokens(self, request: GenerationRequest, rng: random.Random) -> list[int]:
        """The answer's ids as the family writes them, end-of-turn included, with split tokens."""
        assert self.family is not None
        answer = self.answer_for(request, rng)
        history = request.messages if request.messages is not None else _RAW_HISTORY
        try:
            ids = self.family.completion_ids(history, answer, request.tools)
        except Exception as exc:  # e.g. Llama 3 writes one call per turn: a parallel scenario
            name = self.family.name
            raise PolicyError(f"the {name} family cannot write this turn: {exc}") from exc
        self._check(request, answer, ids)
        tokens: list[int] = []
        for token in ids:
            split = None if token in self._unsplittable else self.tokenizer.split_token(token)
            if split is not None and rng.random() < self.split_rate:
                tokens += split
            else:
                tokens.append(token)
        return tokens

    def _check(self, request: GenerationRequest, answer: Message, ids: list[int]) -> None:
        """Warn (once) when the family's parser reads the written turn back differently.

        The harness would then get another answer than the script's; a family's renderer and
        parser disagreeing is worth a line in the log, not a failed request.
        """
        assert self.family is not None
        if self._warned:
            return
        parsed = self.family.parse(ids, request.prompt_ids, request.tools)
        want = (answer.get("content") or "").strip(), len(answer.get("tool_calls", []))
        got = (parsed.content or "").strip(), len(parsed.tool_calls)
        if got != want:
            self._warned = True
            log.warning(
                "the %s family's parser reads the scripted turn back as %r, not %r",
                self.family.name,
                got,
                want,
            )

    @functools.cached_property
    def _unsplittable(self) -> frozenset[int]:
        """Special and added tokens (a family's markers) and stop tokens: sampled whole."""
        added: Any = getattr(self.tokenizer.hf, "added_tokens_decoder", {})
        stops = self.family.stop_ids if self.family is not None else frozenset()
        return self.tokenizer.special_ids | frozenset(int(t) for t in added) | stops

    def start(self, request: GenerationRequest) -> ScriptedGeneration:
        """The turn's tokens (with occasional split tokens) and their probabilities."""
        key = f"{self.seed}:{request.session}:{len(request.prompt_ids)}:{request.seed}"
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))
        tokens: list[int] = []
        if self.family is not None:
            tokens = self._family_tokens(request, rng)
        else:
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


def _calls_before(request: GenerationRequest) -> int:
    """How many tool calls the conversation holds already.

    A raw prompt has no messages to count: its length, a number that only grows, stands in.
    """
    if request.messages is None:
        return len(request.prompt_ids)
    return sum(len(m.get("tool_calls") or []) for m in request.messages if isinstance(m, dict))


def reasoning_for(turn: Turn | None, offered: bool) -> str:
    """A short reasoning for a family that thinks before it answers (the engine's plan too)."""
    if not offered:
        return "This is a side request; I will answer it directly."
    if turn is None:
        return "The commands have run; I will report the result."
    if turn.calls:
        commands = [str(call.arguments.get("command", call.tool)) for call in turn.calls]
        return (
            "The task asks for work in the workspace; I will run " + ", then ".join(commands) + "."
        )
    return "The task is settled; I will answer."
