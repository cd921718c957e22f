"""Token counting (Anthropic's ``count_tokens``, Gemini's ``countTokens``): not LLM calls.

Answered from the upstream's ``/tokenize`` in the API's own shape, and never recorded.
"""

from __future__ import annotations

import json

from mitmproxy import http

from rollstream.apis.adapters import ADAPTER_BY_KIND, Adapter
from rollstream.apis.errors import TranslationError
from rollstream.interceptor.flows import STATE, json_response, upstream_message
from rollstream.interceptor.recording import ANONYMOUS, CallState
from rollstream.schemas import jsonfast

#: The flow metadata key marking a token count.
COUNTING = "count_tokens"


def send_count_tokens(flow: http.HTTPFlow, adapter: Adapter, upstream_model: str | None) -> None:
    """Turn a token-counting request into the upstream's ``/tokenize`` (or answer its 400)."""
    try:
        body = json.loads(flow.request.get_text(strict=False) or "")
        if not isinstance(body, dict):
            raise TranslationError("the request body must be a JSON object")
        body = adapter.harness_request(body)
        model = upstream_model or str(body.get("model") or "")
        tokenize = adapter.count_tokens_request(body, model)
    except (ValueError, TranslationError) as exc:
        flow.response = json_response(400, adapter.error(400, str(exc)))
        return
    flow.metadata[COUNTING] = True
    flow.metadata[STATE] = CallState(adapter.kind, ANONYMOUS, body)
    flow.metadata[STATE].recorded = True  # token counting is not an LLM call
    flow.request.path = "/tokenize"
    flow.request.set_content(json.dumps(tokenize).encode())


def answer_count_tokens(flow: http.HTTPFlow) -> None:
    """The upstream's ``/tokenize`` answer as the API's token count (or its error)."""
    assert flow.response is not None
    adapter = ADAPTER_BY_KIND[flow.metadata[STATE].api]
    if flow.response.status_code >= 400:
        message = upstream_message(flow.response)
        flow.response = json_response(
            flow.response.status_code, adapter.error(flow.response.status_code, message)
        )
        return
    try:
        count = int(jsonfast.loads(flow.response.get_content(strict=False) or b"")["count"])
    except (ValueError, KeyError, TypeError) as exc:
        message = f"the upstream's /tokenize answer has no count: {exc}"
        flow.response = json_response(502, adapter.error(502, message))
        return
    flow.response = json_response(200, adapter.count_tokens_answer(count))
