"""The generated broker configuration and port choice."""

from __future__ import annotations

import socket
from pathlib import Path

from rollstream.dev.broker.config import (
    MAX_MESSAGE_BYTES,
    BrokerLayout,
    new_cluster_id,
    pick_port,
    port_is_free,
    render_log4j2_properties,
    render_server_properties,
)


def _props(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def test_server_properties_for_one_combined_node(tmp_path: Path) -> None:
    layout = BrokerLayout(tmp_path, port=19092, controller_port=19093)
    props = _props(render_server_properties(layout))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["message.max.bytes"] == str(MAX_MESSAGE_BYTES) == str(16 * 1024 * 1024)
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 16 * 1024 * 1024
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
    ):
        assert props[key] == "1", key
    assert "controller.quorum.voters" not in props  # dynamic quorum: format --standalone


def test_overrides_win(tmp_path: Path) -> None:
    layout = BrokerLayout(tmp_path, 1, 2)
    props = _props(render_server_properties(layout, {"num.partitions": "3"}))
    assert props["num.partitions"] == "3"


def test_log4j2_writes_the_server_log(tmp_path: Path) -> None:
    layout = BrokerLayout(tmp_path, 1, 2)
    text = render_log4j2_properties(layout)
    assert f"appender.file.fileName = {tmp_path / 'logs' / 'server.log'}" in text
    assert "rootLogger.level = INFO" in text  # the readiness line is logged at INFO


def test_cluster_id_is_22_base64url_characters() -> None:
    ids = {new_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    for cid in ids:
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_a_taken_port_is_replaced_by_a_free_one() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        assert not port_is_free(taken)
        other = pick_port(taken)
        assert other != taken and port_is_free(other)
    assert pick_port(0) > 0
