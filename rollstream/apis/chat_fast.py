"""The common mid-stream Chat chunk, captured and forwarded without the general path.

Nearly every read of a streamed Chat answer is one event holding one token: choice 0, a delta
(text, or reasoning), the token's ids and logprob entries, no finish, no usage. The general path
(:meth:`Capture.add_chunk`, :func:`strip_chunk`, ``SSEEvent.encode``) spends most of the
interceptor's per-token time on generic lookups for that chunk; :func:`chunk_fast_path` does the
same for it in one pass, and declines every other chunk before touching anything.

What it gives equals the general path's, which the property tests check:

- the capture: the same fields, in the same values;
- the forwarded bytes, where anything is stripped or renamed: the same bytes (the chunk is
  changed as :func:`strip_chunk` changes it, then written by the same encoder);
- where nothing is (the harness asked for token ids and logprobs, the model keeps its name): the
  upstream's own event, unchanged. It parses to the object the general path writes (orjson read
  it, so it is strict JSON), spelt as the upstream spelt it (spaces, escapes, numbers). The
  general path itself changes a value only where orjson's reading does: a duplicate key (the
  last kept), an integer beyond 64 bits (read as a float), ``-0`` (read as ``0``); there the
  harness gets what the upstream sent, as through plain mitmproxy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from rollstream.apis.chat import JSON, Asked, Capture, logprob_of
from rollstream.apis.chat_template import ChunkTemplate, TemplateMatch
from rollstream.schemas import jsonfast

#: A parsed chunk and the read it came from, in; the bytes for the harness out, or None when
#: the chunk is not the common one (nothing was captured or changed: the general path takes it).
FastChunk = Callable[[JSON, bytes], bytes | None]

# Chunks that teach no template (several ids, top logprobs, a server writing JSON its own way)
# cost a little each time one is tried: after this many, the call stops trying.
_LEARN_ATTEMPTS = 8


@dataclass(slots=True)
class FastPath:
    """One call's fast path: :attr:`parsed` for a parsed chunk, :attr:`template` for raw bytes.

    ``template`` (a ``chat_template`` reader), once a chunk has taught it, reads the answer's
    later common chunks without parsing them; ``parsed`` takes what it does not match.
    """

    parsed: FastChunk
    template: TemplateMatch | None = None


def chunk_fast_path(capture: Capture, asked: Asked, harness_model: str | None) -> FastPath:
    """The fast path of one streamed Chat call that goes to the harness as Chat (passthrough).

    Its ``parsed`` function takes a chunk orjson parsed from ``raw``, which must be exactly one
    event (one ``data:`` line, then a blank line: ``SSEParser.single`` gives such chunks), and
    may change the chunk. Only dicts, lists and JSON's scalars are in such a chunk: a subscript
    that succeeds on a value means it is a dict (a string key) or a list (unpacking). A chunk
    it takes teaches the path its template, unless the template it has already matched it.
    """
    strip_ids = not asked.token_ids
    null_logprobs = not asked.logprobs
    dumps = orjson.dumps
    attempts = _LEARN_ATTEMPTS

    def fast(chunk: JSON, raw: bytes) -> bytes | None:
        nonlocal attempts
        # Subscripts in a try, not get() and isinstance(): the checks are half the cost of
        # this path, and a missing field or a value of the wrong kind raises before any change.
        try:
            choices = chunk["choices"]
            (choice,) = choices
            ids = choice["token_ids"]
            entries = choice["logprobs"]["content"]
            delta = choice["delta"]
            text = delta.get("content")
            # What only the general path handles: an empty delta (the capture then reads
            # ``message``), tool calls, the finish, another choice, SGLang's meta_info, prompt
            # ids, usage, and capture fields of an unusual type.
            if (
                type(choices) is not list
                or type(ids) is not list
                or type(entries) is not list
                or not delta
                or delta.get("tool_calls")
                or choice.get("finish_reason")
                or choice.get("index", 0) != 0
                or "prompt_token_ids" in choice
                or "meta_info" in choice
                or chunk.get("usage") is not None
                or "prompt_token_ids" in chunk
                or "meta_info" in chunk
            ):
                return None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

        if attempts:  # before the chunk is changed below: the template is of the upstream's
            learnt = ChunkTemplate.learn(chunk, raw, asked, harness_model)
            if learnt is None:
                attempts -= 1
            else:
                path.template = learnt.bind(capture)

        # Captured as Capture._add_choice captures it.
        capture.saw_token_ids = True
        capture.completion_token_ids += ids
        gathered = capture.completion_logprobs
        for entry in entries:
            value = entry.get("logprob") if type(entry) is dict else None
            gathered.append(value if type(value) is float else logprob_of(entry))
        if text and isinstance(text, str):
            capture.content_parts.append(text)

        # Stripped as strip_chunk strips it; unchanged, the upstream's event is forwarded.
        changed = False
        if harness_model is not None and "model" in chunk and chunk["model"] != harness_model:
            chunk["model"] = harness_model
            changed = True
        if strip_ids:
            del choice["token_ids"]
            changed = True
        if null_logprobs:
            choice["logprobs"] = None
            changed = True
        if not changed:
            return raw
        try:
            body = dumps(chunk)
        except TypeError:  # what orjson cannot write (not from orjson's parse): as encode does
            body = jsonfast.dumps(chunk)
        return b"data: " + body + b"\n\n"

    path = FastPath(fast)
    return path
