"""JSON on the hot paths (the interceptor's requests, stream chunks, records): orjson.

orjson parses a vLLM chunk carrying an 8k-token ``prompt_token_ids`` list about ten times
faster than the standard library. It refuses a few things the standard library accepts
(integers beyond 64 bits, ``NaN``), so those fall back to ``json`` instead of failing a call.

:func:`loads_taking_ids` goes further for that one chunk: it parses the id list straight into
packed uint32 with numpy, so no Python int or list is made for the ids at all.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import numpy as np
import orjson


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises ValueError (as ``json.loads`` does) when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", "strict")
        return json.loads(text)  # NaN, huge integers; raises ValueError if really invalid


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (non-ASCII kept as is, like ``ensure_ascii=False``)."""
    try:
        return orjson.dumps(obj)
    except TypeError:  # integers beyond 64 bits, non-str keys
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


# A JSON string (escapes included) or a bracket: enough to know, at any point of a document,
# how deep it is and whether it is inside a string.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_UINT32_END = 2**32


def loads_taking_ids(data: bytes, key: str) -> tuple[dict[str, Any], bytes] | None:
    """Parse a JSON object whose top-level ``key`` is a list of uint32, taking that list out.

    Returns the object without ``key`` and the ids as packed little-endian uint32, exactly what
    ``loads`` and packing the list would give, or None when this fast path does not apply (no
    such key, the key also elsewhere, values that are not plain uint32, anything unusual): the
    caller then parses the whole document with :func:`loads`. It never returns a result for
    bytes that :func:`loads` would not parse to the same object.
    """
    quoted = b'"' + key.encode() + b'"'
    at = data.find(quoted)
    if at < 0 or data.find(quoted, at + 1) >= 0 or not _top_level_key(data, at):
        return None
    colon = _skip_ws(data, at + len(quoted))
    if data[colon : colon + 1] != b":":
        return None
    opening = _skip_ws(data, colon + 1)
    if data[opening : opening + 1] != b"[":
        return None
    closing = data.find(b"]", opening)
    if closing < 0:
        return None
    packed = _uint32_list(data[opening + 1 : closing])
    if packed is None:
        return None
    try:
        # The same document with an empty list: structurally identical, so it parses exactly
        # when the original does, to the same object but for this one value.
        parsed = orjson.loads(data[: opening + 1] + data[closing:])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or parsed.get(key) != []:
        return None  # e.g. a duplicate key spelt with escapes, which would win
    del parsed[key]
    return parsed, packed


def _top_level_key(data: bytes, at: int) -> bool:
    """Whether a string token starts at ``at``, directly inside the top-level object."""
    depth = 0
    for match in _TOKEN.finditer(data):
        start = match.start()
        if start >= at:
            return start == at and depth == 1 and data[:1] == b"{"
        if data[start] == 0x22:  # a string
            if match.end() > at:
                return False  # ``at`` lies inside it
        elif data[start] in b"[{":
            depth += 1
        else:
            depth -= 1
    return False


def _skip_ws(data: bytes, index: int) -> int:
    while data[index : index + 1] in (b" ", b"\t", b"\n", b"\r"):
        index += 1
    return index


def _uint32_list(inner: bytes) -> bytes | None:
    """The packed values of a JSON array's inside, if each is an integer in [0, 2**32).

    Only digits, commas and spaces (what servers write) take this path; tabs or newlines
    between the values send the document to the ordinary parser.
    """
    chars = np.frombuffer(inner, dtype=np.uint8)
    digit = (chars - 48) < 10  # uint8 arithmetic wraps below "0"
    commas = int(np.count_nonzero(chars == 44))
    if int(np.count_nonzero(digit)) + commas + int(np.count_nonzero(chars == 32)) != len(chars):
        return None  # signs, fractions, exponents, literals, nested values, other spacing
    numbers = int(digit[:1].sum()) + int(np.count_nonzero(digit[1:] & ~digit[:-1]))
    if numbers != commas + 1:
        return b"" if not numbers and not commas else None  # [] or [ ]; else a stray comma
    # A leading zero (JSON has none): a "0" that starts a number and is followed by a digit.
    zero_first = (chars[:-1] == 48) & digit[1:]
    zero_first[1:] &= ~digit[:-2]
    if zero_first.any():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns (or raises) on what it cannot read
            values = np.fromstring(inner, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        return None
    # numpy must read every number (it stops early, or complains, at anything else); a value
    # at or past 2**32 covers numbers too large even for int64, which numpy saturates.
    if len(values) != commas + 1 or int(values.max()) >= _UINT32_END:
        return None
    return values.astype("<u4").tobytes()
