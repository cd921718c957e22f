"""``rollstream interceptor --workers 2``: real worker processes, real Kafka, the scripted backend.

Sessions stay on their worker whichever address they use; pause, metrics and health cover every
worker; a killed worker comes back on its port with its sessions; SIGTERM stops everything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from rollstream.host import free_port
from rollstream.http_auth import token_file
from rollstream.interceptor.pool_affinity import hashed_worker
from rollstream.interceptor.sessions import keyed_session
from rollstream.lifecycle import die_with_parent
from rollstream.schemas import CallRecord, CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.interceptor.pool_stack import (
    admin,
    chat,
    client,
    interceptor_pool,
    metrics,
    scripted_upstream,
    summed,
)
from tests.kafka_reading import read_records
from tests.producers.node.helpers import alive, wait_dead
from tests.waiting import until

pytestmark = pytest.mark.integration


@pytest.fixture
async def upstream(tmp_path: Path) -> AsyncIterator[str]:
    async with scripted_upstream(tmp_path / "backend") as url:
        yield url


async def _calls(kafka: KafkaSettings, expected: int) -> list[CallRecord]:
    topic = TopicNames(kafka.topic_prefix).events
    return await read_records(kafka, topic, CallRecord, expected, settle_s=1.0)


async def test_sessions_stay_on_their_worker_by_any_address(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, upstream: str
) -> None:
    async with interceptor_pool(kafka_settings, upstream) as pool, client() as http:
        _, a = await admin(http, f"{pool.admin_url}/sessions/s-a", "PUT")
        _, b = await admin(http, f"{pool.admin_url}/sessions/s-b", "PUT", {"context": "ordinary"})
        assert {a["worker"], b["worker"]} == {0, 1}  # least loaded: one each
        assert a["registered"] and a["url"] == pool.workers[a["worker"]].url
        # Direct to the worker (as the node launches harnesses) and through the router.
        for session, reply in (("s-a", a), ("s-b", b)):
            for base in (reply["url"], pool.url, reply["url"], pool.url):
                status, body = await chat(http, base, session)
                assert status == 200, body
        loose = next(f"loose-{i}" for i in range(50) if hashed_worker(f"loose-{i}", 2) == 1)
        assert (await chat(http, pool.url, loose))[0] == 200  # unregistered: the hash decides

        for session, reply in (("s-a", a), ("s-b", b)):
            _, view = await admin(http, f"{pool.admin_url}/sessions/{session}")
            assert (view["calls_recorded"], view["worker"]) == (4, reply["worker"])
            other = pool.workers[1 - reply["worker"]]
            _, elsewhere = await admin(http, f"{other.admin_url}/sessions/{session}")
            assert elsewhere["calls_recorded"] == 0
        # Unregistered, its key is recorded as its keyed hash: under the state directory's
        # secret, which every worker shares.
        secret = token_file(pool.paths.state_dir / "sessions" / "hash.key")
        keyed = keyed_session(secret.get_secret_value().encode(), loose)
        _, view = await admin(http, f"{pool.workers[1].admin_url}/sessions/{keyed}")
        assert view["calls_recorded"] == 1
        _, view = await admin(http, f"{pool.admin_url}/sessions/{loose}")
        assert view["calls_recorded"] == 0

        values = await metrics(http, pool.admin_url)
        assert summed(values, "rollstream_calls_total") == 9
        assert values[f'rollstream_calls_total{{worker="{a["worker"]}"}}'] == 4
        assert values[f'rollstream_calls_total{{worker="{b["worker"]}"}}'] == 5
        assert summed(values, "rollstream_pool_connections_routed_total") == 5
        assert summed(values, "rollstream_pool_sessions_assigned") == 2
        # One label set per family: no unlabelled total beside the workers' lines.
        assert "rollstream_calls_total" not in values
        status, health = await admin(http, f"{pool.admin_url}/health")
        assert status == 200 and health["status"] == "ok"
        assert [w["status"] for w in health["workers"]] == ["ok", "ok"]
        _, gone = await admin(http, f"{pool.admin_url}/sessions/s-a", "DELETE")
        assert gone["registered"] is False and gone["worker"] == a["worker"]

    records = await _calls(kafka_settings, 9)
    assert len(records) == 9 and len({r.call_id for r in records}) == 9  # each call once
    assert not any(loose in r.model_dump_json() for r in records)
    for session, count in (("s-a", 4), ("s-b", 4), (keyed, 1)):
        mine = [r for r in records if r.session_id == session]
        assert [r.seq for r in mine] == list(range(count))  # in order, one ledger each
        assert all(r.status is CallStatus.OK for r in mine)


async def test_a_pause_holds_every_worker_until_resumed(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, upstream: str
) -> None:
    async with interceptor_pool(kafka_settings, upstream) as pool, client() as http:
        urls = {}
        for session in ("p-a", "p-b"):
            urls[session] = (await admin(http, f"{pool.admin_url}/sessions/{session}", "PUT"))[1]
        status, paused = await admin(
            http, f"{pool.admin_url}/admin/pause", "POST", {"drain_timeout_s": 2}
        )
        assert status == 200 and paused["paused"] and paused["drained"]
        assert paused["in_flight"] == 0 and [w["paused"] for w in paused["workers"]] == [1, 1]
        held = [asyncio.create_task(chat(http, r["url"], s)) for s, r in urls.items()]
        held.append(asyncio.create_task(chat(http, pool.url, "p-a")))
        await asyncio.sleep(1.0)
        assert not any(t.done() for t in held)
        values = await metrics(http, pool.admin_url)
        assert values['rollstream_paused{worker="0"}'] == values['rollstream_paused{worker="1"}']
        assert values['rollstream_paused{worker="0"}'] == 1  # held calls are not in flight yet
        _, health = await admin(http, f"{pool.admin_url}/health")
        assert health["paused"] and all(w["paused"] for w in health["workers"])
        assert (await admin(http, f"{pool.admin_url}/admin/policy-version", "POST", {}))[0] == 400
        _, version = await admin(
            http, f"{pool.admin_url}/admin/policy-version", "POST", {"version": 7}
        )
        assert version == {"policy_version": 7, "unreachable": []}
        assert (await admin(http, f"{pool.admin_url}/admin/resume", "POST"))[1]["paused"] is False
        answers = await asyncio.wait_for(asyncio.gather(*held), 30)
        assert [status for status, _ in answers] == [200, 200, 200]
        values = await metrics(http, pool.admin_url)
        assert summed(values, "rollstream_calls_total") == 3
        assert summed(values, "rollstream_paused") == 0
        assert values['rollstream_policy_version{worker="0"}'] == 7
        assert values['rollstream_policy_version{worker="1"}'] == 7
    records = await _calls(kafka_settings, 3)
    assert {r.policy_version for r in records} == {7}  # set while the calls were held


async def test_a_killed_worker_comes_back_on_its_port_with_its_sessions(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, upstream: str
) -> None:
    async with (
        interceptor_pool(kafka_settings, upstream, strict_sessions=True) as pool,
        client() as http,
    ):
        replies = {}
        for session in ("k-a", "k-b"):
            replies[session] = (await admin(http, f"{pool.admin_url}/sessions/{session}", "PUT"))[1]
        for session, reply in replies.items():
            for base in (reply["url"], pool.url):
                assert (await chat(http, base, session))[0] == 200
        # Recorded means published: wait until the broker has all four before the kill.
        await until(
            lambda: _metric(http, pool.admin_url, "rollstream_records_published_total", 4),
            what="four records published",
        )
        victim = pool.workers[replies["k-a"]["worker"]]
        port, pid = victim.port, victim.pid
        calls = f'rollstream_calls_total{{worker="{victim.index}"}}'
        before = (await metrics(http, pool.admin_url))[calls]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        # The other worker goes on meanwhile.
        assert (await chat(http, replies["k-b"]["url"], "k-b"))[0] == 200
        await until(lambda: victim.restarts == 1 and victim.up, timeout=60, what="a restart")
        assert victim.port == port and victim.pid != pid
        for base in (replies["k-a"]["url"], pool.url):  # still registered: accepted
            status, body = await chat(http, base, "k-a")
            assert status == 200, body
        assert (await chat(http, pool.url, "k-unknown"))[0] == 401  # strict mode holds
        values = await metrics(http, pool.admin_url)
        # Its new process counts from zero; the pool carries what the old one had counted.
        assert values[calls] >= before + 2
        assert summed(values, "rollstream_pool_worker_restarts_total") == 1
        assert values["rollstream_pool_workers_up"] == 2
        assert values['rollstream_pool_worker_up{worker="0"}'] == 1
        assert values['rollstream_pool_worker_up{worker="1"}'] == 1
    records = await _calls(kafka_settings, 8)
    assert len(records) == 8 and len({r.call_id for r in records}) == 8
    by_session = {s: sum(r.session_id == s for r in records) for s in ("k-a", "k-b")}
    assert by_session == {"k-a": 4, "k-b": 3}  # nothing recorded before the kill is lost


async def _metric(http: aiohttp.ClientSession, admin_url: str, name: str, at_least: float) -> bool:
    return summed(await metrics(http, admin_url), name) >= at_least


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # die_with_parent: a test run killed by a timeout leaves no pool behind.
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out, preexec_fn=die_with_parent)


async def test_sigterm_stops_the_pool_and_every_worker(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, upstream: str, tmp_path: Path
) -> None:
    port, admin_port = free_port(), free_port()
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
    }
    argv = [sys.executable, "-m", "rollstream", "interceptor", "--workers", "2"]
    argv += ["--upstream", upstream, "--port", str(port), "--admin-port", str(admin_port)]
    argv += ["--no-follow-policy", "--drain-timeout-s", "2"]
    log = tmp_path / "pool.log"
    process = _spawn(argv, env, log)
    try:
        async with client() as http:

            async def healthy() -> bool:
                assert process.poll() is None, log.read_text()[-3000:]
                try:
                    return (await admin(http, f"http://127.0.0.1:{admin_port}/health"))[0] == 200
                except aiohttp.ClientError:
                    return False

            await until(healthy, timeout=90, interval=0.2, what="the pool is healthy")
            _, health = await admin(http, f"http://127.0.0.1:{admin_port}/health")
            pids = [w["pid"] for w in health["workers"]]
            assert all(alive(pid) for pid in pids)
            # Registered first, as the node does: its key is then its session id.
            assert (await admin(http, f"http://127.0.0.1:{admin_port}/sessions/t-a", "PUT"))[
                0
            ] == 200
            assert (await chat(http, f"http://127.0.0.1:{port}", "t-a"))[0] == 200
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
        for pid in pids:  # no orphan left
            assert await wait_dead(pid, 10)
        assert "interceptor pool stopped; worker exit codes [0, 0]" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    [record] = await _calls(kafka_settings, 1)  # flushed by its worker on the way out
    assert record.session_id == "t-a"
