"""The trajectory viewer against a real vLLM: it shows the tokens and logprobs the engine sampled.

Calls go through the interceptor to vLLM serving a family's tiny model; the harness side asks
for vLLM's own logprobs (each sampled token's text and logprob, as vLLM decoded it). The calls
are rebuilt into a trajectory, which the console reads from Kafka and serves to the viewer
with the family's tokenizer. The oracle is vLLM's answer, not our tokenizer or our records.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from pydantic import SecretStr

from rollstream.consumers.console import Assets, Console, ConsoleSettings
from rollstream.schemas import CallRecord, TopicNames
from rollstream.settings import KafkaSettings
from tests.consumers.console.conftest import Publish
from tests.consumers.console.records import rebuilt
from tests.engine_servers import EngineServers
from tests.harness_stack import engine_interceptor
from tests.kafka_reading import read_records
from tests.loaded_families import loaded_family
from tests.waiting import until

pytestmark = pytest.mark.integration

READ = SecretStr("read-token-0123456789")


async def _chat(url: str, session: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = {"x-rollstream-session": session}
    async with httpx.AsyncClient(timeout=120) as client:
        reply = await client.post(f"{url}/v1/chat/completions", json=body, headers=headers)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


@pytest.mark.parametrize("family", ["qwen3"])
async def test_the_viewer_shows_the_tokens_and_logprobs_vllm_sampled(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    publish: Publish,
    stub_assets: Assets,
    tmp_path: Path,
) -> None:
    server = engine_servers.get(family)
    session = f"viewer-{uuid.uuid4().hex[:8]}"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Name three colours."}]
    sampled: list[list[dict[str, Any]]] = []  # vLLM's logprobs entries, call by call
    async with engine_interceptor(kafka_settings, tmp_path / "state", server, family) as proxy:
        for follow_up in ("And three more?", None):
            body = {"model": server.model, "messages": messages, "max_tokens": 40}
            answer = await _chat(proxy.url, session, body | {"logprobs": True, "seed": 7})
            [choice] = answer["choices"]
            sampled.append(choice["logprobs"]["content"])
            if follow_up:
                reply = choice["message"]
                messages += [
                    {"role": "assistant", "content": reply.get("content") or ""},
                    {"role": "user", "content": follow_up},
                ]
    records = await read_records(
        kafka_settings,
        rollstream_topics.events,
        CallRecord,
        2,
        where=lambda r: r.session_id == session,
    )
    records.sort(key=lambda r: r.seq)
    trajectory = rebuilt(records, "per_call")
    await publish(rollstream_topics.trajectories, [trajectory])

    settings = ConsoleSettings(port=0, token=READ)
    tokenizer = loaded_family(family).tokenizer
    async with Console(settings, kafka_settings, tokenizer, assets=stub_assets) as console:
        await until(
            lambda: console.index.find(trajectory.trajectory_id, None), what="the trajectory"
        )
        path = f"api/trajectories/{trajectory.trajectory_id.replace('/', '%2F')}"
        headers = {"Authorization": f"Bearer {READ.get_secret_value()}"}
        async with (
            aiohttp.ClientSession() as http,
            http.get(console.base_url + path, headers=headers) as reply,
        ):
            assert reply.status == 200
            view = await reply.json()

    segments = view["segments"]
    assert [s["call_ids"] for s in segments] == [[r.call_id] for r in records]
    for segment, engine in zip(segments, sampled, strict=True):
        tokens = segment["tokens"]
        shown = [
            (text, logprob)
            for text, mask, logprob in zip(
                tokens["text"], tokens["mask"], tokens["logprob"], strict=True
            )
            if mask
        ]
        # vLLM's entries: each sampled token's text as it decoded it, and its logprob; the
        # stop token it ended on (if any) is sampled too, and so trained, but not listed.
        assert 0 < len(engine) <= len(shown) <= len(engine) + 1
        whole = 0
        for (text, logprob), entry in zip(shown, engine, strict=False):
            assert math.isclose(logprob, entry["logprob"], abs_tol=1e-4), (text, entry)
            if "\ufffd" not in entry["token"]:  # not a token holding part of a character
                assert text == entry["token"], entry
                whole += 1
        assert whole * 2 > len(engine)
        # The prompt is context, never trained, and shows no logprob.
        assert all(
            lp is None for m, lp in zip(tokens["mask"], tokens["logprob"], strict=True) if not m
        )
        assert segment["call_starts"][0]["at"] == tokens["mask"].index(1)
