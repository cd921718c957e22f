"""The local broker as a process: start-up failures, port conflicts, restarts, state file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path

import pytest

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker, config
from rollstream.dev.broker.probe import probe_metadata
from rollstream.errors import BrokerError
from rollstream.settings import KafkaSettings, StatePaths, discover_bootstrap
from tests.conftest import JAR_CACHE

pytestmark = pytest.mark.integration


def _broker(tmp_path: Path, **settings: object) -> LocalBroker:
    return LocalBroker(
        BrokerSettings(data_dir=tmp_path / "kafka", heap="512m", **settings),  # type: ignore[arg-type]
        StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
    )


def test_session_broker_answers_metadata(kafka_broker: BrokerInfo) -> None:
    assert asyncio.run(probe_metadata(kafka_broker.bootstrap_servers))
    assert kafka_broker.startup_seconds > 0


def test_bad_config_fails_at_format_with_kafkas_message(tmp_path: Path) -> None:
    broker = LocalBroker(
        BrokerSettings(data_dir=tmp_path / "kafka", port=0),
        StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
        overrides={"message.max.bytes": "not-a-number"},
    )
    with pytest.raises(BrokerError, match=r"(?s)formatting .* failed.*message\.max\.bytes"):
        broker.start()
    assert not broker.paths.broker_state_file.exists()


def test_failed_start_reports_the_log_tail(tmp_path: Path) -> None:
    # -Xmx below the fixed -Xms: the JVM refuses to start after the data dir was formatted.
    broker = LocalBroker(
        BrokerSettings(data_dir=tmp_path / "kafka", port=0, heap="16m"),
        StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
    )
    with pytest.raises(BrokerError) as info:
        broker.start()
    message = str(info.value)
    assert "exited with code" in message
    assert "heap" in message.lower()  # the JVM's own complaint, from the log tail
    assert not broker.paths.broker_state_file.exists()


def test_taken_port_is_replaced_and_restart_keeps_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        broker = _broker(tmp_path, port=taken)
        info = broker.start()
        try:
            assert info.port != taken
            # Recorded for the other commands, which find the broker without any setting.
            assert broker.paths.broker_state_file.exists()
            monkeypatch.setenv("ROLLSTREAM_STATE_DIR", str(broker.paths.state_dir))
            assert discover_bootstrap() == info.bootstrap_servers
            assert KafkaSettings().bootstrap_servers == info.bootstrap_servers
            assert broker.healthy()
            # Starting again finds the running broker instead of starting a second one.
            assert _broker(tmp_path, port=taken).start().pid == info.pid
        finally:
            assert broker.stop()
    assert not broker.paths.broker_state_file.exists()
    assert broker.running() is None
    assert not broker.stop()  # already stopped

    restarted = _broker(tmp_path, port=0)
    again = restarted.start()
    try:
        assert again.cluster_id == info.cluster_id  # same data directory, not re-formatted
        assert again.controller_port == info.controller_port
    finally:
        restarted.stop()


def test_a_port_taken_between_its_check_and_the_bind_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart binds the ports it recorded: another program may take one after the check that
    it was free. The JVM's bind fails; the broker starts again, and checks again first."""
    first = _broker(tmp_path, port=0)
    info = first.start()
    first.stop()
    real_check = config.port_is_free
    checks: list[int] = []
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", info.controller_port))
        holder.listen()

        def racing_check(port: int, host: str = "127.0.0.1") -> bool:
            """Free when checked the first time, taken when Kafka binds it; then released."""
            checks.append(port)
            if len(checks) == 1:
                return True
            holder.close()
            return real_check(port, host)

        monkeypatch.setattr(config, "port_is_free", racing_check)
        restarted = _broker(tmp_path, port=0)
        with caplog.at_level(logging.WARNING, logger="rollstream.dev.broker.process"):
            again = restarted.start()
    try:
        assert checks == [info.controller_port, info.controller_port]
        assert again.controller_port == info.controller_port
        assert again.cluster_id == info.cluster_id
        assert asyncio.run(probe_metadata(again.bootstrap_servers))
        (warning,) = [r.getMessage() for r in caplog.records if "Starting it again" in r.message]
        assert f"failed to bind to 127.0.0.1:{info.controller_port}" in warning
    finally:
        restarted.stop()


def test_a_broker_tied_to_its_parent_dies_with_it(tmp_path: Path) -> None:
    """A test run killed by a timeout must not leave its broker running."""
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from rollstream.dev.broker import BrokerSettings, LocalBroker
        from rollstream.settings import StatePaths
        broker = LocalBroker(
            BrokerSettings(data_dir=Path({str(tmp_path / "kafka")!r}), port=0, heap="256m"),
            StatePaths(state_dir=Path({str(tmp_path)!r}), cache_dir=Path({str(JAR_CACHE)!r})),
            record_state=False, outlive_parent=False,
        )
        print(broker.start().pid, flush=True)
        import time; time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    parent.kill()  # SIGKILL: no teardown runs
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    state = Path(f"/proc/{pid}/stat")
    assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"
