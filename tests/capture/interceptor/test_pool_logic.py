"""The worker pool's pure parts: assignment, metrics merging, request heads, worker settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.capture.interceptor.pool import InterceptorPool, registered_sessions
from rollstream.capture.interceptor.pool_affinity import Affinity, hashed_worker
from rollstream.capture.interceptor.pool_metrics import merge_metrics, parse_metrics, render
from rollstream.capture.interceptor.pool_router import read_head, session_in_head
from rollstream.capture.interceptor.pool_worker import WorkerProcess, merged_env, settings_env
from rollstream.capture.interceptor.registry import SessionRegistry
from rollstream.capture.interceptor.settings import InterceptorSettings
from rollstream.capture.node.service import session_base_url
from rollstream.capture.publisher.client import PublisherSettings
from rollstream.errors import ConfigurationError
from rollstream.settings import KafkaSettings, StatePaths

# --- assignment --------------------------------------------------------------------------------


def test_new_sessions_go_to_the_least_loaded_worker_and_stay_there() -> None:
    affinity = Affinity(3)
    for session in ("a", "b", "c", "d"):
        affinity.assign(session, affinity.choose(session))
    assert [affinity.assigned(s) for s in "abcd"] == [0, 1, 2, 0]
    assert affinity.choose("b") == 1  # registered again: the same worker
    affinity.forget("b")
    assert affinity.loads == [2, 0, 1]
    assert affinity.choose("e") == 1
    assert affinity.choose("e", up=[0, 2]) == 2  # worker 1 is down
    assert affinity.worker_of("a") == 0
    assert affinity.worker_of("unknown") == hashed_worker("unknown", 3)
    assert affinity.worker_of(None) == 0
    with pytest.raises(ValueError):
        affinity.assign("x", 3)


@settings(max_examples=200, deadline=None)
@given(
    workers=st.integers(1, 8),
    ops=st.lists(st.tuples(st.booleans(), st.text(min_size=1, max_size=6)), max_size=60),
)
def test_assignment_stays_balanced_and_the_hash_is_stable(
    workers: int, ops: list[tuple[bool, str]]
) -> None:
    affinity = Affinity(workers)
    for register, session in ops:
        if register:
            affinity.assign(session, affinity.choose(session))
        else:
            affinity.forget(session)
        assert sum(affinity.loads) == len(affinity)
        assert all(load >= 0 for load in affinity.loads)
    # Registrations alone (no forgetting) keep loads within one of each other.
    fresh = Affinity(workers)
    for _, session in ops:
        fresh.assign(session, fresh.choose(session))
    assert max(fresh.loads) - min(fresh.loads) <= 1
    for _, session in ops:
        expected = affinity.assigned(session)
        if expected is None:
            expected = hashed_worker(session, workers)
        assert affinity.worker_of(session) == expected
        assert 0 <= hashed_worker(session, workers) < workers


def test_assignments_come_back_from_the_workers_registries(tmp_path: Path) -> None:
    journal = tmp_path / "w0.txt"
    registry = SessionRegistry(journal)
    for session in ("s1", "s2", "s3"):
        registry.register(session, "exact" if session == "s2" else None)
    registry.forget("s1")
    assert registered_sessions(journal) == ["s2", "s3"]
    assert registered_sessions(tmp_path / "none.txt") == []


# --- metrics -----------------------------------------------------------------------------------

W0 = """# TYPE rollstream_calls_total counter
rollstream_calls_total 3
# TYPE rollstream_calls_in_flight gauge
rollstream_calls_in_flight 1
# TYPE rollstream_policy_version gauge
rollstream_policy_version 4
# TYPE rollstream_broker_connected gauge
rollstream_broker_connected 1
"""
W1 = W0.replace("calls_total 3", "calls_total 5").replace("version 4", "version 2")
W1 = W1.replace("connected 1", "connected 0").replace("in_flight 1", "in_flight 2")


def test_metrics_sum_amounts_and_keep_states_with_one_line_per_worker() -> None:
    merged = merge_metrics([W0, None, W1])
    values = {f"{s.name}{s.labels}": s.value for family in merged.values() for s in family.samples}
    assert values["rollstream_calls_total"] == 8
    assert values["rollstream_calls_in_flight"] == 3
    assert values["rollstream_policy_version"] == 4  # the newest, not a sum
    assert values["rollstream_broker_connected"] == 0  # 1 only when all are connected
    assert values['rollstream_calls_total{worker="0"}'] == 3
    assert values['rollstream_calls_total{worker="2"}'] == 5
    assert not any('worker="1"' in key for key in values)  # it did not answer
    text = render(merged)
    assert text.count("# TYPE rollstream_calls_total counter") == 1
    assert 'rollstream_calls_total{worker="2"} 5\n' in text
    # What we render reads back the same.
    assert (
        parse_metrics(text)["rollstream_calls_total"].samples
        == merged["rollstream_calls_total"].samples
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10**9), min_size=3, max_size=3), min_size=1, max_size=6))
def test_summed_metrics_are_the_sum_of_the_workers_lines(values: list[list[int]]) -> None:
    names = ("rollstream_calls_total", "rollstream_spool_bytes", "rollstream_records_lost_total")
    texts: list[str | None] = [
        "".join(f"# TYPE {n} counter\n{n} {v}\n" for n, v in zip(names, row, strict=True))
        for row in values
    ]
    merged = parse_metrics(render(merge_metrics(texts)))
    for k, name in enumerate(names):
        samples = merged[name].samples
        assert samples[0].labels == "" and samples[0].value == sum(row[k] for row in values)
        assert [s.value for s in samples[1:]] == [row[k] for row in values]


# --- request heads -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "session"),
    [
        (b"POST /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer s-1\r\n\r\n{}", "s-1"),
        (b"POST /v1/messages HTTP/1.1\r\nx-api-key: s-2\r\nHost: x\r\n\r\n", "s-2"),
        (b"POST /s/s-3/v1/responses HTTP/1.1\r\nAuthorization: Bearer other\r\n\r\n", "s-3"),
        (b"POST /v1beta/models/m:generateContent?key=s-4 HTTP/1.1\r\n\r\n", "s-4"),
        (b"GET http://api.example/v1/models HTTP/1.1\r\nx-rollstream-session: s-5\r\n\r\n", "s-5"),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", None),
        (b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n", None),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", None),
        (b"\x16\x03\x01\x02\x00", None),  # TLS, not HTTP
        # Cut short: only whole header lines count.
        (b"POST /v1/x HTTP/1.1\r\nAuthorization: Bearer s-6\r\nx-api-key: par", "s-6"),
        (b"POST /v1/x HTTP/1.1\r\nAuthorization: Bear", None),
    ],
)
def test_the_session_of_a_request_head(head: bytes, session: str | None) -> None:
    assert session_in_head(head) == session


_SESSION = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?&=%+#"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    session=_SESSION,
    where=st.sampled_from(["bearer", "x-api-key", "header", "path"]),
    body=st.binary(max_size=3000),
    cuts=st.lists(st.integers(1, 400), max_size=20),
)
def test_reading_the_head_loses_no_byte_and_finds_the_session(
    session: str, where: str, body: bytes, cuts: list[int]
) -> None:
    path = f"/s/{session}/v1/chat/completions" if where == "path" else "/v1/chat/completions"
    header = {
        "bearer": f"Authorization: Bearer {session}\r\n",
        "x-api-key": f"x-api-key: {session}\r\n",
        "header": f"x-rollstream-session: {session}\r\n",
        "path": "",
    }[where]
    data = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{header}content-length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def scenario() -> tuple[bytes, bytes]:
        reader = asyncio.StreamReader()
        start = 0
        for cut in cuts:  # the bytes arrive in arbitrary pieces
            reader.feed_data(data[start : start + cut])
            start += cut
        reader.feed_data(data[start:])
        reader.feed_eof()
        head = await read_head(reader, limit=1024)
        return head, await reader.read()

    head, rest = asyncio.run(scenario())
    assert head + rest == data
    assert session_in_head(head) == session


# --- workers' settings -------------------------------------------------------------------------


def test_a_worker_gets_every_setting_through_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = InterceptorSettings(
        upstream="http://up:1", port=0, strict_sessions=True, tokenizer=tmp_path, family="qwen3"
    )
    env = merged_env({"ROLLSTREAM_INTERCEPTOR_FAMILY": "stale"}, settings_env(settings))
    assert "ROLLSTREAM_INTERCEPTOR_UPSTREAM_API_KEY" not in env  # None: unset
    for key, value in env.items():
        if key.startswith("ROLLSTREAM_"):
            monkeypatch.setenv(key, value)
    assert InterceptorSettings() == settings


def test_no_two_workers_share_a_spool_a_registry_or_a_port(tmp_path: Path) -> None:
    paths = StatePaths(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    settings = InterceptorSettings(workers=2, port=8100)
    for publisher in (PublisherSettings(), PublisherSettings(spool_dir=tmp_path / "spool")):
        pool = InterceptorPool(settings, KafkaSettings(bootstrap_servers="h:1"), publisher, paths)
        workers = [WorkerProcess(i, "127.0.0.1", 9000 + i, 9100 + i, f"p-w{i}") for i in (0, 1)]
        envs = [pool._env(w) for w in workers]
        assert {e["ROLLSTREAM_INTERCEPTOR_STATE_NAME"] for e in envs} == {"p-w0", "p-w1"}
        assert {e["ROLLSTREAM_INTERCEPTOR_PORT"] for e in envs} == {"9000", "9001"}
        assert all(e["ROLLSTREAM_INTERCEPTOR_WORKERS"] == "1" for e in envs)
        assert all(e["ROLLSTREAM_STATE_DIR"] == str(paths.state_dir) for e in envs)
        spools = {e.get("ROLLSTREAM_PUBLISHER_SPOOL_DIR") for e in envs}
        if publisher.spool_dir is None:  # each names its own: <state>/spool/<state name>
            assert spools == {None}
        else:
            assert spools == {str(tmp_path / "spool" / "p-w0"), str(tmp_path / "spool" / "p-w1")}
    with pytest.raises(ConfigurationError):
        InterceptorPool(InterceptorSettings(), KafkaSettings(bootstrap_servers="h:1"))


def test_a_restarted_pool_gets_its_workers_ports_back(tmp_path: Path) -> None:
    paths = StatePaths(state_dir=tmp_path)
    pool = InterceptorPool(
        InterceptorSettings(workers=3, port=0), KafkaSettings(bootstrap_servers="h:1"), paths=paths
    )
    state = pool._state_file("p")
    first = pool._ports(state)
    assert len({p for pair in first for p in pair}) == 6
    state.write_text(f'{{"workers": {[list(p) for p in first]}}}')
    assert pool._ports(state) == first
    state.write_text("{broken")
    assert len(pool._ports(state)) == 3


# --- the node's side ---------------------------------------------------------------------------


def test_the_node_calls_the_worker_on_the_host_it_knows_the_pool_by() -> None:
    pooled = {"registered": True, "worker": 1, "url": "http://127.0.0.1:41234"}
    assert session_base_url("http://interceptor:8100", pooled) == "http://interceptor:41234"
    assert session_base_url("http://127.0.0.1:8100", pooled) == "http://127.0.0.1:41234"
    assert session_base_url("http://[::1]:8100/root", pooled) == "http://[::1]:41234/root"
    # One interceptor: its base URL may be a mapped port; the node keeps its own.
    single = {"registered": True, "url": "http://127.0.0.1:8100"}
    assert session_base_url("http://localhost:18100", single) is None
    assert session_base_url("http://localhost:18100", {}) is None
