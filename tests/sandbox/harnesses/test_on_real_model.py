"""Real harnesses against a real model sampling freely: SmolLM2-135M-Instruct on vLLM.

No plan here: the model writes whatever it writes (text that runs on, calls that do not parse,
answers that stop early), on an 8,192-token context a harness's requests were not written for
(Claude Code asks for 32,000 output tokens). Whatever happens to the session, every call vLLM
answered is recorded: complete with its token ids, or, when the harness hung up first (a text
running on past the session's time), cancelled with why; and the session's trajectory keeps the
faithfulness invariant. The oracle for "every call" is vLLM's own access log (a 200 is logged
when an answer starts, a stream included), not the interceptor.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.fidelity import fidelity_row
from rollstream.dev.engine.real_model import real_model_dir
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.schemas import CallRecord, CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.engine_servers import EngineServers
from tests.harness_stack import engine_interceptor, harnesses_installed, register
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

TASK = "Create hello.txt containing the word polar, then show its content."
#: How long a session may run: a model that never stops (calling, or writing) is stopped here.
SESSION_S = 120
_ANSWERED = re.compile(rb'"POST /v1/chat/completions HTTP/1\.1" 200')


def _answered(log: Path) -> int:
    """Chat completions vLLM began to answer with 200, by its access log."""
    return len(_ANSWERED.findall(log.read_bytes()))


@pytest.mark.parametrize("family", ["smollm2-135m"])
@pytest.mark.parametrize("harness", ["pi", "claude-code"])
async def test_whatever_a_real_model_writes_every_call_is_recorded_and_trains_faithfully(
    harness: str,
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    server = engine_servers.get(family)
    folder = real_model_dir(family)
    bin_dir = harnesses_installed()
    before = _answered(server.log_file)
    session = f"{harness}-{uuid.uuid4().hex[:8]}"
    # The generic family: the model folder's own template.
    async with engine_interceptor(
        kafka_settings, tmp_path / "state", server, None, tokenizer=folder
    ) as interceptor:  # what it holds is published before it stops
        register(interceptor, session)
        context = HarnessContext(interceptor.url, session, server.model, TASK)
        launch = PRESETS[harness].launch(context, bin_dir / PACKAGES[harness][1])
        result = await run_harness(
            launch, tmp_path / "home", tmp_path / "work", tmp_path / "logs", SESSION_S
        )
    answered = _answered(server.log_file) - before
    ended = f"{harness} ended {result.exit_code}:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert answered >= 1, ended
    records = await read_records(
        kafka_settings,
        TopicNames(kafka_settings.topic_prefix).events,
        CallRecord,
        answered,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=2.0,
    )
    seen = (ended, [(r.status, r.error) for r in records])
    # Every call vLLM answered is recorded once: complete, or cancelled by the harness.
    answers = [r for r in records if r.status in (CallStatus.OK, CallStatus.CANCELLED)]
    assert len(answers) == answered, seen
    for record in records:
        if record.status is CallStatus.OK:  # with the tokens vLLM sampled and the prompt's
            assert record.completion_token_ids is not None and len(record.completion_token_ids)
            assert record.prompt is not None
        else:  # a harness that hung up, a prompt over the context: recorded with why
            assert record.error is not None and record.error.message, seen
    row = fidelity_row(family, harness, "ordinary", sorted(records, key=lambda r: r.seq))
    assert row.violations == 0, row
