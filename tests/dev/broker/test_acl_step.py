"""The ACL step of a secure broker's start: a failure kills the broker, a new prefix gets its table.

No JVM: the broker is a ``sleep`` process and the ACL step a recording stand-in, since what is
tested is what ``LocalBroker`` does around them (the real step runs in test_secure_broker.py).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker, acls
from rollstream.dev.broker.acls import plan, service_principals
from rollstream.dev.broker.config import BrokerLayout
from rollstream.dev.broker.secure import SecureFiles, make_material
from rollstream.errors import BrokerError
from rollstream.host import HOST
from rollstream.settings import StatePaths


def _secure(tmp_path: Path, prefix: str = "rollstream") -> LocalBroker:
    broker = LocalBroker(
        BrokerSettings(secure=True, port=0, data_dir=tmp_path / "kafka"),
        StatePaths(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache"),
        record_state=False,
        outlive_parent=False,
        topic_prefix=prefix,
    )
    return broker


@pytest.mark.parametrize(
    "failure",
    [
        BrokerError("creating 3 ACLs failed"),
        OSError("ca.pem: no such file"),
        KeyboardInterrupt(),
    ],
    ids=["refused", "unreadable-material", "interrupted"],
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

    def apply(files: Any, bootstrap: str, rules: list[Any]) -> bool:
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


def test_an_unreachable_broker_fails_the_step_with_a_broker_error(tmp_path: Path) -> None:
    # In a process of its own: kafka-python leaves its bootstrap sockets to the garbage
    # collector when bootstrapping fails, which pytest would report in whichever test is next.
    files = SecureFiles(tmp_path / "secrets")
    make_material(files, service_principals())
    with socket.socket() as unused:
        unused.bind((HOST, 0))  # bound, never listening: connections are refused
        script = (
            "from pathlib import Path\n"
            "from rollstream.dev.broker import acls\n"
            "from rollstream.dev.broker.secure import SecureFiles\n"
            "from rollstream.errors import BrokerError\n"
            f"files = SecureFiles(Path({str(files.root)!r}))\n"
            "try:\n"
            f"    acls.apply(files, '{HOST}:{unused.getsockname()[1]}', acls.plan('r'), 2.0)\n"
            "except BrokerError as exc:\n"
            "    print('BrokerError:', exc)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("BrokerError: creating the ACLs: the broker at"), done.stdout
    assert "did not answer" in done.stdout
    assert not acls.marker_path(files).exists()


def test_the_bindings_are_the_table_one_by_one() -> None:
    rules = plan("p")
    bound = acls.bindings(rules)
    assert len(bound) == sum(len(r.operations) * len(r.resources) for r in rules)
    topics = [b for b in bound if b.principal == "User:topics"]
    assert {b.operation.name for b in topics} == {"CREATE", "DESCRIBE", "DESCRIBE_CONFIGS"}
    assert {
        (b.resource_pattern.resource_name, b.resource_pattern.pattern_type.name) for b in topics
    } == {("p", "PREFIXED")}
    assert {b.permission_type.name for b in bound} == {"ALLOW"}
