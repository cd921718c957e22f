"""The upstream deadline's pieces without a network (the whole path: test_interceptor)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from mitmproxy.proxy.layers.http import _http1
from mitmproxy.test import tflow

from rollstream.interceptor import errorpages
from rollstream.interceptor.errorpages import TIMEOUT_PREFIX
from rollstream.interceptor.timeouts import (
    TIMEOUT_HEADER,
    UpstreamDeadlines,
    gateway_timeout,
    upstream_cut,
)


def test_the_forged_answer_is_a_complete_504_that_closes_the_connection() -> None:
    head, _, body = gateway_timeout("too slow").partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert status == "HTTP/1.1 504 Gateway Timeout"
    assert headers["connection"] == "close" and headers[TIMEOUT_HEADER] == "1"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body)["error"]["message"] == "too slow"


def test_a_connect_given_up_is_answered_504_by_mitmproxy() -> None:
    errorpages.install()
    raw = _http1.make_error_response(502, TIMEOUT_PREFIX + "no headers within 1 s")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 504 ")
    assert json.loads(body)["error"]["message"] == "rollstream: no headers within 1 s"
    assert _http1.make_error_response(502, "refused").startswith(b"HTTP/1.1 502 ")


async def test_deadlines_are_stopped_and_need_a_proxy_to_cut() -> None:
    deadlines = UpstreamDeadlines(0.05)
    answered, orphan = tflow.tflow(), tflow.tflow()
    answered.response = None
    orphan.response = None
    deadlines.start(answered)
    deadlines.start(orphan)
    assert len(deadlines) == 2
    deadlines.stop(answered)
    assert len(deadlines) == 1
    await asyncio.sleep(0.1)
    # Without mitmproxy's master there is nothing to cut through: the call is left alone.
    assert len(deadlines) == 0 and upstream_cut(orphan) is None


async def test_a_call_not_yet_connected_is_looked_at_again() -> None:
    deadlines = UpstreamDeadlines(0.01)
    proxyserver = SimpleNamespace(connections={})  # the client's connection is not there (yet)
    deadlines.master = SimpleNamespace(addons=SimpleNamespace(get=lambda _: proxyserver))
    flow = tflow.tflow()
    flow.response = None
    flow.live = True
    deadlines.start(flow)
    await asyncio.sleep(0.05)
    assert len(deadlines) == 1 and upstream_cut(flow) is None  # re-armed, not cut
    deadlines.stop(flow)
    assert len(deadlines) == 0
