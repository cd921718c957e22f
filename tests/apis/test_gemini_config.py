"""Gemini tools, tool config and generation config as Chat Completions fields."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.apis.gemini_config import json_schema
from tests.apis.gemini_samples import FUNCTIONS, chat, text, user

JSON = dict[str, Any]


def test_tools_from_json_schema_and_from_gemini_schema() -> None:
    tools: list[JSON] = [
        {
            "functionDeclarations": [
                {
                    "name": "run_shell_command",
                    "description": "Run a command.",
                    "parametersJsonSchema": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
                {
                    "name": "edit",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {
                            "type": {"type": "STRING", "enum": ["a", "b"], "format": "enum"},
                            "lines": {
                                "type": "ARRAY",
                                "items": {"type": "INTEGER"},
                                "minItems": "1",
                            },
                            "note": {"type": "STRING", "nullable": True},
                        },
                        "propertyOrdering": ["type", "lines", "note"],
                        "required": ["type"],
                    },
                },
                {"name": "ping"},
            ]
        },
        {"googleSearch": {}},
        {"codeExecution": {}},
    ]
    out = chat([user(text("hi"))], tools=tools)
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "run_shell_command",
                "description": "Run a command.",
                "parameters": tools[0]["functionDeclarations"][0]["parametersJsonSchema"],
            },
        },
        {
            "type": "function",
            "function": {
                "name": "edit",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": ["a", "b"], "format": "enum"},
                        "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
                        "note": {"type": ["string", "null"]},
                    },
                    "required": ["type"],
                },
            },
        },
        {
            "type": "function",
            "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert "tool_choice" not in out


def test_schema_conversion_handles_any_of_and_unspecified_types() -> None:
    schema = {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}], "nullable": True}
    assert json_schema(schema) == {
        "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]
    }
    assert json_schema({"type": "TYPE_UNSPECIFIED", "description": "d"}) == {"description": "d"}


def test_only_built_in_tools_send_no_tools_and_no_choice() -> None:
    out = chat(
        [user(text("hi"))],
        tools=[{"googleSearch": {}}],
        toolConfig={"functionCallingConfig": {"mode": "ANY"}},
    )
    assert "tools" not in out and "tool_choice" not in out


@pytest.mark.parametrize(
    ("config", "choice", "names"),
    [
        ({"mode": "AUTO"}, "auto", ["a", "b", "c"]),
        ({"mode": "VALIDATED"}, "auto", ["a", "b", "c"]),
        ({"mode": "NONE"}, "none", ["a", "b", "c"]),
        ({"mode": "ANY"}, "required", ["a", "b", "c"]),
        (
            {"mode": "ANY", "allowedFunctionNames": ["b"]},
            {"type": "function", "function": {"name": "b"}},
            ["b"],
        ),
        ({"mode": "ANY", "allowedFunctionNames": ["a", "c"]}, "required", ["a", "c"]),
        ({"mode": "AUTO", "allowedFunctionNames": ["a"]}, "auto", ["a", "b", "c"]),
        ({}, "auto", ["a", "b", "c"]),
    ],
)
def test_function_calling_modes(config: JSON, choice: Any, names: list[str]) -> None:
    out = chat([user(text("hi"))], tools=FUNCTIONS, toolConfig={"functionCallingConfig": config})
    assert out["tool_choice"] == choice
    assert [t["function"]["name"] for t in out["tools"]] == names


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}},
            {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": {"type": "object"}},
            },
        ),
        (
            {"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"}},
            {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": {"type": "object"}},
            },
        ),
        ({"responseMimeType": "application/json"}, {"type": "json_object"}),
    ],
)
def test_json_output_becomes_a_response_format(config: JSON, expected: JSON) -> None:
    assert chat([user(text("hi"))], generationConfig=config)["response_format"] == expected


def test_text_output_sends_no_response_format() -> None:
    assert "response_format" not in chat(
        [user(text("hi"))], generationConfig={"responseMimeType": "text/plain"}
    )
