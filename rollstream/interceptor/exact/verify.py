"""Whether the upstream tokenizes and renders as the interceptor's family: checked, not assumed.

Exact context sends prompts the interceptor built itself; a server given the wrong vocabulary or
another chat template accepts them and answers nonsense, with no error anywhere. So before the
first exact call two questions go to the server's ``/tokenize``: the ids of a fixed text (the
vocabulary, no special tokens: Mistral's tekken reads ``</s>`` written as text as four ordinary
tokens), and the ids of a fixed conversation rendered with its template (the renderer: system
prompt, tools, a tool call and its result, unicode). Both must equal the family's. A difference
refuses exact context, naming the first differing token and the text of both renderings around
it; a server that cannot answer (not up yet, still loading, no ``/tokenize``) leaves the upstream
unverified, which is "not yet exact", never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.family import Family
from rollstream.models.probe import TOOL

JSON = dict[str, Any]
State = Literal["verified", "refused", "unverified"]

#: What the vocabularies must agree on: prose, code, unicode, whitespace runs.
PROBE_TEXT = (
    "Hello, world! def f(x):\n    return x ** 2  # comment\n\n\t\tüñíçødé 日本語 😀 "
    '   spaces   and\r\nnewlines 12345 6.02e23 <tag> {"json": [1, 2]}'
)
#: The tool of the probe conversation: the one the family check at start renders already.
PROBE_TOOLS: list[JSON] = [TOOL]
#: A harness-shaped conversation at the point exact context continues one: after a tool result.
#: Its call id is nine alphanumerics, as Mistral's format requires: vLLM 0.32's ``/tokenize`` in
#: ``--tokenizer-mode mistral`` refuses any other id with a 400 (its chat endpoint shortens them
#: first), which would leave every Mistral upstream unverified.
PROBE_MESSAGES: list[JSON] = [
    {"role": "system", "content": "You are a coding agent. Work in the current directory."},
    {"role": "user", "content": "Write «polar» into hello.txt, then show it. 日本語 😀"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call00000",
                "type": "function",
                "function": {
                    "name": "shell",
                    "arguments": '{"command": "echo polar > hello.txt && cat hello.txt"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call00000", "content": "polar\n"},
]
#: Text shown on each side of the first difference.
_AROUND = 12


@dataclass(frozen=True)
class Verdict:
    """What the check found: verified, refused (why) or unverified (why not yet)."""

    state: State
    reason: str = ""
    #: The served context length, as ``/tokenize`` reports it (vLLM does), or None.
    max_model_len: int | None = None


class _Unanswered(Exception):
    """The server did not answer the question (down, loading, no /tokenize)."""


async def check(settings: InterceptorSettings, family: Family) -> Verdict:
    """Ask the upstream's ``/tokenize`` about the vocabulary and the template (see the module)."""
    url = settings.upstream.rstrip("/") + "/tokenize"
    headers = {}
    if settings.upstream_api_key is not None:
        headers["authorization"] = f"Bearer {settings.upstream_api_key.get_secret_value()}"
    base: JSON = {"model": settings.upstream_model} if settings.upstream_model else {}
    try:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10), headers=headers
        ) as client:
            probe = {"prompt": PROBE_TEXT, "add_special_tokens": False}
            text = await _tokenize(client, url, base | probe)
            ours = family.tokenizer.encode(PROBE_TEXT)
            if text["tokens"] != ours:
                reason = _differ("tokenizer", family, ours, text["tokens"], settings)
                return Verdict("refused", reason)
            rendered = await _tokenize(
                client,
                url,
                base
                | {"messages": PROBE_MESSAGES, "tools": PROBE_TOOLS, "add_generation_prompt": True},
            )
    except _Unanswered as exc:
        return Verdict("unverified", str(exc))
    ours = list(family.render_ids(PROBE_MESSAGES, PROBE_TOOLS))
    limit = rendered.get("max_model_len")
    if rendered["tokens"] != ours:
        reason = _differ("chat template", family, ours, rendered["tokens"], settings)
        return Verdict("refused", reason)
    return Verdict("verified", max_model_len=limit if isinstance(limit, int) else None)


async def _tokenize(client: aiohttp.ClientSession, url: str, body: JSON) -> JSON:
    try:
        async with client.post(url, json=body) as response:
            if response.status == 404:
                raise _Unanswered(f"the upstream has no /tokenize ({url})")
            if response.status != 200:
                said = (await response.text())[:300]
                raise _Unanswered(f"the upstream's /tokenize answered {response.status}: {said}")
            answer = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise _Unanswered(f"the upstream's /tokenize did not answer ({url}): {exc}") from exc
    if not isinstance(answer, dict) or not isinstance(answer.get("tokens"), list):
        raise _Unanswered(f"the upstream's /tokenize gave no token ids ({url})")
    return answer


def _differ(
    what: str, family: Family, ours: list[int], theirs: list[int], settings: InterceptorSettings
) -> str:
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    at = min(len(ours), len(theirs)) if at is None else at

    def around(ids: list[int]) -> str:
        before = family.tokenizer.decode(ids[max(0, at - _AROUND) : at], skip_special_tokens=False)
        after = family.tokenizer.decode(ids[at : at + _AROUND], skip_special_tokens=False)
        return repr(before + "⟨here⟩" + after)

    return (
        f"the interceptor's {what} (family {family.name}, {family.tokenizer.path}) and the "
        f"upstream's ({settings.upstream}) disagree: {len(ours)} and {len(theirs)} ids, first "
        f"difference at id {at} ({ours[at : at + 3]} against {theirs[at : at + 3]}); ours "
        f"{around(ours)}, theirs {around(theirs)}"
    )
