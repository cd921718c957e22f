"""The worker pool's pure parts: assignment, metrics merging, request heads, worker settings."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.errors import ConfigurationError
from rollstream.interceptor.pool import InterceptorPool, registered_sessions
from rollstream.interceptor.pool_affinity import Affinity, hashed_worker
from rollstream.interceptor.pool_metrics import (
    ScrapeCache,
    by_worker,
    parse_metrics,
    render,
)
from rollstream.interceptor.pool_router import read_head, session_in_head
from rollstream.interceptor.pool_worker import WorkerProcess, merged_env, settings_env
from rollstream.interceptor.registry import SessionRegistry
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import PublisherSettings
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
"""
W1 = W0.replace("calls_total 3", "calls_total 5").replace("in_flight 1", "in_flight 2")


def _values(text: str) -> dict[str, float]:
    return {f"{s.name}{s.labels}": s.value for f in parse_metrics(text).values() for s in f.samples}


def test_every_worker_sample_is_labelled_and_no_family_mixes_label_sets() -> None:
    cache = ScrapeCache()
    text = render(by_worker([cache.observe(0, W0), cache.observe(1, None), cache.observe(2, W1)]))
    assert _values(text) == {
        'rollstream_calls_total{worker="0"}': 3,
        'rollstream_calls_total{worker="2"}': 5,
        'rollstream_calls_in_flight{worker="0"}': 1,
        'rollstream_calls_in_flight{worker="2"}': 2,
        'rollstream_policy_version{worker="0"}': 4,
        'rollstream_policy_version{worker="2"}': 4,
    }  # worker 1 never answered: nothing of it; no unlabelled total beside the workers' lines
    assert text.count("# TYPE rollstream_calls_total counter") == 1
    assert 'rollstream_calls_total{worker="2"} 5\n' in text


def test_a_worker_that_misses_a_scrape_keeps_its_counters_and_drops_its_gauges() -> None:
    cache = ScrapeCache()
    cache.observe(0, W0)
    missed = _values(render(by_worker([cache.observe(0, None)])))
    assert missed == {'rollstream_calls_total{worker="0"}': 3}  # in flight: unknown, not 1


def test_a_restarted_worker_carries_its_count_under_its_new_one() -> None:
    cache = ScrapeCache()
    line = "# TYPE rollstream_calls_total counter\nrollstream_calls_total {}\n"

    def shown(text: str | None, restarts: int) -> float:
        [sample] = cache.observe(0, text, restarts)["rollstream_calls_total"].samples
        return sample.value

    assert shown(line.format(10), 0) == 10
    assert shown(None, 0) == 10  # down: its last count
    assert shown(line.format(12), 1) == 22  # restarted (the pool counted it): 10 + 12
    assert shown(line.format(3), 1) == 25  # lower than before without a count: restarted too
    assert shown(line.format(4), 1) == 26
    # A counter it stops reporting keeps its value rather than leaving the sum.
    assert shown("# TYPE rollstream_other_total counter\nrollstream_other_total 1\n", 1) == 26


def _counter(value: int) -> str:
    return f"# TYPE rollstream_calls_total counter\nrollstream_calls_total {value}\n"


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.lists(  # per worker: restarted, then counted calls, then answered the scrape or not
            st.tuples(st.booleans(), st.integers(0, 5), st.booleans()), min_size=3, max_size=3
        ),
        max_size=25,
    ),
    told=st.booleans(),
)
def test_the_workers_counters_never_go_down_and_lose_only_what_no_scrape_saw(
    steps: list[list[tuple[bool, int, bool]]], told: bool
) -> None:
    """``told``: the cache learns of restarts from the pool's count, else only from drops."""
    cache = ScrapeCache()
    count, restarts, counted, seen, lost = ([0] * 3 for _ in range(5))
    total = 0.0
    for step in steps:
        texts: list[str | None] = []
        for worker, (restarted, calls, answers) in enumerate(step):
            if restarted:  # what its process counted since its last scrape is gone with it
                lost[worker] += count[worker] - seen[worker]
                count[worker], seen[worker] = 0, 0
                restarts[worker] += 1
            count[worker] += calls
            counted[worker] += calls
            if answers:
                seen[worker] = count[worker]
            texts.append(_counter(count[worker]) if answers else None)
        shown = [cache.observe(w, t, restarts[w] if told else 0) for w, t in enumerate(texts)]
        family = by_worker(shown).get("rollstream_calls_total")
        values = {s.labels: s.value for s in family.samples} if family else {}
        assert total <= sum(values.values()) <= sum(counted)  # never down, never too much
        total = sum(values.values())
        for worker, (_, _, answers) in enumerate(step):
            if answers and told:  # all it counted but what it lost unseen
                assert values[f'{{worker="{worker}"}}'] == counted[worker] - lost[worker]


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


@pytest.mark.parametrize("by", ["file", "value"])
def test_a_worker_gets_the_kafka_password_as_its_pool_did(
    by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "interceptor"
    secret.write_text("s3cret-pw\n")
    given = {"sasl_password_file": secret} if by == "file" else {"sasl_password": "s3cret-pw"}
    kafka = KafkaSettings(
        bootstrap_servers="h:1",
        security_protocol="SASL_SSL",
        sasl_username="interceptor",
        **given,
    )
    pool = InterceptorPool(InterceptorSettings(workers=2), kafka, PublisherSettings())
    env = pool._env(WorkerProcess(0, "127.0.0.1", 9000, 9100, "p-w0"))
    if by == "file":  # the file, never what was read from it (both: "not both", refused)
        assert "ROLLSTREAM_SASL_PASSWORD" not in env
        assert env["ROLLSTREAM_SASL_PASSWORD_FILE"] == str(secret)
        assert not any("s3cret-pw" in value for value in env.values())
    for key in [k for k in os.environ if k.startswith("ROLLSTREAM_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("ROLLSTREAM_"):
            monkeypatch.setenv(key, value)
    assert KafkaSettings() == kafka  # as the worker reads its environment


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
