"""Who is calling: the harnesses' own ids read from their headers, as the pinned versions send
them (header names and value shapes measured through a logging hop: Claude Code 2.1.197, Codex
0.171.0, Qwen Code 0.15.10, Pi 0.73.1, Gemini CLI 0.61.0, opencode 1.18.33; the ids here are
made up)."""

from __future__ import annotations

import pytest
from mitmproxy.http import Headers

from rollstream.interceptor.callers import MAX_ID_CHARS, caller_from_headers
from rollstream.schemas import Caller

CLAUDE = "3b9261f4-5b44-4c4e-9d1e-0a2f4c8d7e61"
CODEX = "01a249a7-ae0c-7c31-b2d4-5e6f7a8b9c0d"
CODEX_SUB = "01a249a9-1b2c-7d3e-8f40-a1b2c3d4e5f6"
OPENCODE = "ses_db5c2867bffeiw04mXRs0vF6ij"
OPENCODE_SUB = "ses_db5c1f02affeKq81cZp3Hn2tLw"


def headers(**fields: str) -> Headers:
    """Headers as mitmproxy hands them to the addon (names case-insensitive)."""
    return Headers([(k.replace("_", "-").encode(), v.encode()) for k, v in fields.items()])


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param(  # Claude Code's main thread
            headers(X_Claude_Code_Session_Id=CLAUDE, X_Stainless_Retry_Count="0"),
            Caller(session=CLAUDE, retry=0),
            id="claude-code",
        ),
        pytest.param(  # one of its sub-agents (the Agent tool): same session, its agent id
            headers(
                X_Claude_Code_Session_Id=CLAUDE,
                x_claude_code_agent_id="a59a38832687ef644",
                X_Stainless_Retry_Count="0",
            ),
            Caller(session=CLAUDE, agent="a59a38832687ef644", retry=0),
            id="claude-code-subagent",
        ),
        pytest.param(  # Codex's root thread: the thread is the session
            headers(session_id=CODEX, thread_id=CODEX, originator="codex_exec"),
            Caller(session=CODEX),
            id="codex",
        ),
        pytest.param(  # a thread spawn_agent started: its own thread, the root its parent
            headers(
                session_id=CODEX,
                thread_id=CODEX_SUB,
                x_codex_parent_thread_id=CODEX,
                x_openai_subagent="collab_spawn",
            ),
            Caller(session=CODEX, agent=CODEX_SUB, parent=CODEX),
            id="codex-subagent",
        ),
        pytest.param(  # opencode's main session
            headers(x_session_id=OPENCODE, x_session_affinity=OPENCODE),
            Caller(session=OPENCODE),
            id="opencode",
        ),
        pytest.param(  # a sub-session its task tool started: its own id, its parent's
            headers(
                x_session_id=OPENCODE_SUB,
                x_session_affinity=OPENCODE_SUB,
                x_parent_session_id=OPENCODE,
            ),
            Caller(session=OPENCODE_SUB, agent=OPENCODE_SUB, parent=OPENCODE),
            id="opencode-subagent",
        ),
        pytest.param(  # OpenHands: its conversation, through litellm's header
            headers(
                x_litellm_session_id="7c0f3d2a-5e41-4b8e-9a6d-2f1c0b9e8d7a",
                X_Title="OpenHands",
                X_Stainless_Retry_Count="0",
            ),
            Caller(session="7c0f3d2a-5e41-4b8e-9a6d-2f1c0b9e8d7a", retry=0),
            id="openhands",
        ),
        pytest.param(  # Qwen Code and Pi: the OpenAI SDK's retry count, nothing else
            headers(User_Agent="QwenCode/0.15.10 (linux; x64)", X_Stainless_Retry_Count="2"),
            Caller(retry=2),
            id="qwen-code-retry",
        ),
        pytest.param(  # Gemini CLI names nobody
            headers(x_goog_api_client="google-genai-sdk/1.30.0 gl-node/v20.20.2"),
            None,
            id="gemini-cli",
        ),
    ],
)
def test_each_harness_is_recorded_as_it_names_itself(sent: Headers, expected: Caller) -> None:
    assert caller_from_headers(sent) == expected


def test_what_a_client_stuffs_into_the_headers_is_cut_or_dropped() -> None:
    caller = caller_from_headers(
        headers(
            X_Claude_Code_Session_Id="x" * 10_000,
            X_Stainless_Retry_Count="99999999999999999999",  # not an Avro long
        )
    )
    assert caller == Caller(session="x" * MAX_ID_CHARS)
    assert caller_from_headers(headers(X_Stainless_Retry_Count="-1")) is None
    assert caller_from_headers(headers(X_Claude_Code_Session_Id="  ")) is None
