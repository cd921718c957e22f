"""Gemini's tool declarations, tool config and generation config as Chat Completions fields.

Gemini declares parameters either as JSON Schema (``parametersJsonSchema``, what Gemini CLI
sends) or in its own OpenAPI-like ``Schema`` (``parameters``: upper-case types, ``nullable``,
``propertyOrdering``, 64-bit integers as strings), which is turned into JSON Schema here.
"""

from __future__ import annotations

from typing import Any

from rollstream.apis.errors import TranslationError

JSON = dict[str, Any]

_SAMPLING = {
    "temperature": "temperature",
    "topP": "top_p",
    "topK": "top_k",
    "maxOutputTokens": "max_tokens",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
_MODES = {"AUTO": "auto", "VALIDATED": "auto", "ANY": "required", "NONE": "none"}
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_ONE = ("items", "additionalProperties", "not")
# int64 fields of Gemini's Schema, which proto JSON may write as strings.
_SCHEMA_INTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")


def chat_tools(tools: object, tool_config: object) -> JSON:
    """``tools`` and ``tool_choice`` for Gemini's ``tools`` and ``toolConfig``.

    Only function declarations are kept: Google Search, code execution and the other built-in
    tools run on Google's side. Nothing is returned without a function (vLLM rejects a
    ``tool_choice`` without tools).
    """
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise TranslationError("'tools' must be a list", "tools")
    functions: list[JSON] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", f"tools.{i}")
        declarations = tool.get("functionDeclarations") or []
        if not isinstance(declarations, list):
            raise TranslationError(
                "functionDeclarations must be a list", f"tools.{i}.functionDeclarations"
            )
        for j, declaration in enumerate(declarations):
            functions.append(_function(declaration, f"tools.{i}.functionDeclarations.{j}"))
    if not functions:
        return {}
    out: JSON = {"tools": functions}
    if tool_config is None:
        return out
    if not isinstance(tool_config, dict):
        raise TranslationError("toolConfig must be an object", "toolConfig")
    config = tool_config.get("functionCallingConfig")
    if config is None:
        return out
    where = "toolConfig.functionCallingConfig"
    if not isinstance(config, dict):
        raise TranslationError("functionCallingConfig must be an object", where)
    mode = config.get("mode") or "AUTO"
    if mode not in _MODES and mode != "MODE_UNSPECIFIED":
        raise TranslationError(f"unsupported function calling mode {mode!r}", f"{where}.mode")
    allowed = config.get("allowedFunctionNames")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed)
    ):
        raise TranslationError(
            "allowedFunctionNames must be a list of strings", f"{where}.allowedFunctionNames"
        )
    if mode == "ANY" and allowed:
        # Chat has no "one of these": the other tools are left out; one name is a named choice.
        names = set(allowed)
        out["tools"] = [f for f in functions if f["function"]["name"] in names]
        if len(out["tools"]) == 1:
            name = out["tools"][0]["function"]["name"]
            out["tool_choice"] = {"type": "function", "function": {"name": name}}
            return out
        if not out["tools"]:
            raise TranslationError(
                "allowedFunctionNames names no declared function", f"{where}.allowedFunctionNames"
            )
    out["tool_choice"] = _MODES.get(mode, "auto")
    return out


def _function(declaration: object, where: str) -> JSON:
    if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
        raise TranslationError("a function declaration needs a string name", where)
    function: JSON = {"name": declaration["name"]}
    if declaration.get("description"):
        function["description"] = declaration["description"]
    if declaration.get("parametersJsonSchema") is not None:
        function["parameters"] = declaration["parametersJsonSchema"]
    elif declaration.get("parameters") is not None:
        function["parameters"] = json_schema(declaration["parameters"])
    else:
        function["parameters"] = {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` as JSON Schema: lower-case types, ``nullable`` as a null type.

    Property names are never touched (a property may well be called ``type``).
    """
    if not isinstance(schema, dict):
        return schema
    out: JSON = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value.upper() != "TYPE_UNSPECIFIED":
                out["type"] = value.lower()
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [json_schema(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = json_schema(value)
        elif key in _SCHEMA_INTS and isinstance(value, str) and value.isdigit():
            out[key] = int(value)
        elif key not in ("nullable", "propertyOrdering"):
            out[key] = value
    if schema.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def chat_settings(config: object) -> JSON:
    """Sampling limits, stop strings and the response format for a ``generationConfig``.

    ``thinkingConfig``, ``responseModalities``, ``responseLogprobs`` and the like are not
    forwarded (the interceptor asks for logprobs itself). More than one candidate is refused:
    each call records one answer.
    """
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise TranslationError("generationConfig must be an object", "generationConfig")
    out: JSON = {}
    for key, chat_key in _SAMPLING.items():
        if config.get(key) is not None:
            out[chat_key] = config[key]
    count = config.get("candidateCount")
    if count is not None and count != 1:
        raise TranslationError(
            "candidateCount must be 1: one answer per call", "generationConfig.candidateCount"
        )
    stop = config.get("stopSequences")
    if stop:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TranslationError(
                "stopSequences must be a list of strings", "generationConfig.stopSequences"
            )
        out["stop"] = list(stop)
    response_format = _response_format(config)
    if response_format is not None:
        out["response_format"] = response_format
    return out


def _response_format(config: JSON) -> JSON | None:
    """JSON output with a schema (Gemini CLI's side calls ask for one), as Chat says it."""
    schema = config.get("responseJsonSchema")
    if schema is None and config.get("responseSchema") is not None:
        schema = json_schema(config["responseSchema"])
    if schema is not None:
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    if config.get("responseMimeType") == "application/json":
        return {"type": "json_object"}
    return None
