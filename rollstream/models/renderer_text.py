"""Messages in the shape the ``renderers`` read, and turn text as vLLM's parsers cut it."""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.models.family import Message
from rollstream.models.tokenizer import without_billing_header


def chat_messages(
    messages: Sequence[Message], single_system: bool = False, after_start: bool = False
) -> list[Message]:
    """OpenAI-style Chat messages in the shape the renderers read.

    Claude Code's billing header leaves the system prompt, as vLLM drops it. Reasoning echoed
    back as ``reasoning`` (vLLM 0.20+) is also given as ``reasoning_content``;
    ``content: None`` (a tool-call turn) is empty text; text parts are joined with newlines, as
    vLLM joins them for text-only templates; tool-call arguments stay as sent.
    ``single_system``: for templates that take one system message, at the start (Llama 3's
    reads a second as the user's, Qwen3.5's refuses one anywhere else): leading system messages
    become one (Codex sends its instructions and its environment as two), and a later one (Claude
    Code sends reminders as system messages to models it does not know) becomes a user message.
    ``after_start``: the messages continue a conversation under way (exact context's new
    messages), so none of them is a leading system message.
    """
    out: list[Message] = []
    for message in messages:
        m = without_billing_header(message)
        if m.get("reasoning") and not m.get("reasoning_content"):
            m["reasoning_content"] = m["reasoning"]
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type", "text") == "text" for p in content
        ):
            m["content"] = "\n".join(str(p.get("text", "")) for p in content)
        if single_system and m.get("role") == "system" and (out or after_start):
            if not after_start and len(out) == _systems(out):
                out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n\n{m['content']}"}
                continue
            m["role"] = "user"
        out.append(m)
    return out


def _systems(messages: list[Message]) -> int:
    return sum(1 for m in messages if m.get("role") == "system")


def verbatim_text(
    text: str, content: str | None, reasoning: str | None, called: bool
) -> tuple[str | None, str | None]:
    """Content and reasoning as vLLM's qwen3 reasoning and hermes tool parsers cut ``text``.

    ``text`` is the decoded turn (special tokens kept, stop tokens off); ``content`` and
    ``reasoning`` are what the family's parser read, stripped. vLLM keeps what lies between
    ``<think>`` (or the turn's start, where the prompt opened it) and ``</think>`` as the
    reasoning, and what follows, up to the first ``<tool_call>`` when there are calls, as the
    content; an empty one is None, and a blank one before calls too. Each is taken only where
    it is the parsed one with its whitespace: anything else keeps the parser's reading.
    """
    head, closed, rest = text.partition("</think>")
    if not closed and reasoning is not None and content is None:  # reasoning never closed
        head, closed, rest = text, "(open)", ""
    elif not closed:
        head, rest = "", text
    raw_reasoning = head.partition("<think>")[2] if "<think>" in head else head
    raw_content = rest.partition("<tool_call>")[0] if called else rest
    if called and not raw_content.strip():  # vLLM drops a blank before calls
        raw_content = ""
    if closed and (raw_reasoning.strip() or None) == reasoning:
        reasoning = raw_reasoning or None
    if (raw_content.strip() or None) == (content.strip() if content else None):
        content = raw_content or None
    return content, reasoning
