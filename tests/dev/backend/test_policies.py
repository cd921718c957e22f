"""The scripted and tiny policies, and the generation loop's stop rules."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rollstream.dev.backend.engine import Latency, Outcome, generate
from rollstream.dev.backend.policies.base import GenerationRequest, Policy
from rollstream.dev.backend.policies.scenarios import load_scenarios
from rollstream.dev.backend.policies.scripted import ScriptedPolicy
from rollstream.dev.backend.policies.tiny import TinyPolicy
from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.backend.conftest import SHELL_TOOL


def _request(tokenizer: ChatTokenizer, **kwargs: object) -> GenerationRequest:
    messages = kwargs.pop("messages", [{"role": "user", "content": "go"}])
    tools = kwargs.pop("tools", [SHELL_TOOL])
    prompt = tokenizer.encode(tokenizer.render(messages, tools))  # type: ignore[arg-type]
    return GenerationRequest(
        prompt_ids=prompt,
        max_tokens=int(kwargs.pop("max_tokens", 200)),  # type: ignore[call-overload]
        messages=messages,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def _run(
    tokenizer: ChatTokenizer,
    policy: Policy,
    request: GenerationRequest,
    stop: tuple[str, ...] = (),
) -> tuple[Outcome, list[str]]:
    outcome = Outcome()
    generation = policy.start(request)
    steps = generate(tokenizer, generation, request, Latency(), list(stop), outcome)
    return outcome, [step.text async for step in steps]


async def test_scripted_answer_is_the_scenario_turn(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    outcome, texts = await _run(tokenizer, policy, _request(tokenizer, session="s@solve"))
    assert outcome.finish_reason == "stop"
    assert outcome.token_ids[-1] == tokenizer.eos_id  # the end-of-turn token is sampled too
    assert "".join(texts) == outcome.text == tokenizer.decode(outcome.token_ids)
    assert outcome.text.startswith("Let me look.\n<tool_call>\n")
    assert "echo polar > hello.txt" in outcome.text


async def test_scripted_turn_follows_the_conversation(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    call = {"id": "1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "x", "tool_calls": [call]},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "y", "tool_calls": [call]},
        {"role": "tool", "content": "ok"},
    ]
    outcome, _ = await _run(
        tokenizer, policy, _request(tokenizer, messages=messages, session="s@solve")
    )
    assert outcome.text == "Done."
    more = [*messages, {"role": "assistant", "content": "z", "tool_calls": [call]}]
    outcome, _ = await _run(
        tokenizer, policy, _request(tokenizer, messages=more, session="s@solve")
    )
    assert outcome.text == "Done."  # the scenario's final text after its last turn
    answered = [
        *messages,
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "again"},
    ]
    outcome, _ = await _run(
        tokenizer, policy, _request(tokenizer, messages=answered, session="s@solve")
    )
    assert outcome.text.startswith("Let me look.")  # a new request starts the scenario over
    side, _ = await _run(tokenizer, policy, _request(tokenizer, tools=None, session="s@solve"))
    assert side.text == "Side answer."


async def test_a_text_scenario_answers_requests_without_tools_turn_by_turn(
    tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    """A harness that offers no tools (aider) plays a text scenario; other side calls do not."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "scenarios:\n"
        "  - {name: solve, turns: [{text: Done.}]}\n"
        "  - {name: edit, weight: 0, protocol: text, final_text: Over.,\n"
        "     turns: [{text: first edit}, {text: second edit}]}\n"
        "side_call_text: Side answer.\n"
    )
    policy = ScriptedPolicy(tokenizer, load_scenarios(path))
    # Few-shot pairs before the task: not the scenario's turns.
    examples = [
        {"role": "system", "content": "Answer with edits."},
        {"role": "user", "content": "an example"},
        {"role": "assistant", "content": "an example edit"},
    ]
    task = {"role": "user", "content": "[scenario: edit] Write polar."}
    said = []
    messages = [*examples, task]
    for _ in range(3):
        outcome, _ = await _run(
            tokenizer, policy, _request(tokenizer, messages=messages, tools=None)
        )
        said.append(outcome.text)
        messages += [  # aider's layout: its answer, the files it adds and its own "Ok."
            {"role": "assistant", "content": outcome.text},
            {"role": "user", "content": "I added hello.txt."},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": "The test failed."},
        ]
    assert said == ["first edit", "second edit", "Over."]
    # A side call of a tool-calling session still gets the side answer, and so does one whose
    # key names no scenario (a tool call of that session is refused, as before).
    for key in ("s@solve", "someone@example.com"):
        side, _ = await _run(tokenizer, policy, _request(tokenizer, tools=None, session=key))
        assert side.text == "Side answer."


async def test_a_summary_asked_for_names_the_thread_and_the_thread_goes_on_from_it(
    tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    """A harness compacting its context asks for a summary without tools, then replaces the
    history with it: the thread goes on at its next turn, not from its first again."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "scenarios:\n"
        "  - {name: long, final_text: Finished., turns: [\n"
        "      {tool_call: {tool: shell, arguments: {command: seq 1 3000}}},\n"
        "      {tool_call: {tool: shell, arguments: {command: echo polar > hello.txt}}}]}\n"
        "side_call_text: Side answer.\n"
    )
    policy = ScriptedPolicy(tokenizer, load_scenarios(path))
    task = {"role": "user", "content": "[scenario: long] Write polar."}
    seq = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    history = [task, {"role": "assistant", "content": "", "tool_calls": [seq]}]
    history.append({"role": "tool", "tool_call_id": "c1", "content": "1\n2\n3"})
    instruction = {"role": "user", "content": "Create a summary of the conversation so far."}
    # Claude Code's layout: the history as messages, then the request.
    summary, _ = await _run(
        tokenizer, policy, _request(tokenizer, messages=[*history, instruction], tools=None)
    )
    assert summary.text.startswith("[summary: scenario long, 1 turns done]")
    # opencode's: a summarization agent reading the history written out as text.
    flattened = [
        {"role": "system", "content": "You are a context summarization agent."},
        {"role": "user", "content": "[User]: [scenario: long] ...\n[tool call]: seq 1 3000"},
    ]
    written, _ = await _run(tokenizer, policy, _request(tokenizer, messages=flattened, tools=None))
    assert written.text == summary.text
    # The history replaced by the summary: the next turn is the second, then the answer.
    resumed = [
        {"role": "user", "content": "What did we do so far?"},
        {"role": "assistant", "content": summary.text},
        {"role": "user", "content": "Continue."},
    ]
    second, _ = await _run(tokenizer, policy, _request(tokenizer, messages=resumed))
    assert "echo polar > hello.txt" in second.text
    # A title generator's rules mention the message it is summarizing: still a side call.
    rules = "Use the same language as the user message you are summarizing."
    title = {"role": "system", "content": f"You are a title generator. {rules}"}
    side, _ = await _run(tokenizer, policy, _request(tokenizer, messages=[title, task], tools=None))
    assert side.text == "Side answer."
    # A summary asked for in a thread whose task names no scenario of the file: a side call.
    stranger = {"role": "user", "content": "[scenario: elsewhere] Write polar."}
    other, _ = await _run(
        tokenizer, policy, _request(tokenizer, messages=[stranger, instruction], tools=None)
    )
    assert other.text == "Side answer."


async def test_scripted_ids_sometimes_differ_from_retokenizing(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file), split_rate=0.3)
    differing = 0
    for i in range(10):
        outcome, _ = await _run(tokenizer, policy, _request(tokenizer, session=f"s{i}@solve"))
        sampled = outcome.token_ids[:-1]
        assert tokenizer.decode(sampled) == outcome.text
        differing += tokenizer.encode(outcome.text) != sampled
    assert differing >= 5


async def test_scripted_logprobs_are_its_distribution(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    generation = policy.start(_request(tokenizer, session="s@solve", top_logprobs=3))
    for _ in range(20):
        sample = generation.next_token()
        assert math.log(0.55) <= sample.logprob <= math.log(0.99)
        assert sample.top[0] == (sample.token_id, sample.logprob)
        assert len(sample.top) == 3 and len({t for t, _ in sample.top}) == 3
        # The rest of the mass is spread evenly: it sums to one.
        rest = (1 - math.exp(sample.logprob)) / (tokenizer.vocab_size - 1)
        assert sample.top[1][1] == pytest.approx(math.log(rest))


async def test_scripted_unknown_tool_is_a_policy_error(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    from rollstream.dev.backend.policies.base import PolicyError

    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    with pytest.raises(PolicyError, match="str_replace_editor"):
        policy.start(_request(tokenizer, session="s@needs-editor"))


def test_tiny_logprobs_come_from_the_distribution_it_samples(tokenizer: ChatTokenizer) -> None:
    policy = TinyPolicy(tokenizer, seed=1)
    generation = policy.start(_request(tokenizer, seed=5, temperature=0.8, top_logprobs=5))
    for _ in range(10):
        probs = generation.distribution()
        assert probs.sum() == pytest.approx(1.0)
        sample = generation.next_token()
        assert sample.logprob == pytest.approx(math.log(probs[sample.token_id]))
        assert [t for t, _ in sample.top] == list(np.argsort(-probs)[:5])


def test_tiny_is_deterministic_with_a_seed_and_greedy_at_zero(tokenizer: ChatTokenizer) -> None:
    policy = TinyPolicy(tokenizer, seed=1)

    def run(**kw: object) -> list[int]:
        generation = policy.start(_request(tokenizer, **kw))
        return [generation.next_token().token_id for _ in range(20)]

    assert run(seed=3) == run(seed=3)
    assert run(seed=3) != run(seed=4)
    greedy = policy.start(_request(tokenizer, temperature=0.0))
    probs = greedy.distribution()
    assert greedy.next_token().token_id == int(probs.argmax())


async def test_tiny_generations_end_with_end_of_turn(tokenizer: ChatTokenizer) -> None:
    policy = TinyPolicy(tokenizer, seed=2)
    reasons = []
    for seed in range(20):
        outcome, _ = await _run(tokenizer, policy, _request(tokenizer, seed=seed, max_tokens=300))
        reasons.append(outcome.finish_reason)
    assert "stop" in reasons


async def test_max_tokens_ends_with_length(tokenizer: ChatTokenizer, scenario_file: Path) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    outcome, texts = await _run(
        tokenizer, policy, _request(tokenizer, session="s@solve", max_tokens=3)
    )
    assert outcome.finish_reason == "length" and len(outcome.token_ids) == 3
    assert "".join(texts) == outcome.text == tokenizer.decode(outcome.token_ids)


@pytest.mark.parametrize(("stop", "expected"), [(["look"], "Let me "), (["e l", "me"], "Let ")])
async def test_stop_strings_cut_the_text_not_the_ids(
    tokenizer: ChatTokenizer, scenario_file: Path, stop: list[str], expected: str
) -> None:
    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file), split_rate=0.0)
    outcome, texts = await _run(
        tokenizer, policy, _request(tokenizer, session="s@solve"), tuple(stop)
    )
    assert outcome.finish_reason == "stop" and outcome.stop_reason in stop
    assert "".join(texts) == outcome.text == expected  # nothing past the stop was ever sent
    assert tokenizer.decode(outcome.token_ids).startswith(expected)


async def test_latency_model_paces_the_stream(
    tokenizer: ChatTokenizer, scenario_file: Path
) -> None:
    import time

    policy = ScriptedPolicy(tokenizer, load_scenarios(scenario_file))
    request = _request(tokenizer, session="s@solve", max_tokens=5)
    began = time.monotonic()
    outcome = Outcome()
    stamps = []
    async for _ in generate(
        tokenizer, policy.start(request), request, Latency(30, 0, 10), [], outcome
    ):
        stamps.append(time.monotonic() - began)
    assert stamps[0] >= 0.03
    assert stamps[-1] >= 0.03 + 4 * 0.01


def test_two_level_sampling_is_inverse_cdf_sampling() -> None:
    from rollstream.dev.backend.policies.tiny import _sample

    rng = np.random.default_rng(0)
    for n in (5, 64, 65, 4102):
        probs = rng.random(n).astype(np.float32)
        probs[rng.integers(0, n, size=n // 4)] = 0  # zero-probability tokens are never drawn
        probs /= probs.sum()
        cdf = np.cumsum(probs, dtype=np.float64)
        for u in rng.random(300):
            expected = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
            got = _sample(probs, float(u))
            assert probs[got] > 0
            # Equal, or a neighbour when u falls within float rounding of a boundary.
            assert got == expected or abs(cdf[min(got, expected)] - u * cdf[-1]) < 1e-6


def test_hf_policy_needs_torch(tokenizer: ChatTokenizer, tmp_path: Path) -> None:
    from rollstream.dev.backend.policies.hf import HFPolicy
    from rollstream.errors import ConfigurationError

    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigurationError, match="needs torch"):
            HFPolicy(tmp_path, tokenizer)
    else:  # pragma: no cover - torch is not installed on the CI machine
        pytest.skip("torch is installed: the hf policy is exercised with a real model elsewhere")
