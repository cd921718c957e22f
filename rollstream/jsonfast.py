"""JSON on the hot paths (the interceptor's requests, stream chunks, records): orjson.

orjson parses a vLLM chunk carrying an 8k-token ``prompt_token_ids`` list about ten times
faster than the standard library. It refuses a few things the standard library accepts
(integers beyond 64 bits, ``NaN``), so those fall back to ``json`` instead of failing a call.
"""

from __future__ import annotations

import json
from typing import Any

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
