"""``rollstream smoke``: one synthetic session through the real broker and back.

Publishes the schemas, produces a session's records in one transaction, reads them back with
``read_committed``, decodes them and resolves every delta-encoded prompt. A failure at any step
is an error; the summary shows what the delta encoding saved.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.errors import BrokerError, RollstreamError
from rollstream.kafka.clients import make_consumer, make_producer, topic_partitions
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer, CallRecord, TokenIds, TopicNames, resolve_prompt
from rollstream.settings import KafkaSettings


@dataclass(frozen=True)
class SmokeResult:
    """What went through the broker."""

    session_id: str
    records: int
    calls: int
    encoded_bytes: int
    full_prompt_bytes: int


async def run_smoke(
    settings: KafkaSettings, turns: int = 5, timeout_s: float = 30.0
) -> SmokeResult:
    """Produce one synthetic session transactionally and verify it reads back intact."""
    topic = TopicNames(settings.topic_prefix).events
    serializer = AvroSerializer()
    async with SchemaStore(settings, serializer.registry) as store:
        await store.publish()
    session_id = f"smoke-{uuid.uuid4().hex[:12]}"
    session = synthetic_session(session_id, SyntheticShape(turns=turns))
    payloads = [serializer.encode(r) for r in session.records]

    consumer = make_consumer(settings)
    producer = make_producer(settings, transactional_id=f"rollstream-smoke-{session_id}")
    await consumer.start()
    await producer.start()
    try:
        tps = await topic_partitions(consumer, topic)
        if tps is None:
            raise BrokerError(f"no topic {topic}: run `rollstream topics create` first")
        before = await consumer.end_offsets(tps)
        async with producer.transaction():
            for payload in payloads:
                await producer.send(topic, payload, key=session_id.encode())
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, before[tp])
        received: list[bytes] = []
        async with asyncio.timeout(timeout_s):
            while len(received) < len(payloads):
                for messages in (await consumer.getmany(*tps, timeout_ms=500)).values():
                    received += [
                        m.value for m in messages if m.key == session_id.encode() and m.value
                    ]
    except TimeoutError as exc:
        raise BrokerError(f"smoke: records did not come back within {timeout_s:.0f}s") from exc
    finally:
        await producer.stop()
        await consumer.stop()

    contexts: dict[str, TokenIds] = {}
    decoded = [serializer.decode(data) for data in received]
    if decoded != session.records:
        raise RollstreamError("smoke: the records read back differ from those produced")
    for call in (r for r in decoded if isinstance(r, CallRecord)):
        assert call.prompt is not None and call.completion_token_ids is not None
        prompt = resolve_prompt(call.prompt, contexts.get)
        if prompt != session.prompts[call.call_id]:
            raise RollstreamError(f"smoke: the prompt of {call.call_id} does not resolve")
        contexts[call.call_id] = prompt + call.completion_token_ids
    return SmokeResult(
        session_id=session_id,
        records=len(received),
        calls=len(session.calls),
        encoded_bytes=sum(map(len, received)),
        full_prompt_bytes=sum(4 * len(p) for p in session.prompts.values()),
    )
