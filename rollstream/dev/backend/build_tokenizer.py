"""Build the reference backend's default tokenizer folder.

A byte-level BPE trained with ``tokenizers`` on generated text (English-like prose, Python and
shell, JSON tool calls, diffs), ChatML special tokens, the tool-call tags as added tokens, and a
chat template modelled on Qwen's. Saved as a Hugging Face tokenizer folder that
``AutoTokenizer.from_pretrained`` loads like any real model's.

    python -m rollstream.dev.backend.build_tokenizer OUT_DIR [--vocab-size 4096]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special: they stay in decoded text, where the tool parser looks for them.
TAG_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "not",
    "have",
    "file",
    "files",
    "test",
    "tests",
    "code",
    "function",
    "class",
    "method",
    "run",
    "running",
    "error",
    "errors",
    "fix",
    "fixed",
    "bug",
    "command",
    "output",
    "input",
    "value",
    "values",
    "list",
    "dict",
    "string",
    "number",
    "return",
    "returns",
    "import",
    "module",
    "package",
    "install",
    "build",
    "make",
    "check",
    "checks",
    "result",
    "results",
    "failed",
    "passed",
    "done",
    "task",
    "tasks",
    "directory",
    "path",
    "read",
    "write",
    "line",
    "lines",
    "change",
    "changes",
    "diff",
    "patch",
    "commit",
    "repo",
    "branch",
    "user",
    "assistant",
    "system",
    "tool",
    "tools",
    "call",
    "calls",
    "response",
    "shell",
    "bash",
    "python",
    "script",
    "data",
    "model",
    "let",
    "me",
    "look",
    "first",
    "now",
    "then",
    "will",
    "need",
    "should",
    "can",
    "could",
    "update",
    "create",
    "delete",
    "add",
    "remove",
    "print",
    "echo",
    "cat",
    "grep",
    "sed",
    "ls",
    "cd",
    "mkdir",
    "touch",
    "pytest",
    "pip",
    "git",
    "status",
    "hello",
    "world",
    "polar",
    "because",
    "when",
    "if",
    "else",
    "while",
    "for",
    "each",
    "all",
    "some",
    "any",
    "new",
    "old",
    "same",
    "other",
    "next",
    "last",
]
_IDENTS = [
    "x",
    "y",
    "i",
    "n",
    "df",
    "path",
    "name",
    "data",
    "result",
    "items",
    "cfg",
    "args",
    "kwargs",
    "self",
    "value",
    "key",
    "idx",
]
_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "ch",
    "cl",
    "cr",
    "dr",
    "fl",
    "gr",
    "pl",
    "pr",
    "sh",
    "st",
    "str",
    "th",
    "tr",
]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "oo", "ou"]
_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "rt", "st", "ck", "sh"]


def _lexicon(rng: random.Random, size: int = 6000) -> list[str]:
    """Pseudo-words: enough distinct material for a vocabulary of a few thousand merges."""
    words = set(_WORDS)
    while len(words) < size:
        syllables = rng.choice([1, 2, 2, 3, 3, 4])
        words.add(
            "".join(
                rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
                for _ in range(syllables)
            )
        )
    return sorted(words)


def _prose(rng: random.Random) -> str:
    lexicon = _LEXICON
    # Zipf-like: frequent words often, the long tail now and then.
    words = [
        lexicon[min(int(rng.paretovariate(0.7)) - 1, len(lexicon) - 1)]
        for _ in range(rng.randint(5, 25))
    ]
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", ".", "?", ":"])


def _python(rng: random.Random) -> str:
    name, arg = rng.choice(_IDENTS), rng.choice(_IDENTS)
    body = rng.choice(
        [
            f"    return {arg} + {rng.randint(0, 99)}",
            f"    for {arg} in range({rng.randint(1, 50)}):\n        print({arg})",
            f"    if {arg} is None:\n        raise ValueError('{rng.choice(_WORDS)}')",
            f"    with open({arg}) as fh:\n        return fh.read()",
        ]
    )
    return f"def {name}_{rng.choice(_WORDS)}({arg}):\n{body}\n"


def _shell(rng: random.Random) -> str:
    return rng.choice(
        [
            f"echo {rng.choice(_WORDS)} > {rng.choice(_WORDS)}.txt",
            f"cat {rng.choice(_WORDS)}.py",
            f"ls -la {rng.choice(_WORDS)}/",
            f"python -m pytest -q tests/test_{rng.choice(_WORDS)}.py",
            f"grep -rn '{rng.choice(_WORDS)}' .",
            "git diff --stat && git status",
            f"sed -i 's/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}/' main.py",
        ]
    )


def _tool_call(rng: random.Random) -> str:
    name = rng.choice(["Bash", "exec_command", "run_shell_command", "bash", "read_file"])
    key = {"exec_command": "cmd"}.get(name, "command")
    sep = rng.choice([(", ", ": "), (",", ":")])
    args = json.dumps({key: _shell(rng)}, separators=sep)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def _diff(rng: random.Random) -> str:
    f = f"{rng.choice(_WORDS)}.py"
    return (
        f"--- a/{f}\n+++ b/{f}\n@@ -1,3 +1,3 @@\n-{_python(rng).splitlines()[0]}\n"
        f"+{_python(rng).splitlines()[0]}\n"
    )


_LEXICON = _lexicon(random.Random(1234))


def corpus(lines: int = 60_000, seed: int = 0) -> Iterator[str]:
    """Deterministic training text resembling agent traffic."""
    rng = random.Random(seed)
    makers = [_prose, _prose, _python, _shell, _tool_call, _diff]
    for _ in range(lines):
        yield rng.choice(makers)(rng)


def default_template() -> str:
    """The Qwen-style chat template shipped beside this module."""
    return resources.files("rollstream.dev.backend").joinpath("chat_template.jinja").read_text()


def build(out_dir: Path, vocab_size: int = 4096, template: str | None = None) -> Path:
    """Train the BPE, wrap it as a transformers tokenizer with a template, save it to out_dir."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=template or default_template(),
        model_max_length=32768,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(str(out_dir))
    return out_dir


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--vocab-size", type=int, default=4096)
    args = parser.parse_args()
    print(build(args.out_dir, args.vocab_size))


if __name__ == "__main__":
    main()
