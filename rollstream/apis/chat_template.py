"""The common mid-stream Chat chunk, read from its bytes against a template, without a JSON parse.

Within one streamed answer, the reads that carry one token each differ only in three places:
the text of the delta, the token's logprob entry and its id. Everything around them (the id,
``created`` and model of the answer, the choice's index, the delta's one field, ``finish_reason``
null) is the same bytes read after read. :meth:`ChunkTemplate.learn` takes those bytes from one
chunk the fast path (``chat_fast``) has parsed; the reader :meth:`ChunkTemplate.bind` makes of
it for the call then reads a later chunk with a ``startswith`` and one regular expression, and
writes the harness's event by concatenation. It replaces an orjson parse, a walk over the parsed
chunk and an orjson write: the interceptor's largest cost per streamed token.

What it takes, it takes exactly (the tests hold it to the general path's capture and bytes):

- the template is learnt only from a chunk whose fixed bytes the upstream wrote as orjson
  writes them (compact JSON, as vLLM's pydantic writes it), whose delta has one field holding
  a string, one token id and one logprob entry (``token``, ``logprob``, ``bytes``,
  ``top_logprobs`` empty, in that order), and which the template matches;
- a chunk matches only when it is the template's bytes with a JSON string, a JSON number with a
  fraction or an exponent (read to the same float orjson reads) and one id where the template
  had its own: the expression spells out JSON's grammar for each, so the chunk parses to the
  template's shape;
- bytes that are not UTF-8 make no match (orjson would not read the chunk);
- what the harness gets: nothing stripped, the upstream's own event (as the fast path sends
  it); the ids and logprobs both stripped, the stripped template around the text as orjson
  writes it. Any other mix of what the harness asked for learns no template.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from rollstream.apis.chat import JSON, Asked, Capture

# Where the three values stand in the skeleton written to learn a template: strings no real
# chunk holds (should one, it is found twice and no template is learnt).
_TEXT, _ENTRY, _IDS = "\x00rollstream-text", "\x00rollstream-entry", "\x00rollstream-ids"
_ENTRY_KEYS = ["token", "logprob", "bytes", "top_logprobs"]

# JSON's grammar for the values, in the unrolled form (no alternation per character).
_INNER = rb'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*'
_STRING = b'"' + _INNER + b'"'
# A fraction or an exponent always (vLLM writes floats so, ``-0.5`` or ``-1e-7``): an integer
# would be read as one by orjson, and what the capture keeps of it differs. Two exponent digits
# at most: no infinity from a read.
_NUMBER = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]{1,2})?|[eE][+-]?[0-9]{1,2})"
_ENTRY_VALUE = (
    rb'\{"content":\[\{"token":' + _STRING + rb',"logprob":(' + _NUMBER + rb'),"bytes":\['
    rb'(?:[0-9]{1,3}(?:,[0-9]{1,3})*)?\],"top_logprobs":\[\]\}\]\}'
)
_ID = rb"\[(0|[1-9][0-9]{0,9})\]"


@functools.lru_cache(maxsize=64)
def _tail(between: bytes, before_ids: bytes, end: bytes) -> re.Pattern[bytes]:
    """The expression for what follows the template's head: cached, as streams share it."""
    return re.compile(
        b'"('
        + _INNER
        + b')"'
        + re.escape(between)
        + _ENTRY_VALUE
        + re.escape(before_ids)
        + _ID
        + re.escape(end)
        + b"\n\n"
    )


#: A template bound to one call's capture: the harness's bytes for a read, its token captured,
#: or None when the read does not match (nothing captured or changed).
TemplateMatch = Callable[[bytes], bytes | None]


@dataclass(frozen=True, slots=True)
class ChunkTemplate:
    """The fixed bytes of one answer's common chunks, and what the harness gets of them."""

    head: bytes  # ``data: {...,"delta":{"<field>":`` up to the text
    tail: re.Pattern[bytes]  # the text, the logprob entry and the id, and the fixed rest
    content: bool  # the delta's field is ``content`` (the capture's text)
    #: The harness's event around the text (stripped), or None: the upstream's event as it is.
    out: tuple[bytes, bytes] | None

    @classmethod
    def learn(
        cls, chunk: JSON, raw: bytes, asked: Asked, harness_model: str | None
    ) -> ChunkTemplate | None:
        """The template of ``raw``, a common chunk read to ``chunk``; None if it has none.

        ``chunk`` is the fast path's: one choice, a non-empty delta, ids and entries as lists.
        It is not changed.
        """
        choice = chunk["choices"][0]
        delta, ids, logprobs = choice["delta"], choice["token_ids"], choice["logprobs"]
        entries = logprobs["content"]
        if len(delta) != 1 or len(ids) != 1 or len(logprobs) != 1 or len(entries) != 1:
            return None
        ((field, text),) = delta.items()
        entry = entries[0]
        if (
            type(text) is not str
            or type(entry) is not dict
            or list(entry) != _ENTRY_KEYS
            or entry["top_logprobs"] != []
        ):
            return None
        renamed = harness_model is not None and "model" in chunk
        renamed = renamed and chunk["model"] != harness_model
        if asked.token_ids and asked.logprobs and not renamed:
            stripped = False
        elif not asked.token_ids and not asked.logprobs:
            stripped = True
        else:
            return None  # a mix the fast path writes again from the parse
        skeleton_choice = choice | {"delta": {field: _TEXT}, "logprobs": _ENTRY, "token_ids": _IDS}
        skeleton = chunk | {"choices": [skeleton_choice]}
        pieces = _split(orjson.dumps(skeleton), (_TEXT, _ENTRY, _IDS))
        if pieces is None:
            return None
        head, between, before_ids, end = pieces
        out = None
        if stripped:
            del skeleton_choice["token_ids"]
            skeleton_choice["logprobs"] = None
            if renamed:
                skeleton["model"] = harness_model
            written = _split(orjson.dumps(skeleton), (_TEXT,))
            if written is None:
                return None
            out = (b"data: " + written[0], written[1] + b"\n\n")
        template = cls(b"data: " + head, _tail(between, before_ids, end), field == "content", out)
        # The chunk's fixed bytes must be as orjson writes them (the general path writes the
        # harness's event with orjson) and its values as the grammar spells them.
        if not raw.startswith(template.head) or not template.tail.fullmatch(
            raw, len(template.head)
        ):
            return None
        return template

    def bind(self, capture: Capture) -> TemplateMatch:
        """The template's reader for one call's ``capture`` (see :data:`TemplateMatch`).

        A closure over what it needs, looked up once: it runs for every token of the answer.
        """
        head, start, fullmatch = self.head, len(self.head), self.tail.fullmatch
        add_id = capture.completion_token_ids.append
        add_logprob = capture.completion_logprobs.append
        add_text = capture.content_parts.append if self.content else None
        loads, dumps = orjson.loads, orjson.dumps
        out = self.out
        before, after = (out[0], out[1]) if out is not None else (b"", b"")
        quoted_before, quoted_after = before + b'"', b'"' + after
        # Bound while the chunk it was learnt from is captured: the call has token ids.
        capture.saw_token_ids = True

        def match(raw: bytes) -> bytes | None:
            if not raw.startswith(head):
                return None
            found = fullmatch(raw, start)
            if found is None:
                return None
            inner, logprob, token = found.groups()
            escaped = inner.find(b"\\") >= 0
            try:
                if not raw.isascii():
                    raw.decode()  # orjson reads only UTF-8: nor does this
                text = loads(b'"' + inner + b'"') if escaped else inner.decode()
            except (UnicodeDecodeError, orjson.JSONDecodeError):
                return None
            add_id(int(token))
            add_logprob(float(logprob))
            if add_text is not None and text:
                add_text(text)
            if out is None:
                return raw
            if escaped:  # as orjson writes the text: its own escapes
                return before + dumps(text) + after
            return quoted_before + inner + quoted_after

        return match


def _split(written: bytes, sentinels: tuple[str, ...]) -> list[bytes] | None:
    """``written`` cut at each sentinel in turn, each found exactly once; None otherwise."""
    pieces: list[bytes] = []
    rest = written
    for sentinel in sentinels:
        mark = orjson.dumps(sentinel)
        if rest.count(mark) != 1 or written.count(mark) != 1:
            return None
        before, rest = rest.split(mark)
        pieces.append(before)
    pieces.append(rest)
    # In the order asked for: a piece holding another sentinel means the fields came in
    # another order, and the expression would never match.
    return None if any(b"\\u0000rollstream" in piece for piece in pieces) else pieces
