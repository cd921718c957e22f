"""Generated requests at the node's API and generated task documents.

Without the token every request is answered 401 before any handler runs (the stand-in node
has nothing a handler could use). Any document is either a task or refused with the reasons
(ValueError, which the API answers as a 400): never another exception.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from rollstream.producers.node.api import NodeApi, task_from_document
from rollstream.producers.node.settings import NodeSettings
from rollstream.settings import KafkaSettings
from tests.strategies import PATH_CHARS, header_values, json_values

TOKEN = "node-fuzz-token-0123456789abcdef"
documents = st.one_of(
    json_values(),
    st.fixed_dictionaries(
        {"instruction": st.text(max_size=30)},
        optional={
            "harness": st.sampled_from(["command", "python", "codex", "nope", ""]) | json_values(),
            "samples": st.integers(-3, 5) | json_values(),
            "workspace": st.fixed_dictionaries(
                {"kind": st.sampled_from(["inline", "git", "empty", "x"])},
                optional={"files": st.dictionaries(st.text(PATH_CHARS, max_size=20), st.text())},
            ),
            "metadata": st.dictionaries(st.text(max_size=20), st.text(max_size=20)),
            "evaluator": json_values(),
            "task_id": st.text(max_size=20) | json_values(),
        },
    ),
)

Client = TestClient[Any, Any]


@pytest.fixture
async def api() -> AsyncIterator[Client]:
    settings_ = NodeSettings(api_token=SecretStr(TOKEN))
    # No handler may reach further than the settings (the producer is made at first use).
    node = cast(Any, SimpleNamespace(settings=settings_, kafka=KafkaSettings()))
    async with TestClient(TestServer(NodeApi(node).app(), host="127.0.0.1")) as client:
        yield client


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.one_of(
        st.sampled_from(["/tasks", "/tasks/t-1", "/metrics", "/tasks/", "/TASKS"]),
        # /health is open, and the stand-in has nothing to answer it with.
        st.text(PATH_CHARS, max_size=50).map(lambda t: "/" + t).filter(lambda p: p != "/health"),
    ),
    authorization=st.one_of(
        st.none(),
        st.sampled_from([f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", TOKEN, "Bearer "]),
        header_values(60),
    ),
    body=st.one_of(st.none(), st.binary(max_size=300), documents.map(yaml.safe_dump)),
)
async def test_without_the_token_every_request_is_refused_before_any_handler(
    api: Client, method: str, path: str, authorization: str | None, body: Any
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    data = None if body is None else io.BytesIO(body if isinstance(body, bytes) else body.encode())
    base = str(api.make_url("")).rstrip("/")
    async with api.session.request(method, f"{base}{path}", headers=headers, data=data) as reply:
        await reply.read()
        status = reply.status
    assert status == 401, (method, path, authorization)


@settings(max_examples=300, deadline=None)
@given(doc=documents)
def test_any_document_is_a_task_or_refused_with_its_reasons(doc: Any) -> None:
    try:
        task = task_from_document(doc)
    except (ValueError, ValidationError):  # the API's 400, with str(exc) as the reason
        return
    assert task.task_id and task.group_id and task.samples >= 1
