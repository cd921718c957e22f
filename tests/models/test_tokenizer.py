"""The shipped tokenizer, its chat template, incremental decoding, non-canonical splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.dev.backend.build_tokenizer import SPECIAL_TOKENS, TAG_TOKENS
from rollstream.errors import ConfigurationError
from rollstream.models.tokenizer import ChatTokenizer, normalize_messages
from tests.dev.backend.conftest import SHELL_TOOL

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Create hello.txt"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command":"echo polar > hello.txt"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": ""},
    {"role": "tool", "tool_call_id": "c2", "content": "hello.txt"},
]


def test_vocabulary_and_special_tokens(tokenizer: ChatTokenizer) -> None:
    assert 3000 < tokenizer.vocab_size < 5000
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        assert len(tokenizer.encode(token)) == 1, token
    im_end = tokenizer.encode("<|im_end|>")[0]
    assert tokenizer.eos_id == im_end and im_end in tokenizer.stop_ids
    # Tool tags are ordinary text to the decoder (the parser must see them); ChatML is not.
    ids = tokenizer.encode("<tool_call>x</tool_call><|im_end|>")
    assert tokenizer.decode(ids) == "<tool_call>x</tool_call>"


def test_template_renders_tools_calls_from_parsed_json_and_grouped_results(
    tokenizer: ChatTokenizer,
) -> None:
    text = tokenizer.render(CONVERSATION, [SHELL_TOOL])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "bash"' in text and "<tools>" in text
    # Compact arguments from the request come back with the template's own spacing.
    assert '{"name": "bash", "arguments": {"command": "echo polar > hello.txt"}}' in text
    assert text.count("<|im_start|>user\n<tool_response>") == 1  # two results, one turn
    assert text.count("<tool_response>") == 2
    assert text.endswith("<|im_start|>assistant\n")
    assert not tokenizer.render(CONVERSATION[:2], None, add_generation_prompt=False).endswith(
        "assistant\n"
    )


def test_assistant_text_turn_round_trips(tokenizer: ChatTokenizer) -> None:
    base = [{"role": "user", "content": "hi"}]
    prompt = tokenizer.render(base)
    full = tokenizer.render([*base, {"role": "assistant", "content": "Hello."}], None, False)
    assert full == prompt + "Hello.<|im_end|>\n"


def test_normalize_keeps_unparseable_arguments_and_flattens_parts() -> None:
    [message] = normalize_messages(
        [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "tool_calls": [{"function": {"name": "f", "arguments": "{broken"}}],
            }
        ]
    )
    assert message["content"] == "ab"
    assert message["tool_calls"][0]["function"]["arguments"] == "{broken"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab é✓漢\n<>_{}\"'", max_size=40))
def test_incremental_decoding_equals_whole_decoding(tokenizer: ChatTokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    decoder = tokenizer.incremental_decoder()
    pieces = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == tokenizer.decode(ids) == text


def test_split_tokens_spell_the_same_text_but_retokenize_to_one(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode(" hello world polar")
    splits = [(t, tokenizer.split_token(t)) for t in ids]
    assert any(s is not None for _, s in splits)
    for token, split in splits:
        if split is not None:
            assert tokenizer.decode(list(split)) == tokenizer.decode([token])
            assert tokenizer.encode(tokenizer.decode(list(split))) == [token]
    assert tokenizer.split_token(tokenizer.eos_id) is None


def test_a_folder_without_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot load a tokenizer"):
        ChatTokenizer(tmp_path)


def test_another_template_renders_its_own_way(other_tokenizer: ChatTokenizer) -> None:
    text = other_tokenizer.render([{"role": "user", "content": "hi"}], None)
    assert text == "<|begin|><|header|>user<|/header|>hi<|eot|><|header|>assistant<|/header|>"
    assert other_tokenizer.vocab_size < 2000
