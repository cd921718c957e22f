"""Delta encoding of the requests a CallRecord keeps, as prompt token ids are delta-encoded.

Every call of a coding session sends the whole conversation again, so storing each request whole
costs O(turns x context) on the broker however well the token ids are encoded. A request is
instead stored as its difference from an earlier request of the session: how many leading items
of the conversation list (``messages``, or ``input`` for Responses) it shares with that request,
which other top-level fields are equal to that request's (the system prompt and tool
definitions, usually), and the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from rollstream.errors import SerializationError
from rollstream.schemas import jsonfast
from rollstream.schemas.base import Model

JSON = dict[str, Any]

#: The keys that hold a request's conversation, by API (Chat and Anthropic, Responses).
LIST_KEYS = ("messages", "input")


class RequestBase(Model):
    """What a delta-encoded request takes from an earlier request of its session."""

    base_call_id: str
    list_key: str | None = None
    shared_items: int = Field(default=0, ge=0)
    unchanged: list[str] = Field(default_factory=list)


def _list_key(request: JSON) -> str | None:
    return next((k for k in LIST_KEYS if isinstance(request.get(k), list)), None)


def _common_items(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def delta_request(request: JSON, base_call_id: str, base: JSON) -> tuple[JSON, RequestBase] | None:
    """``request`` as its difference from ``base``; None when they share nothing worth it."""
    key = _list_key(request)
    shared = 0
    if key is not None and isinstance(base.get(key), list):
        shared = _common_items(request[key], base[key])
    unchanged = [k for k, v in request.items() if k != key and k in base and base[k] == v]
    if shared == 0 and not unchanged:
        return None
    rest = {k: v for k, v in request.items() if k not in unchanged}
    if key is not None:
        rest[key] = request[key][shared:]
    return rest, RequestBase(
        base_call_id=base_call_id,
        list_key=key if shared else None,  # nothing shared: the whole list is in the rest
        shared_items=shared,
        unchanged=unchanged,
    )


def best_delta(
    request: JSON, candidates: Iterable[tuple[str, JSON]]
) -> tuple[JSON, RequestBase | None]:
    """The smallest delta against any candidate (call id, full request); the request if none."""
    best: tuple[JSON, RequestBase | None] = (request, None)
    best_score = (0, 0)
    for call_id, base in candidates:
        found = delta_request(request, call_id, base)
        if found is None:
            continue
        score = (found[1].shared_items, len(found[1].unchanged))
        if score > best_score:
            best, best_score = found, score
    return best


@dataclass(frozen=True)
class RequestDigest:
    """What delta encoding needs to remember of a request: digests, not the request itself.

    An interceptor holds one per recent call of every open session; a whole coding-agent
    request (a system prompt, tool schemas, the conversation) would cost megabytes each.
    """

    list_key: str | None
    items: tuple[bytes, ...]
    fields: dict[str, bytes]


def _digest(value: Any) -> bytes:
    # Equal JSON, equal digest (key order included: a harness that reorders keys shares less,
    # never wrongly). 16 bytes of BLAKE2b: a collision would corrupt a resolved request.
    return hashlib.blake2b(jsonfast.dumps(value), digest_size=16).digest()


def digest_request(request: JSON) -> RequestDigest:
    """The digests of a request's conversation items and other top-level fields."""
    key = _list_key(request)
    items = tuple(_digest(item) for item in request[key]) if key is not None else ()
    fields = {k: _digest(v) for k, v in request.items() if k != key}
    return RequestDigest(key, items, fields)


def best_delta_by_digest(
    request: JSON, digest: RequestDigest, candidates: Iterable[tuple[str, RequestDigest]]
) -> tuple[JSON, RequestBase | None]:
    """As :func:`best_delta`, comparing digests (``digest`` is ``request``'s own)."""
    best: RequestBase | None = None
    best_score = (0, 0)
    for call_id, base in candidates:
        shared = 0
        if digest.list_key is not None and digest.list_key == base.list_key:
            for mine, theirs in zip(digest.items, base.items, strict=False):
                if mine != theirs:
                    break
                shared += 1
        unchanged = [k for k, d in digest.fields.items() if base.fields.get(k) == d]
        score = (shared, len(unchanged))
        if score > best_score:
            best_score = score
            best = RequestBase(
                base_call_id=call_id,
                list_key=digest.list_key if shared else None,
                shared_items=shared,
                unchanged=unchanged,
            )
    if best is None:
        return request, None
    rest = {k: v for k, v in request.items() if k not in best.unchanged}
    if digest.list_key is not None:
        rest[digest.list_key] = request[digest.list_key][best.shared_items :]
    return rest, best


def resolve_request(
    rest: JSON, spec: RequestBase | None, base_of: Callable[[str], JSON | None]
) -> JSON:
    """The whole request; ``base_of`` gives a base call's whole request.

    Raises SerializationError (not retriable) when the base is unknown or does not have what the
    delta says it shares.
    """
    if spec is None:
        return rest
    base = base_of(spec.base_call_id)
    if base is None:
        raise SerializationError(f"request base call {spec.base_call_id!r} is unknown")
    out: JSON = {}
    for key in spec.unchanged:
        if key not in base:
            raise SerializationError(f"request base {spec.base_call_id!r} has no field {key!r}")
        out[key] = base[key]
    out.update(rest)
    if spec.list_key is not None:
        head = base.get(spec.list_key)
        if not isinstance(head, list) or len(head) < spec.shared_items:
            raise SerializationError(
                f"request shares {spec.shared_items} {spec.list_key} of base call "
                f"{spec.base_call_id!r}, which has fewer"
            )
        out[spec.list_key] = head[: spec.shared_items] + list(rest.get(spec.list_key) or [])
    return out
