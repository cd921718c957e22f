"""Generated keys, session headers, path sessions and bodies through the addon's request hook.

Never an exception out of the hook; every record is under the session the rules give (a named
session, else a registered key, else the key's keyed hash; strict mode: ``anonymous`` for a
session nobody registered); and no credential is in any record: an unregistered key, or a key
sent beside a named session, appears in none.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.test import tflow

from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.recording import ANONYMOUS
from rollstream.interceptor.registry import RegistryError
from rollstream.interceptor.sessions import SESSION_HEADER, keyed_session
from rollstream.interceptor.settings import InterceptorSettings
from tests.interceptor.published import Published
from tests.strategies import json_values

SECRET = b"fuzz-deployment-secret"
KEY_CHARS = st.characters(codec="ascii", categories=("L", "N"), include_characters="-_.~+/=")
SESSION_CHARS = st.characters(codec="ascii", categories=("L", "N"), include_characters="-_.@:")
PATHS = {
    "/v1/chat/completions": "bearer",
    "/v1/responses": "bearer",
    "/v1/messages": "x-api-key",
    "/v1beta/models/gemini-x:generateContent": "x-goog-api-key",
}
bodies = st.one_of(
    st.just({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
    st.just({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    st.dictionaries(st.sampled_from(["model", "messages", "input", "contents"]), json_values()),
    st.binary(max_size=100),
)


def _flow(path: str, headers: list[tuple[str, str]], body: Any) -> http.HTTPFlow:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    fields = http.Headers([(k.encode(), v.encode()) for k, v in headers])
    request = http.Request.make("POST", f"http://127.0.0.1:8100{path}", content, fields)
    return tflow.tflow(req=request)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.text(KEY_CHARS, min_size=12, max_size=64).map(lambda k: "sk-" + k),
    path=st.sampled_from(sorted(PATHS)),
    in_query=st.booleans(),
    named=st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["header", "path"]), st.text(SESSION_CHARS, min_size=1)),
    ),
    registered=st.booleans(),
    strict=st.booleans(),
    body=bodies,
)
async def test_every_call_is_recorded_under_its_session_and_no_credential_anywhere(
    key: str,
    path: str,
    in_query: bool,
    named: tuple[str, str] | None,
    registered: bool,
    strict: bool,
    body: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    published = Published()
    addon = RollstreamAddon(InterceptorSettings(strict_sessions=strict), published, hash_key=SECRET)
    headers: list[tuple[str, str]] = []
    target = path
    if in_query:
        target = f"{path}?alt=sse&key={quote(key, safe='')}"
    elif PATHS[path] == "bearer":
        headers.append(("authorization", f"Bearer {key}"))
    else:
        headers.append((PATHS[path], key))
    chosen = key
    if named is not None:
        how, chosen = named
        if how == "header":
            headers.append((SESSION_HEADER, chosen))
        else:
            target = f"/s/{chosen}{target}"
    if registered:
        try:
            addon.sessions.register(chosen, None)
        except RegistryError:
            registered = False  # an id the registry refuses: it stays unregistered
    await addon.request(_flow(target, headers, body))
    addon.record_unfinished("fuzz")  # the calls that went upstream: recorded as cut

    [record] = published.records
    if strict and not registered:
        expected = ANONYMOUS
    elif named is not None or registered:
        expected = chosen
    else:
        expected = keyed_session(SECRET, key)
    assert record.session_id == expected
    dumped = record.model_dump_json()
    if expected != key:
        assert key not in dumped  # the credential: nowhere, not even as the session
    assert key not in caplog.text
