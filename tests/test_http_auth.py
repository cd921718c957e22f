"""Bearer tokens on a real aiohttp server on 127.0.0.1: what passes, what is refused and how."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from rollstream.dev.backend.settings import BackendSettings
from rollstream.errors import ConfigurationError
from rollstream.http_auth import auth_headers, bearer_middleware, matches, token_file
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.node.settings import NodeSettings
from rollstream.settings import env_name

TOKEN = SecretStr("control-token-0123456789")
METRICS = SecretStr("metrics-token-9876543210")
Ask = Callable[..., Awaitable[tuple[int, object]]]


@pytest.fixture
async def ask() -> AsyncIterator[Ask]:
    """``await ask(method, path, token)``: the status and body a guarded server answers."""
    effects: list[str] = []

    async def effect(request: web.Request) -> web.Response:
        effects.append(request.path)
        return web.json_response({"done": request.path})

    app = web.Application(middlewares=[bearer_middleware(TOKEN, metrics_token=METRICS)])
    app.router.add_get("/health", effect)
    app.router.add_get("/metrics", effect)
    app.router.add_post("/admin/pause", effect)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    async with aiohttp.ClientSession(str(server.make_url(""))) as session:

        async def call(
            method: str, path: str, token: SecretStr | None = None, header: str | None = None
        ) -> tuple[int, object]:
            headers = auth_headers(token) if header is None else {"Authorization": header}
            async with session.request(method, path, headers=headers) as response:
                body = await response.json() if response.content_type == "application/json" else ""
                return response.status, body

        call.effects = effects  # type: ignore[attr-defined]
        yield call
    await server.close()


async def test_control_routes_need_the_token_and_health_does_not(ask: Ask) -> None:
    assert await ask("GET", "/health") == (200, {"done": "/health"})
    status, body = await ask("POST", "/admin/pause")
    assert status == 401
    assert body == {
        "error": {
            "type": "unauthorized",
            "message": "POST /admin/pause needs the service's bearer token",
        }
    }
    assert (await ask("POST", "/admin/pause", SecretStr("control-token-012345678")))[0] == 401
    assert await ask("POST", "/admin/pause", TOKEN) == (200, {"done": "/admin/pause"})
    assert ask.effects == ["/health", "/admin/pause"]  # type: ignore[attr-defined]


async def test_metrics_take_their_own_token_or_the_control_one(ask: Ask) -> None:
    assert (await ask("GET", "/metrics"))[0] == 401
    assert (await ask("GET", "/metrics", SecretStr("another")))[0] == 401
    assert (await ask("GET", "/metrics", TOKEN))[0] == 200
    assert (await ask("GET", "/metrics", METRICS))[0] == 200
    assert (await ask("POST", "/admin/pause", METRICS))[0] == 401  # a scraper controls nothing


async def test_a_refusal_is_logged_without_the_token(
    ask: Ask, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rollstream.http_auth"):
        await ask("POST", "/admin/pause", header="Bearer control-token-0123456788")
    assert "refused POST /admin/pause" in caplog.text
    assert "control-token" not in caplog.text


SECRET = TOKEN.get_secret_value()


def _near_misses(secret: str) -> st.SearchStrategy[str]:
    """Values that are not ``secret``: one character changed, dropped or added, a prefix."""
    at = st.integers(0, len(secret) - 1)
    return st.one_of(
        at.map(lambda i: secret[:i] + ("x" if secret[i] != "x" else "y") + secret[i + 1 :]),
        at.map(lambda i: secret[:i] + secret[i + 1 :]),
        st.sampled_from("0aZ-").map(lambda extra: secret + extra),
        at.map(lambda i: secret[:i]),
    )


#: (header, whether it must pass): the oracle is RFC 6750's form, not the code under test.
HEADERS = st.one_of(
    # the token under the scheme, in any case, after one or more spaces
    st.tuples(
        st.sampled_from(["Bearer", "bearer", "BEARER"]), st.integers(1, 3), st.just(SECRET)
    ).map(lambda t: (f"{t[0]}{' ' * t[1]}{t[2]}", True)),
    st.none().map(lambda _: (None, False)),
    # anything printable that does not hold the token
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)
    .filter(lambda text: SECRET not in text)
    .map(lambda text: (text, False)),
    # the token without the scheme, under another scheme, or glued to it
    st.sampled_from([SECRET, f"Basic {SECRET}", f"Token {SECRET}", f"Bearer{SECRET}"]).map(
        lambda header: (header, False)
    ),
    # near misses of the token under the right scheme
    _near_misses(SECRET).map(lambda value: (f"Bearer {value}", False)),
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=HEADERS)
async def test_only_the_token_under_the_bearer_scheme_passes(
    ask: Ask, case: tuple[str | None, bool]
) -> None:
    header, must_pass = case
    status, _ = await ask("POST", "/admin/pause", header=header)
    assert status == (200 if must_pass else 401), header


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_token_guards_nothing_open_and_is_refused_where_it_is_set(
    empty: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not matches("Bearer ", SecretStr(empty))
    assert not matches(f"Bearer {empty}", SecretStr(empty))
    with pytest.raises(ConfigurationError, match="empty bearer token"):
        bearer_middleware(SecretStr(empty))
    with pytest.raises(ConfigurationError, match="empty bearer token"):
        bearer_middleware(TOKEN, metrics_token=SecretStr(empty))
    kept = tmp_path / "admin.token"
    kept.write_text(empty + "\n")
    kept.chmod(0o600)
    with pytest.raises(ConfigurationError, match="is empty"):
        token_file(kept)
    # every service's token settings, set from an unset shell variable
    for cls, name in (
        (InterceptorSettings, "admin_token"),
        (InterceptorSettings, "metrics_token"),
        (NodeSettings, "api_token"),
        (NodeSettings, "metrics_token"),
        (BackendSettings, "admin_token"),
    ):
        monkeypatch.setenv(env_name(cls, name), empty)
        with pytest.raises(ValidationError, match="empty bearer token"):
            cls()
        monkeypatch.delenv(env_name(cls, name))


async def test_without_a_token_the_routes_stay_open() -> None:
    async def effect(_: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application(middlewares=[bearer_middleware(None)])
    app.router.add_post("/admin/pause", effect)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/admin/pause")) as r,
    ):
        assert r.status == 200
    await server.close()


def test_a_generated_token_is_kept_with_mode_0600_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "admin.token"
    made = token_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The directory made for it is private too: the interceptor's session journals (strict
    # mode's credentials) live beside its key (before: 0755, from the default umask).
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(made.get_secret_value()) >= 40 and "admin" not in repr(made)
    assert token_file(path).get_secret_value() == made.get_secret_value()
    assert [p.name for p in path.parent.iterdir()] == ["admin.token"]
    os.chmod(path, 0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        token_file(path)
