"""``rollstream harness run`` with the command preset (no npm install needed)."""

from __future__ import annotations

import asyncio
import secrets
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.sandbox.harnesses.install import PACKAGES, UNAVAILABLE
from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.harness_stack import scripted_interceptor

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_harness_run_command_preset_with_options(tmp_path: Path) -> None:
    work = tmp_path / "work"
    script = "echo {instruction} > out.txt; echo $ROLLSTREAM_SESSION >> out.txt"
    args = ["harness", "run", "command", "say hi", "--workdir", str(work), "--session", "s-1"]
    result = CliRunner().invoke(cli, [*args, "--option", f"command={script}"])
    assert result.exit_code == 0, result.output
    assert (work / "out.txt").read_text() == "say hi\ns-1\n"
    assert "session s-1: exit 0" in result.output


def test_harness_run_rejects_malformed_options(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["harness", "run", "command", "x", "--option", "novalue"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output


@pytest.mark.integration
async def test_harness_run_registers_its_session_on_a_strict_interceptor(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = secrets.token_urlsafe(16)
    monkeypatch.setenv("ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN", token)
    async with scripted_interceptor(
        kafka_settings, tmp_path / "state", admin_token=token, strict=True
    ) as proxy:
        args = ["harness", "run", "python", "hi", "--base-url", proxy.url, "--session", "h-1"]
        args += ["--option", "function=tests.producers.node.agents:one_call"]
        args += ["--option", f"pythonpath={REPO_ROOT}", "--workdir", str(tmp_path / "w")]
        refused = await asyncio.to_thread(CliRunner().invoke, cli, args)
        assert refused.exit_code == 1  # not registered: the strict interceptor's 401
        assert (tmp_path / "w" / "status.txt").read_text() == "401\n"
        served = await asyncio.to_thread(
            CliRunner().invoke, cli, [*args, "--admin", proxy.admin_url]
        )
        assert served.exit_code == 0, served.output
        assert (tmp_path / "w" / "status.txt").read_text() == "200\n"
        assert "h-1" not in proxy.addon.sessions  # forgotten after the run
        assert proxy.addon.ledger.calls("h-1") == 1


@pytest.mark.parametrize(("isolation", "expected"), [("namespace", "closed"), ("none", "open")])
def test_harness_run_walls_the_harness_unless_told_not_to(
    tmp_path: Path, isolation: str, expected: str
) -> None:
    with socket.socket() as broker:
        broker.bind(("127.0.0.1", 0))
        broker.listen(4)
        port = broker.getsockname()[1]
        script = (
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo open > out.txt "
            "|| echo closed > out.txt; echo $ROLLSTREAM_BASE_URL >> out.txt"
        )
        args = ["harness", "run", "command", "x", "--workdir", str(tmp_path)]
        args += ["--base-url", "http://localhost:8123/p", "--isolation", isolation]
        result = CliRunner().invoke(cli, [*args, "--option", f"command={script}"])
    assert result.exit_code == 0, result.output
    reached, url = (tmp_path / "out.txt").read_text().split()
    assert reached == expected
    # Walled, the harness calls its own loopback, where the relay to --base-url listens.
    walled = isolation == "namespace"
    assert url == ("http://127.0.0.1:8123/p" if walled else "http://localhost:8123/p")


def test_harness_list_names_every_preset_s_package_and_what_cannot_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["harness", "list", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    for name, (spec, _) in PACKAGES.items():
        assert spec in rows[name] and rows[name].endswith("missing")  # an empty cache
    for name, (pins, _) in PYTHON_PACKAGES.items():
        assert " ".join(pins) in rows[name] and rows[name].endswith("missing")
    for name, why in UNAVAILABLE.items():
        assert rows[name].endswith(why)
