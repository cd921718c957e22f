"""Gemini generateContent -> Chat Completions: paths, the adapter, the conversation."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.adapters import ADAPTER_BY_KIND, adapter_for, count_tokens_adapter
from rollstream.apis.chat import CaptureOptions, prepare_chat_request
from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini import (
    GeminiPath,
    gemini_count_tokens_path,
    gemini_harness_request,
    gemini_path,
    gemini_to_chat,
)
from rollstream.interceptor.sessions import session_of
from rollstream.schemas import ApiKind
from tests.apis.gemini_samples import (
    FUNCTIONS,
    UPSTREAM,
    call,
    chat,
    messages,
    model,
    result,
    text,
    tool_call,
    user,
)
from tests.apis.strategies import json_values_of, names

JSON = dict[str, Any]
FIXTURE = Path(__file__).parent / "data" / "gemini_cli_requests.json"


# --- paths and the adapter ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/v1beta/models/gemini-2.5-pro:generateContent",
            GeminiPath("gemini-2.5-pro", "generateContent", False),
        ),
        (
            "/v1beta/models/scripted-model:streamGenerateContent?alt=sse",
            GeminiPath("scripted-model", "streamGenerateContent", True),
        ),
        (
            "/v1/models/m:streamGenerateContent?x=1&alt=sse",
            GeminiPath("m", "streamGenerateContent", True),
        ),
        ("/models/m:generateContent", GeminiPath("m", "generateContent", False)),
        (
            "/v1beta/models/Qwen/Qwen3-8B:generateContent",
            GeminiPath("Qwen/Qwen3-8B", "generateContent", False),
        ),
        ("/v1beta/models/a%2Fb:countTokens", GeminiPath("a/b", "countTokens", False)),
    ],
)
def test_gemini_paths(path: str, expected: GeminiPath) -> None:
    assert gemini_path(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models",
        "/v1beta/models/gemini-2.5-pro",
        "/v1beta/models/m:embedContent",
        "/v2/models/m:generateContent",
        "/v1beta/models/m:generateContent/extra",
        "/v1beta/tunedModels/m:generateContent",
    ],
)
def test_other_paths_are_not_gemini_calls(path: str) -> None:
    assert gemini_path(path) is None
    assert adapter_for(path) is None


def test_the_adapter_knows_the_model_and_whether_the_call_streams() -> None:
    adapter = adapter_for("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert adapter is not None and adapter.kind is ApiKind.GEMINI
    assert adapter.gemini is not None and adapter.gemini.model == "gemini-2.5-flash"
    body = {"contents": [user(text("hi"))]}
    upstream, _ = prepare_chat_request(adapter.to_chat(body, UPSTREAM), CaptureOptions())
    # The addon reads the stream flag off this request.
    assert upstream["stream"] is True and upstream["stream_options"] == {"include_usage": True}
    whole = adapter_for("/v1beta/models/gemini-2.5-flash:generateContent")
    assert whole is not None and whole.kind is ApiKind.GEMINI
    assert "stream" not in whole.to_chat(body, UPSTREAM)


def test_streaming_without_sse_is_refused() -> None:
    adapter = adapter_for("/v1beta/models/m:streamGenerateContent")
    assert adapter is not None
    with pytest.raises(TranslationError, match="alt=sse"):
        adapter.to_chat({"contents": []}, UPSTREAM)


def test_the_harness_request_gains_the_path_model_and_the_body_is_kept() -> None:
    body: JSON = {"contents": [user(text("hi"))]}
    adapter = adapter_for("/v1beta/models/gemini-2.5-pro:generateContent")
    assert adapter is not None
    assert adapter.harness_request(body) == {**body, "model": "gemini-2.5-pro"}
    assert body == {"contents": [user(text("hi"))]}
    assert gemini_harness_request(body, "m")["model"] == "m"
    kind_adapter = ADAPTER_BY_KIND[ApiKind.GEMINI]  # what the response hooks use
    assert kind_adapter.gemini is None and kind_adapter.harness_request(body) is body


def test_count_tokens_is_not_an_llm_call() -> None:
    path = "/v1beta/models/gemini-2.5-pro:countTokens"
    assert gemini_count_tokens_path(path) and adapter_for(path) is None
    assert not gemini_count_tokens_path("/v1beta/models/gemini-2.5-pro:generateContent")


def test_the_count_tokens_adapter_of_each_api() -> None:
    gemini = count_tokens_adapter("/v1beta/models/gemini-2.5-pro:countTokens")
    assert gemini is not None and gemini.kind is ApiKind.GEMINI
    body = gemini.harness_request({"contents": [user(text("hi"))]})
    assert body["model"] == "gemini-2.5-pro"
    assert gemini.count_tokens_request(body, UPSTREAM) == {
        "model": UPSTREAM,
        "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": True,
    }
    assert ADAPTER_BY_KIND[ApiKind.GEMINI].count_tokens_answer(7) == {"totalTokens": 7}
    anthropic = count_tokens_adapter("/v1/messages/count_tokens?beta=true")
    assert anthropic is not None and anthropic.kind is ApiKind.ANTHROPIC_MESSAGES
    messages_body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    assert anthropic.count_tokens_request(messages_body, UPSTREAM)["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert anthropic.count_tokens_answer(7) == {"input_tokens": 7}
    for path in ("/v1beta/models/m:generateContent", "/v1/messages", "/v1/chat/completions"):
        assert count_tokens_adapter(path) is None
    with pytest.raises(TranslationError):
        ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS].count_tokens_request(messages_body, UPSTREAM)


# --- requests -----------------------------------------------------------------------------


def test_system_instruction_and_sampling() -> None:
    out = chat(
        [user(text("hi"))],
        systemInstruction={"role": "user", "parts": [text("You are terse."), text("Be kind.")]},
        generationConfig={
            "temperature": 0.2,
            "topP": 0.9,
            "topK": 40,
            "maxOutputTokens": 256,
            "stopSequences": ["END"],
            "seed": 7,
            "presencePenalty": 0.1,
            "frequencyPenalty": 0.3,
            "candidateCount": 1,
            "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024},
            "responseLogprobs": True,
        },
        safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        labels={"team": "secret-label"},
    )
    assert out == {
        "model": UPSTREAM,
        "messages": [
            {"role": "system", "content": "You are terse.\nBe kind."},
            {"role": "user", "content": "hi"},
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "max_tokens": 256,
        "stop": ["END"],
        "seed": 7,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.3,
    }


def test_system_instruction_as_a_string() -> None:
    assert messages([user(text("hi"))], systemInstruction="Be terse.")[0] == {
        "role": "system",
        "content": "Be terse.",
    }


def test_user_parts_joined_by_newlines_model_parts_by_nothing() -> None:
    out = messages(
        [
            user(text("<session_context>...</session_context>"), text("Create hello.txt")),
            model(text("Sure"), text(", done.")),
            {"parts": [text("thanks")]},  # no role: a user turn
        ]
    )
    assert out == [
        {"role": "user", "content": "<session_context>...</session_context>\nCreate hello.txt"},
        {"role": "assistant", "content": "Sure, done."},
        {"role": "user", "content": "thanks"},
    ]


def test_thoughts_become_reasoning_and_signatures_are_dropped() -> None:
    out = messages(
        [
            user(text("hi"), text("hidden", thought=True)),
            model(
                text("Let me ", thought=True),
                text("think.", thought=True),
                {"thoughtSignature": "c2ln"},
                text("Hello", thoughtSignature="c2ln"),
            ),
        ]
    )
    assert out == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Hello",
            "reasoning_content": "Let me think.",
            "reasoning": "Let me think.",
        },
    ]


def test_calls_and_results_with_ids() -> None:
    out = messages(
        [
            user(text("read both")),
            model(
                text("Reading."),
                call("read", {"path": "a.py"}, "c1"),
                call("read", {"path": "b.py"}, "c2"),
            ),
            user(
                result("read", {"output": "B"}, "c2"),
                result("read", {"output": "A"}, "c1"),
                text("and then?"),
            ),
        ]
    )
    assert out[1] == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            tool_call("c1", "read", {"path": "a.py"}),
            tool_call("c2", "read", {"path": "b.py"}),
        ],
    }
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "user", "content": "and then?"},
    ]


def test_calls_without_ids_get_ids_from_their_place_and_results_match_by_name() -> None:
    history = [
        user(text("go")),
        model(call("grep", {"p": "x"}), call("read", {"path": "a"}), call("grep", {"p": "y"})),
        user(
            result("read", {"output": "A"}),
            result("grep", {"output": "X"}),
            result("grep", {"output": "Y"}),
        ),
    ]
    out = messages(history)
    assert [c["id"] for c in out[1]["tool_calls"]] == ["call_1_0", "call_1_1", "call_1_2"]
    assert [(m["tool_call_id"], m["content"]) for m in out[2:]] == [
        ("call_1_1", "A"),
        ("call_1_0", "X"),  # the earliest unanswered grep
        ("call_1_2", "Y"),
    ]
    # The next turn renders the same history identically: prompts keep their prefix.
    longer = messages([*history, model(text("Done."))])
    assert longer[: len(out)] == out


def test_a_result_with_an_id_its_call_lacked_matches_by_name() -> None:
    # Gemini CLI names calls that came without an id ("NAME_<ms>_<n>") in its results.
    history = [user(text("go")), model(call("read", {})), user(result("read", {}, "read_17_0"))]
    out = messages(history)
    assert out[1]["tool_calls"][0]["id"] == "call_1_0"
    assert out[2]["tool_call_id"] == "call_1_0"


def test_a_result_answering_no_call_gets_an_id_from_its_place() -> None:
    out = messages([user(text("go")), model(text("hm")), user(result("read", {"output": "A"}))])
    assert out[2] == {"role": "tool", "tool_call_id": "call_2_0", "content": "A"}


def test_results_match_only_calls_of_the_preceding_model_turn() -> None:
    out = messages(
        [
            user(text("go")),
            model(call("read", {})),
            user(result("read", {"output": "1"})),
            model(call("read", {})),
            user(result("read", {"output": "2"})),
        ]
    )
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["call_1_0", "call_3_0"]


@pytest.mark.parametrize(
    ("response", "content"),
    [
        ({"output": "plain"}, "plain"),
        ({"error": "no such file"}, '{"error": "no such file"}'),
        ({"output": "ü", "exit": 1}, '{"output": "ü", "exit": 1}'),
        ({"output": 3}, '{"output": 3}'),
        (None, ""),
    ],
)
def test_function_response_content(response: Any, content: str) -> None:
    out = messages([user(text("go")), model(call("f", {}, "c")), user(result("f", response, "c"))])
    assert out[2]["content"] == content


def test_images_inline_and_by_url_and_in_function_responses() -> None:
    png = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
    jpg = {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a.jpg"}}
    shot = result("screenshot", {"output": "taken"}, "c")
    shot["functionResponse"]["parts"] = [png]
    out = messages([user(text("look"), png, jpg), model(call("screenshot", {}, "c")), user(shot)])
    assert out[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
    ]
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "c", "content": "taken"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
            ],
        },
    ]


@pytest.mark.parametrize(
    "part",
    [
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
        {"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/a.png"}},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
        call("f", {}),
    ],
)
def test_unsupported_user_parts_raise(part: JSON) -> None:
    with pytest.raises(TranslationError) as info:
        chat([user(text("x"), part)])
    assert info.value.param is not None and info.value.param.startswith("contents.0.parts.1")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"contents": "hi"}, "contents"),
        ({}, "contents"),
        ({"contents": ["hi"]}, "contents.0"),
        ({"contents": [{"role": "system", "parts": []}]}, "contents.0"),
        ({"contents": [{"role": "user", "parts": "hi"}]}, "contents.0.parts"),
        ({"contents": [{"role": "user", "parts": ["hi"]}]}, "contents.0.parts.0"),
        ({"contents": [model({"functionCall": {"args": {}}})]}, "contents.0.parts.0.functionCall"),
        (
            {"contents": [model(call("f", {}) | {"functionCall": {"name": "f", "args": [1]}})]},
            "contents.0.parts.0.functionCall",
        ),
        ({"contents": [model(result("f", {}))]}, "contents.0.parts.0"),
        (
            {"contents": [user({"functionResponse": {"response": {}}})]},
            "contents.0.parts.0.functionResponse",
        ),
        ({"contents": [], "systemInstruction": 3}, "systemInstruction"),
        (
            {"contents": [], "systemInstruction": {"parts": [call("f", {})]}},
            "systemInstruction.parts.0",
        ),
        ({"contents": [], "tools": {"functionDeclarations": []}}, "tools"),
        (
            {"contents": [], "tools": [{"functionDeclarations": [{"description": "x"}]}]},
            "tools.0.functionDeclarations.0",
        ),
        (
            {
                "contents": [],
                "tools": FUNCTIONS,
                "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}},
            },
            "toolConfig.functionCallingConfig.mode",
        ),
        (
            {
                "contents": [],
                "tools": FUNCTIONS,
                "toolConfig": {
                    "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["z"]}
                },
            },
            "toolConfig.functionCallingConfig.allowedFunctionNames",
        ),
        ({"contents": [], "tools": FUNCTIONS, "toolConfig": "ANY"}, "toolConfig"),
        (
            {"contents": [], "generationConfig": {"candidateCount": 2}},
            "generationConfig.candidateCount",
        ),
        (
            {"contents": [], "generationConfig": {"stopSequences": "END"}},
            "generationConfig.stopSequences",
        ),
        ({"contents": [], "generationConfig": []}, "generationConfig"),
        ({"contents": [], "cachedContent": "cachedContents/abc"}, "cachedContent"),
    ],
)
def test_malformed_requests_raise(body: JSON, param: str) -> None:
    with pytest.raises(TranslationError) as info:
        gemini_to_chat(body, UPSTREAM)
    assert info.value.param == param


def test_body_must_be_an_object() -> None:
    with pytest.raises(TranslationError, match="JSON object"):
        gemini_to_chat([], UPSTREAM)  # type: ignore[arg-type]


def test_request_not_mutated() -> None:
    body: JSON = {
        "contents": [
            user(text("go")),
            model(call("f", {"a": [1]})),
            user(result("f", {"output": "x"})),
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "f", "parameters": {"type": "OBJECT", "nullable": True}}
                ]
            }
        ],
        "generationConfig": {"stopSequences": ["x"]},
    }
    before = copy.deepcopy(body)
    gemini_to_chat(body, UPSTREAM, stream=True)
    assert body == before


# --- a real Gemini CLI session ------------------------------------------------------------


def test_gemini_cli_requests_translate_and_keep_their_prefix() -> None:
    calls = json.loads(FIXTURE.read_text())["calls"]
    translated = []
    for recorded in calls:
        session, path = session_of(recorded["headers"], recorded["path"])
        assert session == "sess-123" and path == recorded["path"]
        adapter = adapter_for(path)
        assert adapter is not None and adapter.kind is ApiKind.GEMINI
        harness = adapter.harness_request(recorded["body"])
        assert harness["model"] == "scripted-model"
        upstream, _ = prepare_chat_request(adapter.to_chat(harness, UPSTREAM), CaptureOptions())
        assert upstream["stream"] is True
        translated.append(upstream)
    first, second = translated
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"].endswith(
        "</session_context>\nCreate hello.txt containing polar"
    )
    assert second["messages"][:2] == first["messages"]  # the next call extends the first
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                tool_call(
                    "run_shell_command_1796081975465_0",
                    "run_shell_command",
                    {"command": "echo polar > hello.txt"},
                )
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "run_shell_command_1796081975465_0",
            "content": "<untrusted_context>\nOutput: (empty)\nProcess Group PGID: 12095\n"
            "</untrusted_context>",
        },
    ]
    declared = [d for t in calls[0]["body"]["tools"] for d in t["functionDeclarations"]]
    assert [t["function"]["name"] for t in first["tools"]] == [d["name"] for d in declared]
    assert all(
        t["function"]["parameters"] == d["parametersJsonSchema"]
        for t, d in zip(first["tools"], declared, strict=True)
    )
    assert (first["temperature"], first["top_p"], first["top_k"]) == (1, 0.95, 64)
    assert "thinkingConfig" not in json.dumps(first) and "tool_choice" not in first


# --- properties ---------------------------------------------------------------------------

ids = st.text(min_size=1, max_size=24).map("fc-".__add__)
texts = st.text(max_size=60)
json_values = json_values_of(texts)
json_objects = st.dictionaries(texts, json_values, max_size=4)
# Calls of one turn: an id or none (the harness may omit it), a name (often shared), arguments.
turn_calls = st.lists(
    st.tuples(st.none() | ids, st.sampled_from(["read", "grep"]) | names, json_objects),
    min_size=1,
    max_size=3,
    unique_by=lambda c: c[0] or object(),
)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[JSON], list[tuple[str, Any]]]:
    """Turns with text, calls and their results; and the Chat messages they must become."""
    contents = [user(*[text(t) for t in draw(st.lists(texts, min_size=1, max_size=2))])]
    expected: list[tuple[str, Any]] = [("user", "\n".join(p["text"] for p in contents[0]["parts"]))]
    for _ in range(draw(st.integers(0, 3))):
        calls = draw(turn_calls)
        said = draw(st.lists(texts, max_size=2))
        index = len(contents)
        contents.append(model(*[text(t) for t in said], *[call(n, a, i) for i, n, a in calls]))
        call_ids = [i or f"call_{index}_{len(said) + k}" for k, (i, _, _) in enumerate(calls)]
        expected.append(
            (
                "assistant",
                (
                    "".join(said) if said else None,
                    [(c, n, a) for c, (_, n, a) in zip(call_ids, calls, strict=True)],
                ),
            )
        )
        outputs = [draw(texts) for _ in calls]
        # The harness may echo a call's id or leave it out.
        echo = [i is not None and draw(st.booleans()) for i, _, _ in calls]
        results = [
            result(n, {"output": o}, i if e else None)
            for (i, n, _), o, e in zip(calls, outputs, echo, strict=True)
        ]
        after = draw(st.lists(texts, max_size=2))
        contents.append(user(*results, *[text(t) for t in after]))
        expected += [("tool", (c, o)) for c, o in zip(call_ids, outputs, strict=True)]
        if after:
            expected.append(("user", "\n".join(after)))
    return contents, expected


@given(conversations())
def test_property_request_keeps_ids_names_arguments_text(
    case: tuple[list[JSON], list[Any]],
) -> None:
    contents, expected = case
    got: list[tuple[str, Any]] = []
    for m in messages(contents):
        if m["role"] == "assistant":
            calls = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in m["tool_calls"]
            ]
            got.append(("assistant", (m["content"], calls)))
        elif m["role"] == "tool":
            got.append(("tool", (m["tool_call_id"], m["content"])))
        else:
            got.append((m["role"], m["content"]))
    assert got == expected
