"""The ACL step of a secure broker's start: a failure kills the broker, a new prefix gets its table.

No JVM: the broker is a ``sleep`` process and the ACL tool a recording stand-in, since what is
tested is what ``LocalBroker`` does around them (the real tool runs in test_secure_broker.py).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker, acls
from rollstream.dev.broker.acls import plan
from rollstream.dev.broker.config import BrokerLayout
from rollstream.errors import BrokerError
from rollstream.settings import StatePaths


def _secure(tmp_path: Path, prefix: str = "rollstream") -> LocalBroker:
    broker = LocalBroker(
        BrokerSettings(secure=True, port=0, data_dir=tmp_path / "kafka"),
        StatePaths(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache"),
        record_state=False,
        outlive_parent=False,
        topic_prefix=prefix,
    )
    broker._tools = ("java", "classpath")  # no jars are fetched: the tool is a stand-in
    return broker


@pytest.mark.parametrize(
    "failure",
    [
        BrokerError("creating the ACLs of scorer failed"),
        subprocess.TimeoutExpired("java", 120),
        OSError("java: no such file"),
        KeyboardInterrupt(),
    ],
    ids=["tool-refused", "tool-timed-out", "no-java", "interrupted"],
)
def test_a_secure_broker_whose_acl_step_fails_in_any_way_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    broker = _secure(tmp_path)
    jvm = subprocess.Popen(["sleep", "60"])
    broker._proc = jvm
    monkeypatch.setattr(broker, "_wait_ready", lambda layout, began: None)

    def fail(*args: Any) -> bool:
        raise failure

    monkeypatch.setattr(acls, "apply", fail)
    layout = BrokerLayout(broker.data_dir, port=9, controller_port=10)
    with pytest.raises(type(failure)):
        broker.wait_ready(layout, "cluster", time.monotonic())
    # Killed and reaped: a secure broker without its ACLs would serve no one.
    assert jvm.returncode is not None
    assert broker.info is None


def test_a_running_secure_broker_gets_the_acls_of_the_asked_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = BrokerInfo(
        pid=1,
        bootstrap_servers="127.0.0.1:19092",
        port=19092,
        controller_port=19093,
        data_dir=str(tmp_path / "kafka"),
        version="4.1.2",
        cluster_id="c",
        started_at=0.0,
        startup_seconds=1.0,
    )
    applied: list[tuple[str, list[Any]]] = []

    def apply(java: str, classpath: str, files: Any, bootstrap: str, rules: list[Any]) -> bool:
        applied.append((bootstrap, rules))
        return True

    monkeypatch.setattr(acls, "apply", apply)
    for prefix in ("rollstream", "team-b"):
        broker = _secure(tmp_path, prefix)
        monkeypatch.setattr(broker, "running", lambda: running)
        assert broker.start() is running  # no second broker on the data directory
    assert applied == [
        ("127.0.0.1:19092", plan("rollstream")),
        ("127.0.0.1:19092", plan("team-b")),
    ]
