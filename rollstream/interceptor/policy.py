"""What may pass the interceptor to the upstream: one decision per request, fail closed.

The upstream (vLLM's or SGLang's Starlette, the reference backend's aiohttp) percent-decodes a
request's path before routing it, so the proxy decides on the path as the upstream will read
it: percent-decoded, dot segments resolved, duplicate slashes merged, a trailing slash dropped
(case is kept: those routers are case-sensitive). What it decides:

- an **LLM call** (an API's generation route, ``POST``): session check, pause gate, recording;
- **token counting** (Anthropic's ``count_tokens``, Gemini's ``countTokens``): answered from the
  upstream's ``/tokenize``;
- a **WebSocket** upgrade on the Responses route (Codex's transport): ended by the interceptor
  itself (``websocket``), each of its calls then taking the LLM call's path;
- an **auxiliary route** on the allowlist (the model list, ``/tokenize``, ``/detokenize``,
  ``/health``): forwarded, on the normalised path;
- anything else is **refused** (404, or 405 for a known route asked with another method, 400
  for a path that cannot be read) in the caller's API format, and recorded: an engine's own
  routes (``/v1/completions`` outside exact context, LoRA loading, profiling, sleep, weight
  updates) must not be reachable from behind the wall.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from rollstream.apis.adapters import (
    ADAPTER_BY_KIND,
    ADAPTERS,
    Adapter,
    adapter_for,
    count_tokens_adapter,
)
from rollstream.schemas import ApiKind

#: Routes forwarded as they are, by method: what harnesses and SDKs ask besides their calls.
AUXILIARY: dict[str, frozenset[str]] = {
    "GET": frozenset({"/v1/models", "/models", "/v1beta/models", "/health"}),
    "POST": frozenset({"/tokenize", "/detokenize"}),
}
#: A model's card (``/v1/models/{id}``, Gemini's ``/v1beta/models/{id}``): GET only.
_MODEL_CARD = re.compile(r"^/(?:v1|v1beta)?/?models/[^/:]+$")
#: Characters no route has, which only an encoding can put in a path.
_UNREADABLE = re.compile(r"[\x00-\x1f\x7f\\]")


class Route(enum.Enum):
    """What the interceptor does with a request."""

    LLM_CALL = "llm_call"
    COUNT_TOKENS = "count_tokens"
    WEBSOCKET = "websocket"
    AUXILIARY = "auxiliary"
    REFUSED = "refused"


@dataclass(frozen=True)
class Decision:
    """A request's route, its path as the upstream reads it, and why when it is refused."""

    route: Route
    path: str  # normalised, with the query string as it came
    adapter: Adapter | None = None  # LLM calls and token counting; the caller's API if refused
    status: int = 200
    reason: str = ""


class UnreadablePath(ValueError):
    """A path no upstream route can match the way the proxy reads it."""


def normalise(path: str) -> str:
    """``path`` as the upstream routes it: decoded, dot segments resolved, slashes merged.

    The query string is kept as it came (its parameters are the API's, read by the API).
    UnreadablePath for control characters, backslashes or a path that climbs above the root.
    """
    bare, mark, query = path.partition("?")
    decoded = unquote(bare, errors="strict")
    if _UNREADABLE.search(decoded) or ("%" in decoded and unquote(decoded) != decoded):
        raise UnreadablePath("the path has characters (or a double encoding) no route has")
    segments: list[str] = []
    for segment in decoded.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise UnreadablePath("the path climbs above the root")
            segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments) + (mark + query if mark else "")


def decide(method: str, path: str, websocket: bool = False) -> Decision:
    """What to do with ``method path`` (the path without any ``/s/{session}`` prefix).

    ``websocket``: the request asks to upgrade to a WebSocket (``is_upgrade``).
    """
    try:
        normal = normalise(path)
    except (UnreadablePath, UnicodeDecodeError) as exc:
        return Decision(Route.REFUSED, path, caller_api(path), 400, f"unreadable path: {exc}")
    bare = normal.partition("?")[0]
    counting = count_tokens_adapter(normal)
    adapter = adapter_for(normal)
    if websocket:
        if method == "GET" and adapter is not None and adapter.kind is ApiKind.RESPONSES:
            return Decision(Route.WEBSOCKET, normal, adapter)
        return Decision(
            Route.REFUSED,
            normal,
            adapter or caller_api(normal),
            404 if adapter is None else 405,
            f"{method} {bare}: WebSocket is served on the Responses route only (GET)",
        )
    if counting is not None or adapter is not None:
        if method != "POST":
            return Decision(
                Route.REFUSED, normal, counting or adapter, 405, f"{method} {bare}: use POST"
            )
        if counting is not None:
            return Decision(Route.COUNT_TOKENS, normal, counting)
        return Decision(Route.LLM_CALL, normal, adapter)
    if bare in AUXILIARY.get(method, ()) or (method == "GET" and _MODEL_CARD.match(bare)):
        return Decision(Route.AUXILIARY, normal)
    return Decision(
        Route.REFUSED,
        normal,
        caller_api(normal),
        404,
        f"{method} {bare} is not served through the rollstream interceptor",
    )


def is_upgrade(headers: Mapping[str, str]) -> bool:
    """Whether a request asks to upgrade its connection to a WebSocket.

    ``headers`` must look names up case-insensitively (mitmproxy's do).
    """
    return "websocket" in headers.get("upgrade", "").lower()


def caller_api(path: str) -> Adapter:
    """The API a refused request most likely speaks, for an error it can read."""
    bare = path.partition("?")[0]
    if bare.startswith("/v1beta") or ":generateContent" in bare:
        return ADAPTER_BY_KIND[ApiKind.GEMINI]
    if "/messages" in bare:
        return ADAPTERS["/v1/messages"]
    if "/responses" in bare:
        return ADAPTERS["/v1/responses"]
    return ADAPTERS["/v1/chat/completions"]
