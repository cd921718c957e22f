"""The loop closes: sample -> capture -> reconstruct -> score -> update -> next version stamped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from aiokafka.structs import TopicPartition

from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.consumers.trainer import TrainerSettings
from rollstream.dev.backend.policies.tiny_train import weights_digest, weights_from_bytes
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.examples.grpo_trainer import ExampleTrainer
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.kafka.clients import make_consumer, ordinary_tasks
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    CallRecord,
    EvaluatorSpec,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    Task,
    TopicNames,
    utcnow,
)
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import ConsumerFactory, ProducerFactory
from tests.consumers.trainer.records import group_of
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration
SAMPLES = 4


@pytest.fixture
async def stack(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[tuple[Interceptor, str]]:
    backend = Backend(BackendSettings(policy="tiny", seed=11))
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    upstream = str(server.make_url("")).rstrip("/")
    interceptor = Interceptor(
        InterceptorSettings(upstream=upstream, port=0, admin_port=0),
        kafka_settings,
        PublisherSettings(),
        StatePaths(state_dir=tmp_path / "state"),
    )
    await interceptor.start()
    try:
        yield interceptor, upstream
    finally:
        await interceptor.stop()
        await server.close()


async def run_session(
    interceptor: Interceptor, producer: Any, names: TopicNames, task: Task, sample: int
) -> None:
    """SessionStarted, two chat calls through the interceptor, SessionEnded."""
    serializer = AvroSerializer()
    session = f"{task.task_id}-{sample}"
    interceptor.addon.sessions.register(session, None)  # as the node does before its harness
    ids: dict[str, Any] = {"session_id": session, "task_id": task.task_id}
    ids |= {"group_id": task.group_id, "sample_index": sample, "harness": "python"}
    started = SessionStarted(**ids, started_at=utcnow(), task=task)
    await producer.send_and_wait(names.events, serializer.encode(started), key=session.encode())
    messages: Any = [{"role": "user", "content": f"tell me something, take {sample}"}]
    async with openai.AsyncOpenAI(
        base_url=f"{interceptor.url}/v1", api_key=session, max_retries=0
    ) as client:
        for turn in range(2):
            answer = await client.chat.completions.create(
                model="rollstream-tiny", messages=messages, max_tokens=24, temperature=1.0
            )
            messages += [
                {"role": "assistant", "content": answer.choices[0].message.content or ""},
                {"role": "user", "content": f"and more, turn {turn}"},
            ]
    ended = SessionEnded(
        **ids, status=SessionStatus.COMPLETED, exit_code=0, call_count=2, ended_at=utcnow()
    )
    await producer.send_and_wait(names.events, serializer.encode(ended), key=session.encode())


async def test_one_update_is_on_policy_synced_and_stamped_into_new_calls(
    stack: tuple[Interceptor, str],
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    interceptor, backend_url = stack
    names = rollstream_topics
    task = Task(
        task_id="t-loop",
        group_id="g-loop",
        instruction="say something",
        samples=SAMPLES,
        harness="python",
        evaluator=EvaluatorSpec(
            kind="python", config={"function": "tests.dev.examples.rewards:final_length"}
        ),
        submitted_at=utcnow(),
    )
    producer = await producer_factory()
    for sample in range(SAMPLES):
        await run_session(interceptor, producer, names, task, sample)

    stop = asyncio.Event()
    reconstructor = Reconstructor(
        ReconstructSettings(strategy="prefix_merge", wait_for_calls_s=5.0), kafka_settings
    )
    scorer = Scorer(ScoreSettings(work_root=tmp_path / "score"), kafka_settings)
    trainer = ExampleTrainer(
        ExampleTrainerSettings(
            backend_url=backend_url,
            interceptor_admin=interceptor.admin_url,
            learning_rate=1.0,
            steps=1,
        ),
        TrainerSettings(max_staleness=0),
        kafka_settings,
    )
    async with reconstructor, scorer, trainer:
        services = [
            asyncio.create_task(reconstructor.run(stop)),
            asyncio.create_task(scorer.run(stop)),
        ]
        try:
            [report] = await asyncio.wait_for(trainer.run(), 120)
        finally:
            stop.set()
            await asyncio.gather(*services)

    # On policy: recomputed at the sampling weights, the logprobs are the recorded ones.
    assert report.trajectories == SAMPLES and report.groups == 1
    assert report.max_abs_logprob_drift < 1e-3
    assert report.mean_ratio == pytest.approx(1.0, abs=1e-3)
    assert report.grad_norm > 0 and report.trainable_tokens > 0
    assert len(set(report.rewards["g-loop"])) > 1  # a group with signal
    assert report.policy_version == 1

    # Synced: the backend serves the trainer's weights; the interceptor runs again.
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{backend_url}/admin/weights") as response:
            assert weights_digest(weights_from_bytes(await response.read())) == (
                report.weights_digest
            )
        async with http.get(f"{interceptor.admin_url}/health") as response:
            assert (await response.json())["paused"] is False

    # Stamped: a call after the update carries version 1.
    interceptor.addon.sessions.register("after-update", None)
    async with openai.AsyncOpenAI(
        base_url=f"{interceptor.url}/v1", api_key="after-update", max_retries=0
    ) as client:
        await client.chat.completions.create(
            model="rollstream-tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    [after] = await read_records(
        kafka_settings,
        names.events,
        AvroRecord,
        1,
        where=lambda r: isinstance(r, CallRecord) and r.session_id == "after-update",
    )
    assert isinstance(after, CallRecord) and after.policy_version == 1

    # Committed: the trainer's group resumes past the group it trained on.
    # (Offsets may or may not count the scorer's transaction markers: read, don't add them up.)
    consumer = make_consumer(kafka_settings, group_id="example-trainer")
    with ordinary_tasks():  # the interceptor's loop runs an eager task factory
        await consumer.start()
    try:
        tps = [TopicPartition(names.scored, p) for p in range(3)]
        committed = {tp: await consumer.committed(tp) for tp in tps}
        assert any(committed.values())
        consumer.assign(tps)
        for tp, offset in committed.items():
            consumer.seek(tp, offset or 0)
        left = await consumer.getmany(timeout_ms=2000)
    finally:
        await consumer.stop()
    assert not any(left.values())  # nothing the trainer consumed comes again


async def test_a_drain_that_times_out_skips_the_sync_and_the_update_is_deployed_later(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
    tmp_path: Path,
) -> None:
    names = rollstream_topics
    release = asyncio.Event()  # the upstream holds every generation until this is set

    @web.middleware
    async def hold(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.endswith("/chat/completions"):
            await release.wait()
        return await handler(request)

    backend = Backend(BackendSettings(policy="tiny", seed=11))
    app = backend.app()
    app.middlewares.append(hold)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    backend_url = str(server.make_url("")).rstrip("/")
    interceptor = Interceptor(
        InterceptorSettings(upstream=backend_url, port=0, admin_port=0),
        kafka_settings,
        PublisherSettings(),
        StatePaths(state_dir=tmp_path / "state"),
    )
    serializer = AvroSerializer()
    producer = await producer_factory()
    for record in group_of("g-held", 2, rewards=[1.0, 0.0]):  # a group with signal
        await producer.send_and_wait(names.scored, serializer.encode(record), key=b"g-held")

    async def digest() -> str:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{backend_url}/admin/weights") as response,
        ):
            return weights_digest(weights_from_bytes(await response.read()))

    def trainer() -> ExampleTrainer:
        return ExampleTrainer(
            ExampleTrainerSettings(
                backend_url=backend_url,
                interceptor_admin=interceptor.admin_url,
                learning_rate=1.0,
                steps=1,
                drain_timeout_s=0.3,
            ),
            TrainerSettings(),
            kafka_settings,
        )

    await interceptor.start()
    try:
        served = await digest()
        async with openai.AsyncOpenAI(
            base_url=f"{interceptor.url}/v1", api_key="held", max_retries=0
        ) as client:
            call = asyncio.create_task(
                client.chat.completions.create(
                    model="rollstream-tiny",
                    messages=[{"role": "user", "content": "hi"}],
                    max_tokens=4,
                )
            )
            async with asyncio.timeout(30):
                while not interceptor.addon.in_flight:  # noqa: ASYNC110 (the proxy's counter)
                    await asyncio.sleep(0.05)

            async with trainer() as first:
                [report] = await asyncio.wait_for(first.run(), 120)
            # Trained, but not deployed: the call sent before the pause is still in flight.
            assert await digest() == served and interceptor.addon.policy_version == 0
            assert report.weights_digest != served and report.policy_version == 0
            assert not report.synced
            assert first.skipped_syncs == 2  # the step's sync and the last try at the end
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{interceptor.admin_url}/health") as response,
            ):
                assert (await response.json())["paused"] is False  # resumed each time
            reader = await consumer_factory(group_id="example-trainer")
            scored_tps = [TopicPartition(names.scored, p) for p in range(3)]
            assert [await reader.committed(tp) for tp in scored_tps] == [None] * 3
            control = TopicPartition(names.control, 0)
            assert (await reader.end_offsets([control]))[control] == 0  # nothing published

            release.set()
            await call  # the held call ends normally: the interceptor never stopped it

        # Not committed, so the group comes again; drained now, the update is deployed.
        async with trainer() as second:
            [again] = await asyncio.wait_for(second.run(), 120)
        assert again.synced and again.policy_version == 1 and second.skipped_syncs == 0
        assert await digest() == again.weights_digest
        assert interceptor.addon.policy_version == 1
        assert any([await reader.committed(tp) for tp in scored_tps])
    finally:
        await interceptor.stop()
        await server.close()
