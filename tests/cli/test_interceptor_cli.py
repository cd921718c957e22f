"""The interceptor as processes: ``rollstream interceptor`` and ``mitmdump -s``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.host import free_port
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import AvroSerializer, CallRecord, TopicNames
from rollstream.settings import KafkaSettings


def test_help_names_the_environment_variables() -> None:
    result = CliRunner().invoke(cli, ["interceptor", "--help"])
    flat = " ".join(result.output.split())
    for name in (
        "ROLLSTREAM_INTERCEPTOR_UPSTREAM",
        "ROLLSTREAM_INTERCEPTOR_PORT",
        "ROLLSTREAM_BOOTSTRAP_SERVERS",
        "ROLLSTREAM_PUBLISHER_SPOOL_DIR",
    ):
        assert f"[env: {name}]" in flat


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def _chat(base: str, session: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(
            {
                "model": "rollstream-tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 5,
                "seed": 1,
            }
        ).encode(),
        # Named as a launcher names it: an unregistered key would be its keyed hash.
        headers={"Content-Type": "application/json", "x-rollstream-session": session},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, object] = json.load(response)
    return answer


async def _one_record(settings: KafkaSettings) -> CallRecord:
    consumer = make_consumer(settings)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, TopicNames(settings.topic_prefix).events)
        assert tps
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        async with asyncio.timeout(30):
            while True:
                for messages in (await consumer.getmany(timeout_ms=300)).values():
                    for m in messages:
                        return AvroSerializer().decode_as(m.value, CallRecord)
    finally:
        await consumer.stop()


@pytest.mark.integration
@pytest.mark.parametrize("runner", ["rollstream", "mitmdump"])
async def test_a_call_through_the_process_lands_in_kafka(
    runner: str, kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    backend_port, proxy_port = free_port(), free_port()
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "ROLLSTREAM_STATE_DIR": str(tmp_path),
        "ROLLSTREAM_INTERCEPTOR_UPSTREAM": f"http://127.0.0.1:{backend_port}",
        "ROLLSTREAM_INTERCEPTOR_PORT": str(proxy_port),
        "ROLLSTREAM_INTERCEPTOR_ADMIN_PORT": "0",
        "ROLLSTREAM_LOG_LEVEL": "WARNING",
    }
    # Real processes are the point of this test; the loop has nothing else to do meanwhile.
    backend = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "rollstream", "backend", "--port", str(backend_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if runner == "rollstream":
        cmd = [sys.executable, "-m", "rollstream", "interceptor"]
    else:
        mitmdump = shutil.which("mitmdump", path=str(Path(sys.executable).parent))
        assert mitmdump is not None
        script = Path(__file__).parents[2] / "rollstream" / "interceptor" / "mitm_script.py"
        cmd = [
            mitmdump,
            "-q",
            "--listen-host",
            "127.0.0.1",
            "-p",
            str(proxy_port),
            "--mode",
            f"reverse:http://127.0.0.1:{backend_port}",
            "-s",
            str(script),
        ]
    proxy = subprocess.Popen(  # noqa: ASYNC220
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{backend_port}/health")
        await asyncio.to_thread(_wait_http, f"http://127.0.0.1:{proxy_port}/health")
        answer = await asyncio.to_thread(_chat, f"http://127.0.0.1:{proxy_port}", "sess-proc")
        assert "token_ids" not in json.dumps(answer)  # not asked for, not shown
        record = await _one_record(kafka_settings)
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, err = proxy.communicate(timeout=30)
        backend.send_signal(signal.SIGTERM)
        backend.wait(timeout=30)
    assert proxy.returncode == 0, err
    assert record.session_id == "sess-proc" and record.completion_token_ids is not None
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    assert record.prompt is not None
    assert record.prompt.suffix.to_list() == tokenizer.encode(
        tokenizer.render([{"role": "user", "content": "hi"}])
    )
