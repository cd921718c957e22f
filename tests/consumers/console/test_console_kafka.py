"""The console on a real broker: what it reads, what it serves, who may read and act."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from rollstream.consumers.console import Assets, Console, ConsoleSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.kafka.admin import TopicAdmin
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Scored, TopicNames
from rollstream.schemas.topics import TopicSpec
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.console.conftest import Publish
from tests.schemas.samples import SCORED
from tests.waiting import until

pytestmark = pytest.mark.integration

READ = SecretStr("read-token-0123456789")
CONTROL = SecretStr("control-token-0123456789")
SHAPE = SyntheticShape(turns=3, system_tokens=40, tool_result_tokens=8, completion_tokens=6)


def _scored(session_id: str, group: str, reward: float, strategy: str = "prefix_merge") -> Scored:
    trajectory = SCORED.trajectory.model_copy(
        update={
            "trajectory_id": f"{session_id}/{strategy}",
            "session_id": session_id,
            "group_id": group,
            "strategy": strategy,
            "segments": SCORED.trajectory.segments,
        }
    )
    return SCORED.model_copy(update={"trajectory": trajectory, "reward": reward})


@pytest.fixture
async def console(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, stub_assets: Assets
) -> AsyncIterator[Console]:
    settings = ConsoleSettings(port=0, token=READ, control_token=CONTROL)
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    async with Console(settings, kafka_settings, tokenizer, assets=stub_assets) as running:
        yield running


def _auth(token: SecretStr | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token.get_secret_value()}"}


async def _get(console: Console, path: str, token: SecretStr | None = READ) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base_url + path, headers=_auth(token)) as reply,
    ):
        return reply.status, await reply.json(content_type=None)


async def _post(
    console: Console, path: str, body: dict[str, Any], token: SecretStr | None = CONTROL
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(console.base_url + path, json=body, headers=_auth(token)) as reply,
    ):
        return reply.status, await reply.json(content_type=None)


async def test_sessions_calls_and_groups_are_read_from_the_topics(
    console: Console, publish: Publish, rollstream_topics: TopicNames
) -> None:
    for i in range(3):
        await publish(rollstream_topics.events, synthetic_session(f"s{i}", SHAPE).records)
    running = synthetic_session("s-running", SHAPE).records[:-1]  # no SessionEnded
    await publish(rollstream_topics.events, running)
    await publish(rollstream_topics.scored, [_scored("s0", "g", 1.0), _scored("s1", "g", 0.0)])

    async def fleet() -> dict[str, Any]:
        snap: dict[str, Any] = (await _get(console, "api/fleet"))[1]
        return snap

    async def settled() -> bool:
        snap = await fleet()
        return snap["totals"]["calls"] == 12 and any(
            group == "g" for _, group in console.rewards.groups
        )

    await until(settled, timeout=30, what="the console to read every record")
    snap = await fleet()
    assert snap["sessions"] == {"running": 1, "ended": {"completed": 3}}
    status, page = await _get(console, "api/sessions?status=completed&limit=2")
    assert status == 200 and page["total"] == 3 and len(page["items"]) == 2
    status, groups = await _get(console, "api/groups")
    [group] = groups["items"]
    assert sorted(m["reward"] for m in group["members"]) == [0.0, 1.0]
    assert [m["advantage"] for m in group["members"]] == pytest.approx([1.0, -1.0], rel=1e-4)
    status, rows = await _get(console, "api/sessions?task=smoke-task&limit=500")
    by_id = {r["session_id"]: r for r in rows["items"]}
    assert by_id["s0"]["reward"] == 1.0 and by_id["s0"]["trajectory_id"] == "s0/prefix_merge"
    assert by_id["s-running"]["status"] == "running" and by_id["s-running"]["calls"] == 3


async def test_a_trajectory_is_read_back_from_its_topic_when_opened(
    console: Console, publish: Publish, rollstream_topics: TopicNames, kafka_settings: KafkaSettings
) -> None:
    await publish(rollstream_topics.events, synthetic_session("s0", SHAPE).records)
    record = _scored("s0", "g", 1.0)
    await publish(rollstream_topics.scored, [record])
    await until(lambda: console.index.find("s0/prefix_merge", None), what="the index")
    # An id with a slash, as the reconstructor makes them, travels escaped in the path.
    status, view = await _get(console, "api/trajectories/s0%2Fprefix_merge")
    assert status == 200, view
    segments = record.trajectory.segments
    assert [s["tokens"]["id"] for s in view["segments"]] == [list(s.input_ids) for s in segments]
    assert [s["tokens"]["mask"] for s in view["segments"]] == [list(s.loss_mask) for s in segments]
    assert [c["call_id"] for c in view["calls"]] == [
        c.call_id for c in synthetic_session("s0", SHAPE).calls
    ]
    assert view["reward"] == 1.0 and view["other_topics"] == []
    # A replay's topic made after the console started is found, and offered for comparison.
    replayed = f"{rollstream_topics.trajectories}.exact"
    async with TopicAdmin(kafka_settings) as admin:
        await admin.create([TopicSpec(replayed, 1)])
    again = _scored("s0", "g", 1.0, strategy="exact").trajectory
    await publish(replayed, [again])
    await until(lambda: console.index.find("s0/exact", replayed), timeout=30, what="replay")
    status, view = await _get(console, "api/trajectories/s0%2Fprefix_merge")
    assert view["other_topics"] == [replayed]
    status, exact = await _get(console, f"api/trajectories/s0%2Fexact?topic={replayed}")
    assert status == 200 and exact["strategy"] == "exact" and exact["reward"] is None
    status, missing = await _get(console, "api/trajectories/nobody")
    assert status == 404 and "nobody" in missing["error"]["message"]


async def test_the_live_stream_sends_new_figures_as_records_come(
    console: Console, publish: Publish, rollstream_topics: TopicNames
) -> None:
    seen: list[int] = []
    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base_url + "api/stream", headers=_auth(READ)) as reply,
    ):
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        buffer = b""
        published = False
        async for chunk in reply.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                lines = dict(line.split(": ", 1) for line in event.decode().splitlines())
                assert lines["event"] == "fleet"
                seen.append(json.loads(lines["data"])["totals"]["calls"])
            if seen and not published:
                published = True
                await publish(rollstream_topics.events, synthetic_session("s", SHAPE).records)
            if seen and seen[-1] == 3:
                break
    assert seen[0] == 0 and seen[-1] == 3


async def test_reading_takes_the_token_and_acting_the_control_token(console: Console) -> None:
    assert (await _get(console, "api/fleet", token=None))[0] == 401
    assert (await _get(console, "api/fleet", token=SecretStr("wrong-token-xyz")))[0] == 401
    status, body = await _get(console, "api/whoami")
    assert status == 200 and body == {"control": False}
    assert (await _get(console, "api/whoami", token=CONTROL))[1] == {"control": True}
    status, body = await _post(console, "api/control/pause", {}, token=READ)
    assert status == 403 and "control token" in body["error"]["message"]
    # The page itself holds no data and is open; the API is not.
    async with aiohttp.ClientSession() as http, http.get(console.base_url) as reply:
        assert reply.status == 200 and "static/console.js" in await reply.text()
    # No interceptor known: the control says so rather than pretending.
    status, body = await _post(console, "api/control/pause", {})
    assert status == 409 and "ROLLSTREAM_CONSOLE_INTERCEPTORS" in body["error"]["message"]
    status, body = await _post(console, "api/control/replay", {"strategy": "no-such"})
    assert status == 400 and "no-such" in body["error"]["message"]


async def test_export_writes_the_selected_sessions_to_parquet(
    console: Console, publish: Publish, rollstream_topics: TopicNames, tmp_path: Any
) -> None:
    import pyarrow.parquet as pq

    for i in range(3):
        await publish(rollstream_topics.events, synthetic_session(f"s{i}", SHAPE).records)
    await publish(rollstream_topics.scored, [_scored(f"s{i}", "g", float(i % 2)) for i in range(3)])
    await until(lambda: len(console.index.places) == 3, what="three scored trajectories")
    console.controls.export_dir = tmp_path
    # Select one session by its group filter on the session list: only its rows are written.
    console.fleet.sessions["s1"].group_id = "picked"
    status, body = await _post(
        console, "api/control/export", {"filters": {"group": "picked"}, "name": "one"}
    )
    assert status == 202, body
    await until(lambda: console.controls.jobs[-1].done, timeout=60, what="the export")
    job = console.controls.jobs[-1]
    assert job.error is None, job.error
    table = pq.read_table(tmp_path / "one.parquet")
    assert set(table.column("session_id").to_pylist()) == {"s1"}


async def test_a_poison_record_is_counted_and_logged_and_the_rest_are_read(
    console: Console,
    publish: Publish,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = await producer_factory()
    await publish(rollstream_topics.events, synthetic_session("before", SHAPE).records)
    await producer.send_and_wait(rollstream_topics.events, b"\x00not avro", key=b"before")
    await publish(rollstream_topics.events, synthetic_session("after", SHAPE).records)
    await until(
        lambda: console.fleet.snapshot(0)["sessions"]["ended"] == {"completed": 2},
        what="both sessions, to their end",
    )
    assert console.fleet.calls == 6 and console.feed.undecodable == 1
    assert any("cannot be decoded" in r.getMessage() for r in caplog.records)
    status, metrics = await _get_text(console, "metrics", READ)
    assert status == 200
    lines = dict(line.split(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
    assert lines["rollstream_console_records_undecodable_total"] == "1"
    assert int(lines["rollstream_console_records_total"]) == 11  # 2 x (start, 3 calls, end) + 1
    assert (await _get_text(console, "metrics", None))[0] == 401


async def _get_text(console: Console, path: str, token: SecretStr | None) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(console.base_url + path, headers=_auth(token)) as reply,
    ):
        return reply.status, await reply.text()


async def test_a_record_the_aggregates_fail_on_is_skipped_and_the_reading_goes_on(
    console: Console,
    publish: Publish,
    rollstream_topics: TopicNames,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = console.fleet.call
    before = synthetic_session("before", SHAPE)
    failing = {before.calls[0].call_id}

    def call(record: Any) -> None:
        if record.call_id in failing:
            failing.clear()
            raise RuntimeError("a bug in the aggregates")
        real(record)

    monkeypatch.setattr(console.fleet, "call", call)
    await publish(rollstream_topics.events, before.records)
    await publish(rollstream_topics.events, synthetic_session("after", SHAPE).records)
    await until(lambda: console.fleet.calls == 5, what="every call but the failing one")
    assert console.feed.failed == 1 and not console.feed.died
    assert any("could not be counted" in r.getMessage() for r in caplog.records)


async def test_a_deleted_topic_leaves_the_others_read_once(
    console: Console,
    publish: Publish,
    rollstream_topics: TopicNames,
    kafka_settings: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The topic list looked at often, so the test need not wait 5 s for each look.
    monkeypatch.setattr("rollstream.consumers.console.feed.TOPICS_EVERY_S", 0.5)
    doomed = f"{rollstream_topics.trajectories}.doomed"
    later = f"{rollstream_topics.trajectories}.later"
    async with TopicAdmin(kafka_settings) as admin:
        await admin.create([TopicSpec(doomed, 1)])
    await publish(rollstream_topics.events, synthetic_session("s0", SHAPE).records)
    await until(lambda: console.fleet.calls == 3, what="the first session")
    await until(lambda: any(tp.topic == doomed for tp in console.feed.assigned()), what="doomed")
    async with TopicAdmin(kafka_settings) as admin:
        await admin.delete([doomed])
        await admin.create([TopicSpec(later, 1)])
    await until(
        lambda: any(tp.topic == later for tp in console.feed.assigned()),
        timeout=30,
        what="the topic made after the deletion",
    )
    await publish(rollstream_topics.events, synthetic_session("s1", SHAPE).records)
    await until(lambda: console.fleet.calls == 6, what="the second session")
    await asyncio.sleep(2)  # had the partitions gone back to their start, calls would pass 6
    assert console.fleet.calls == 6 and not console.feed.died


async def test_an_interceptor_answering_nonsense_shows_down_and_is_asked_again(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, stub_assets: Assets
) -> None:
    from aiohttp import web

    answers = ["", "[1, 2]", json.dumps({"paused": True, "spool_alarm": True})]

    async def health(request: web.Request) -> web.Response:
        return web.Response(text=answers[0] if len(answers) == 1 else answers.pop(0))

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    settings = ConsoleSettings(port=0, token=READ, interceptors=(f"http://127.0.0.1:{port}",))
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    try:
        async with Console(settings, kafka_settings, tokenizer, assets=stub_assets) as running:
            await until(lambda: running.interceptors[0]["paused"], timeout=15, what="a good answer")
            assert running.interceptors[0]["up"] and running.interceptors[0]["spool_alarm"]
    finally:
        await runner.cleanup()


async def test_a_console_that_cannot_listen_stops_what_it_started(
    console: Console, kafka_settings: KafkaSettings, stub_assets: Assets
) -> None:
    taken = ConsoleSettings(port=console.port, token=READ)
    second = Console(
        taken, kafka_settings, ChatTokenizer(default_tokenizer_dir()), assets=stub_assets
    )
    with pytest.raises(OSError):
        await second.start()
    # Its feed and fetcher were stopped: a consumer left open would warn when collected.
    assert second.feed._consumer._closed and second.fetcher._consumer._closed
