"""Who is calling, read from what the harness sends: its own session, sub-agent and retry ids.

Some harnesses name themselves in every request (measured with the pinned versions, see
``tests/interceptor/test_callers.py``):

- Claude Code: ``X-Claude-Code-Session-Id`` (a UUID per process, the same for its sub-agents)
  and, on a sub-agent's calls only, ``X-Claude-Code-Agent-Id``;
- Codex: ``session-id`` (the root thread), ``thread-id`` (the thread calling: the root, or a
  sub-agent's) and, on a sub-agent's calls, ``x-codex-parent-thread-id``;
- opencode: ``x-session-id`` (its session calling: each sub-agent has one of its own) and, on a
  sub-agent's calls, ``x-parent-session-id`` (the session that started it);
- OpenHands: ``x-litellm-session-id`` (its conversation);
- the OpenAI and Anthropic SDKs (Qwen Code, Pi, and through litellm mini-swe-agent, aider,
  Terminus-2 and OpenHands): ``x-stainless-retry-count``.

Qwen Code, Pi and Gemini CLI name no session or agent. What a harness says is recorded as it
says it (``Caller``), never trusted for anything else: rollstream's session is still the API key.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollstream.schemas import Caller

#: Longer values are cut: an id is short, and the record must not carry what a client stuffs in.
MAX_ID_CHARS = 200


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip()
    return value[:MAX_ID_CHARS] or None


def caller_from_headers(headers: Mapping[str, str]) -> Caller | None:
    """The harness's account of who is calling; None when its headers name nobody.

    ``headers`` must look names up case-insensitively (mitmproxy's do).
    """
    session = _header(headers, "x-claude-code-session-id")
    agent = _header(headers, "x-claude-code-agent-id")
    parent = None
    if session is None and (codex := _header(headers, "session-id")) is not None:
        session = codex
        thread = _header(headers, "thread-id")
        agent = thread if thread != codex else None  # the root thread is the session's own
        parent = _header(headers, "x-codex-parent-thread-id")
    if session is None and (opencode := _header(headers, "x-session-id")) is not None:
        session = opencode
        parent = _header(headers, "x-parent-session-id")
        agent = opencode if parent is not None else None  # a sub-session is a sub-agent
    if session is None:
        session = _header(headers, "x-litellm-session-id")
    retries = _header(headers, "x-stainless-retry-count")
    retry = (
        int(retries) if retries is not None and retries.isdigit() and len(retries) < 10 else None
    )
    if session is None and agent is None and parent is None and retry is None:
        return None
    return Caller(session=session, agent=agent, parent=parent, retry=retry)
