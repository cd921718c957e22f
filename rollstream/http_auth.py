"""Bearer tokens on the control planes: one aiohttp middleware for every server, one header helper.

The interceptor's admin port and the node's API change what a run does (pause, policy version,
sessions, tasks that run commands). In RL the policy writes code that runs beside them, so each
requires a token: ``bearer_middleware`` guards every route of an application but the open ones
(``/health``), with its own optional token for ``/metrics``, compares in constant time and
answers 401 in JSON. Tokens are ``SecretStr`` and never logged; ``token_file`` keeps a
generated one with mode 0600 for the commands of a stack to share.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from rollstream.durable import make_directory
from rollstream.errors import ConfigurationError

log = logging.getLogger(__name__)

#: Paths any caller may ask: liveness says nothing and changes nothing.
OPEN_PATHS = frozenset({"/health"})
METRICS_PATH = "/metrics"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def matches(presented: str | None, token: SecretStr) -> bool:
    """Whether an Authorization header carries ``token`` (constant time in the token's length)."""
    wanted = token.get_secret_value()
    if presented is None or not wanted.strip():  # an empty token is no secret: nothing matches
        return False
    scheme, _, value = presented.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), wanted.encode())


def unauthorized(reason: str) -> web.Response:
    """The 401 every guarded route answers: JSON, with the scheme to use, never the token."""
    return web.json_response(
        {"error": {"type": "unauthorized", "message": reason}},
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="rollstream"'},
    )


def bearer_middleware(
    token: SecretStr | None,
    *,
    metrics_token: SecretStr | None = None,
    open_paths: Iterable[str] = OPEN_PATHS,
    guarded_prefix: str = "/",
) -> Middleware:
    """A middleware requiring ``token`` on the routes under ``guarded_prefix`` but ``open_paths``.

    ``/metrics`` also takes ``metrics_token`` when one is set: a scraper need not hold the
    control token, whose holder may read the metrics too. ``token`` None leaves the routes
    open: the service was started without one (its settings say how to set it).
    """
    for given in (token, metrics_token):
        if given is not None and not given.get_secret_value().strip():
            raise ConfigurationError(
                "an empty bearer token would let any caller in: give a token, or None for an"
                " open port"
            )
    opened = frozenset(open_paths)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if token is None or path in opened or not path.startswith(guarded_prefix):
            return await handler(request)
        wanted = [token]
        if request.path == METRICS_PATH and metrics_token is not None:
            wanted.append(metrics_token)
        presented = request.headers.get("Authorization")
        if any(matches(presented, t) for t in wanted):
            return await handler(request)
        peer = request.remote or "?"
        reason = "no bearer token" if presented is None else "a wrong bearer token"
        log.warning("refused %s %s from %s: %s", request.method, request.path, peer, reason)
        return unauthorized(f"{request.method} {request.path} needs the service's bearer token")

    return guard


def warn_if_open(what: str, token: SecretStr | None, variable: str) -> None:
    """Say at start that ``what`` takes any caller when no token was set (``variable`` sets one)."""
    if token is None:
        log.warning(
            "%s takes any caller: no bearer token set (%s; `rollstream up` sets one)",
            what,
            variable,
        )


def auth_headers(token: SecretStr | None) -> dict[str, str]:
    """The Authorization header a client sends with ``token`` (none without one)."""
    if token is None:
        return {}
    return {"Authorization": f"Bearer {token.get_secret_value()}"}


def token_file(path: Path) -> SecretStr:
    """The token kept in ``path``, made (32 random bytes, URL-safe) with mode 0600 if missing.

    A directory made for it is private (0700).

    An existing file readable by others is refused (its token may have been read), an empty
    one too (it would let any caller in).
    """
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigurationError(
                f"{path} is readable by others (mode {mode:o}): its token may have been read;"
                " chmod 600 it, or delete it to have a new one made"
            )
        kept = path.read_text().strip()
        if not kept:  # Authorization: Bearer would pass
            raise ConfigurationError(f"{path} is empty: delete it to have a token made")
        return SecretStr(kept)
    make_directory(path.parent)  # private: it holds the session journals beside the key too
    made = secrets.token_urlsafe(32)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(made + "\n")
    try:
        os.link(partial, path)  # whole or not at all; another process's token may win the race
    except FileExistsError:
        return token_file(path)
    finally:
        partial.unlink()
    return SecretStr(made)
