"""host-network.yml and local-kafka.yml, read statically (test_live.py runs them for real)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.compose import checks, host_checks
from tests.compose.stack import (
    HOST_FILE,
    LOCAL_KAFKA_FILE,
    Doc,
    Reset,
    Stack,
    host_doc,
    load_yaml,
    merge,
)
from tests.compose.test_compose import _env, validator

#: Ports of a machine where the defaults are taken (what the live test does).
MOVED = {
    "KAFKA_HOST_PORT": "29092",
    "KAFKA_CONTROLLER_HOST_PORT": "29093",
    "INFERENCE_HOST_PORT": "28000",
    "INTERCEPTOR_HOST_PORT": "28100",
    "INTERCEPTOR_ADMIN_HOST_PORT": "28101",
    "NODE_HOST_PORT": "28200",
}


@pytest.mark.parametrize("doc", [host_doc, lambda: host_doc(LOCAL_KAFKA_FILE)])
def test_the_merged_files_match_the_compose_specification(doc: Callable[[], Doc]) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(doc())]
    assert errors == []


def test_reset_and_override_merge_as_compose_does() -> None:
    base = {"a": {"ports": ["1:1"], "networks": {"n": None}, "command": ["x"], "v": ["/a:/a"]}}
    over = {
        "a": {
            "ports": Reset([]),
            "networks": Reset({}),
            "command": ["y"],
            "v": Reset(["/b:/b"], True),
        }
    }
    assert merge(base, over) == {"a": {"command": ["y"], "v": ["/b:/b"]}}
    assert merge({"volumes": ["/a:/a"]}, {"volumes": ["/b:/b"]}) == {"volumes": ["/a:/a", "/b:/b"]}
    with pytest.raises(ValueError, match="sequence"):
        merge({"dns": ["1.1.1.1"]}, {"dns": ["8.8.8.8"]})
    assert "ports" in load_yaml(HOST_FILE)["services"]["kafka"]  # the anchor's !reset, kept


@pytest.mark.parametrize("variables", [{}, MOVED], ids=["defaults", "moved-ports"])
@pytest.mark.parametrize("local_kafka", [False, True], ids=["apache-kafka", "local-kafka"])
def test_every_address_is_a_port_on_loopback_that_a_service_listens_on(
    variables: dict[str, str], local_kafka: bool
) -> None:
    stack = Stack(host_doc(*([LOCAL_KAFKA_FILE] if local_kafka else [])), variables)
    assert host_checks.check_host_mode(stack) == []
    assert host_checks.check_host_ports(stack) == []
    assert host_checks.check_bound_to_loopback(stack) == []
    assert checks.check_dependencies(stack) == []
    assert checks.check_settings_values(stack) == []
    interceptor = stack.environment("interceptor")
    port = variables.get("INTERCEPTOR_HOST_PORT", "8100")
    assert interceptor["ROLLSTREAM_INTERCEPTOR_PORT"] == port
    assert stack.environment("node")["ROLLSTREAM_NODE_BASE_URL"] == f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("edit", "check", "expected"),
    [
        (
            lambda d: d["services"]["scorer"].pop("network_mode"),
            host_checks.check_host_mode,
            "scorer: not on the host's network",
        ),
        (
            lambda d: d["services"]["backend"].update(networks={"default": {"aliases": ["x"]}}),
            host_checks.check_host_mode,
            "backend: networks",
        ),
        (
            _env("node", ROLLSTREAM_NODE_BASE_URL="http://interceptor:8100"),
            host_checks.check_host_ports,
            "node: base_url -> interceptor:8100, not 127.0.0.1",
        ),
        (
            _env("scorer", ROLLSTREAM_BOOTSTRAP_SERVERS="127.0.0.1:9092"),
            host_checks.check_host_ports,
            "profiles []: scorer: bootstrap_servers -> 9092",
        ),
        (
            _env("node", ROLLSTREAM_NODE_PORT="8101"),
            host_checks.check_host_ports,
            "profiles []: interceptor and node on 8101",
        ),
        (
            _env("interceptor", ROLLSTREAM_INTERCEPTOR_HOST="0.0.0.0"),
            host_checks.check_bound_to_loopback,
            "interceptor: binds 0.0.0.0",
        ),
    ],
    ids=["bridge", "network-alias", "service-name", "wrong-broker", "port-twice", "all-interfaces"],
)
def test_a_broken_host_stack_is_caught(
    edit: Callable[[Doc], Any], check: Callable[[Stack], list[str]], expected: str
) -> None:
    assert check(Stack(host_doc())) == []
    doc = host_doc()
    edit(doc)
    problems = check(Stack(doc))
    assert any(p.startswith(expected) for p in problems), problems
