"""zstd-compressed JSON blobs: the raw requests and responses a CallRecord keeps."""

from __future__ import annotations

from typing import Any

import cramjam

from rollstream.errors import SerializationError
from rollstream.schemas import jsonfast

_LEVEL = 3


def compress_json(obj: Any, level: int = _LEVEL) -> bytes:
    """Encode ``obj`` as compact JSON and compress it with zstd (any level decompresses alike)."""
    try:
        raw = jsonfast.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"not JSON-serializable: {exc}") from exc
    return bytes(cramjam.zstd.compress(raw, level=level))


def decompress_json(blob: bytes) -> Any:
    """Inverse of :func:`compress_json`."""
    try:
        return jsonfast.loads(bytes(cramjam.zstd.decompress(blob)))
    except (cramjam.DecompressionError, ValueError) as exc:
        raise SerializationError(f"not a zstd-compressed JSON blob: {exc}") from exc
