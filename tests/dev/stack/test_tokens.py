"""The stack's tokens: kept once with mode 0600, each service given only its own."""

from __future__ import annotations

import stat
from pathlib import Path

from rollstream.dev.stack.components import plan
from rollstream.dev.stack.settings import StackSettings
from rollstream.dev.stack.tokens import StackTokens, tokens_dir


def test_tokens_are_made_once_private_and_distinct(tmp_path: Path) -> None:
    first = StackTokens.kept(tmp_path)
    assert StackTokens.kept(tmp_path) == first  # the next `up` keeps them
    files = sorted(tokens_dir(tmp_path).iterdir())
    assert [f.name for f in files] == ["backend-admin", "interceptor-admin", "node-api"]
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    values = {first.interceptor, first.node, first.backend}
    assert len({v.get_secret_value() for v in values}) == 3


def test_each_service_gets_the_tokens_it_serves_or_sends_and_no_other(tmp_path: Path) -> None:
    tokens = StackTokens.kept(tmp_path)
    admin = tokens.interceptor.get_secret_value()
    given = {
        c.name: tokens.env(c.name)
        for c in plan(StackSettings(backend_port=0, interceptor_port=0, admin_port=0, node_port=0))
    }
    assert given == {
        "backend": {"ROLLSTREAM_BACKEND_ADMIN_TOKEN": tokens.backend.get_secret_value()},
        "interceptor": {"ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN": admin},
        # The consumers serve nothing and call no control plane; the scorer runs policy code.
        "reconstructor": {},
        "scorer": {},
        "node": {
            "ROLLSTREAM_NODE_API_TOKEN": tokens.node.get_secret_value(),
            "ROLLSTREAM_NODE_INTERCEPTOR_TOKEN": admin,
        },
    }
