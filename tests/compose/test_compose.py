"""compose/, checked statically: the Compose schema, our CLI, our settings classes, the image.

Nothing is started here (test_live.py runs the stack): the files are read as Compose reads them
(tests/compose/stack.py) and every command, variable, port and address is checked against the
code that will consume it (tests/compose/checks.py). Each check also gets a broken variant.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from rollstream.consumers.score.settings import ScoreSettings
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.node.settings import NodeSettings
from tests.compose import checks
from tests.compose.docker_build import (
    dockerfile_env,
)
from tests.compose.stack import (
    BASE_FILE,
    CLUSTER_FILE,
    COMMAND_SETTINGS,
    COMPOSE_DIR,
    ENV_EXAMPLE,
    HOST_FILE,
    LOCAL_KAFKA_FILE,
    REQUIRED,
    SCHEMA_FILE,
    SECURE_KAFKA_FILE,
    CommandError,
    Doc,
    Stack,
    VarRef,
    base_doc,
    class_env_names,
    cluster_doc,
    global_env_names,
    help_env_names,
    interpolate,
    load_yaml,
    parse_env_file,
    resolve_command,
    variable_refs,
    walk_strings,
)

ROLLSTREAM_ENV = COMPOSE_DIR / "rollstream.env"


def broken(edit: Callable[[Doc], Any]) -> Stack:
    """The base stack after ``edit`` changed its (uninterpolated) document."""
    doc = base_doc()
    edit(doc)
    return Stack(doc)


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# --- the files and the Compose specification ---------------------------------------------------


@pytest.mark.parametrize("doc", [base_doc, lambda: load_yaml(CLUSTER_FILE), cluster_doc])
def test_compose_files_match_the_compose_specification(doc: Callable[[], Doc]) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(doc())]
    assert errors == []


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["services"]["kafka"].update(healthchek={"test": ["CMD", "true"]}),
        lambda d: d["services"]["kafka"].update(ports="19092:19092"),
        lambda d: d["services"]["node"]["depends_on"]["interceptor"].update(condition="ready"),
        lambda d: d.update(service={}),
    ],
    ids=["unknown-key", "ports-not-a-list", "bad-condition", "unknown-top-level"],
)
def test_the_schema_rejects_a_broken_file(edit: Callable[[Doc], Any]) -> None:
    doc = base_doc()
    edit(doc)
    assert list(validator().iter_errors(doc))


def test_the_vendored_schema_is_the_one_its_notice_names() -> None:
    notice = SCHEMA_FILE.with_name("compose-spec.NOTICE").read_text()
    digest = hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest()
    assert f"sha256 {digest}" in notice
    assert "Apache License" in SCHEMA_FILE.with_name("compose-spec.LICENSE").read_text()


# --- variables ----------------------------------------------------------------------------------


def test_interpolation_follows_compose() -> None:
    assert interpolate("${A:-x}/${B-y}/$$HOME", {"B": ""}) == "x//$HOME"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A:+set}${B:+set}", {"A": "1"}) == "set"
    assert interpolate("$A-${A}", {"A": "v"}) == "v-v"
    assert variable_refs("${KAFKA_CLUSTER_ID:-T6-x}") == [VarRef("KAFKA_CLUSTER_ID", ":-", "T6-x")]
    with pytest.raises(ValueError, match="needed"):
        interpolate("${A:?needed}", {})


def test_every_compose_variable_has_a_default_listed_in_env_example() -> None:
    refs = [
        ref
        for path in (BASE_FILE, CLUSTER_FILE, HOST_FILE, LOCAL_KAFKA_FILE, SECURE_KAFKA_FILE)
        for text in walk_strings(load_yaml(path))
        for ref in variable_refs(text)
    ]
    example = parse_env_file(ENV_EXAMPLE)
    # Only the tokens are required (no default a deployment could keep by mistake); the
    # example leaves them empty, which Compose refuses as it refuses them unset.
    required = [r for r in refs if r.op == ":?"]
    assert {r.name for r in required} == set(REQUIRED)
    assert all(example[r.name] == "" and "compose/README.md" in r.arg for r in required)
    assert [r for r in refs if r.op not in (":-", ":?")] == []
    assert {r.name for r in refs} == set(example)
    defaults = [r for r in refs if r.op == ":-"]
    assert {(r.name, r.arg) for r in defaults} == {
        (k, v) for k, v in example.items() if k not in REQUIRED
    }
    # So copying .env.example to .env (with the tokens filled in) changes nothing.
    assert Stack(cluster_doc(), example | REQUIRED).doc == Stack(cluster_doc()).doc
    for name in REQUIRED:
        with pytest.raises(ValueError, match=f"required variable {name}"):
            Stack(cluster_doc(), example | REQUIRED | {name: ""})


def test_every_control_plane_takes_its_token_and_the_interceptor_is_strict() -> None:
    """As each service's process builds its settings from the files and variables."""
    stack = Stack(base_doc())
    interceptor = stack.settings("interceptor", InterceptorSettings)
    node = stack.settings("node", NodeSettings)
    backend = stack.settings("backend", BackendSettings)
    trainer = stack.settings("example-trainer", ExampleTrainerSettings)
    admin = REQUIRED["INTERCEPTOR_ADMIN_TOKEN"]
    assert interceptor.strict_sessions
    assert interceptor.admin_token == node.interceptor_token == trainer.interceptor_token
    assert (
        interceptor.admin_token is not None and interceptor.admin_token.get_secret_value() == admin
    )
    assert node.api_token is not None
    assert node.api_token.get_secret_value() == REQUIRED["NODE_API_TOKEN"]
    assert backend.admin_token == trainer.backend_token
    assert backend.admin_token is not None
    assert backend.admin_token.get_secret_value() == REQUIRED["BACKEND_ADMIN_TOKEN"]
    # The consumers hold none: the scorer runs policy code.
    for name in ("reconstructor", "scorer"):
        assert not any("TOKEN" in k for k in stack.environment(name)), name


def test_the_services_running_policy_code_wall_it_and_only_they_hold_the_capability() -> None:
    """The node's harnesses and the scorer's checks get their own network namespaces."""
    stack = Stack(base_doc())
    assert stack.settings("node", NodeSettings).isolation == "namespace"
    assert stack.settings("scorer", ScoreSettings).isolation == "namespace"
    holders = {name for name, service in stack.doc["services"].items() if service.get("cap_add")}
    assert holders == {"node", "scorer"}
    for name in holders:
        assert stack.doc["services"][name]["cap_add"] == ["SYS_ADMIN"]


def test_changed_variables_reach_the_services() -> None:
    stack = Stack(base_doc(), {"TOOL_PARSER": "llama3_json", "SERVED_MODEL_NAME": "m"})
    command = stack.command("vllm")
    assert command[command.index("--tool-call-parser") + 1] == "llama3_json"
    assert stack.environment("node")["ROLLSTREAM_NODE_MODEL"] == "m"


def test_the_env_file_is_plain_key_value() -> None:
    values = parse_env_file(ROLLSTREAM_ENV)
    assert values
    assert [k for k, v in values.items() if "$" in v or v[:1] in "\"'"] == []


# --- commands and settings ---------------------------------------------------------------------


def test_every_service_runs_a_rollstream_command() -> None:
    stack = Stack(base_doc())
    assert checks.check_commands(stack) == []
    assert {stack.cli_path(n) for n in stack.rollstream_services()} == set(COMMAND_SETTINGS)


@pytest.mark.parametrize(
    "argv",
    [
        ["interceptr"],
        ["topics"],
        ["topics", "make"],
        ["reconstruct", "--strategi", "tree"],
        ["backend", "--port", "eighty"],
    ],
)
def test_a_command_that_is_not_ours_is_rejected(argv: list[str]) -> None:
    with pytest.raises(CommandError):
        resolve_command(argv)


def test_a_command_with_its_options_resolves() -> None:
    path, _ = resolve_command(["example-trainer", "--report", "/tmp/report.json", "--steps", "3"])
    assert path == ("example-trainer",)


def test_a_broken_service_command_is_reported() -> None:
    stack = broken(lambda d: d["services"]["scorer"].update(command=["scor"]))
    assert [p for p in checks.check_commands(stack) if p.startswith("scorer:")]


@pytest.mark.parametrize("path", sorted(COMMAND_SETTINGS))
def test_the_settings_mapping_is_what_each_command_reads(path: tuple[str, ...]) -> None:
    _, command = resolve_command(list(path))
    from_classes = set().union(*(class_env_names(cls) for cls in COMMAND_SETTINGS[path]))
    assert help_env_names(command) == from_classes


def test_every_rollstream_variable_names_a_setting() -> None:
    assert checks.check_env_names(Stack(base_doc())) == []
    assert checks.check_env_names(Stack(cluster_doc())) == []


@pytest.mark.parametrize(
    ("service", "key"),
    [
        ("interceptor", "ROLLSTREAM_INTERCEPTOR_UPSTREM"),
        # A real setting, but of another service's class.
        ("reconstructor", "ROLLSTREAM_NODE_PORT"),
    ],
)
def test_a_variable_that_is_no_setting_is_reported(service: str, key: str) -> None:
    stack = broken(
        lambda d: d["services"][service].setdefault("environment", {}).update({key: "1"})
    )
    assert checks.check_env_names(stack) == [
        f"{service}: {key} is no setting of rollstream {stack.command(service)}"
    ]


def test_the_dockerfile_sets_only_real_settings() -> None:
    names = [k for k in dockerfile_env() if k.startswith("ROLLSTREAM_")]
    assert names
    assert set(names) <= global_env_names()


def test_every_service_builds_its_settings() -> None:
    assert checks.check_settings_values(Stack(base_doc())) == []
    stack = broken(
        lambda d: d["services"]["interceptor"]["environment"].update(
            ROLLSTREAM_INTERCEPTOR_STREAM_MODE="buffered"
        )
    )
    assert [p for p in checks.check_settings_values(stack) if p.startswith("interceptor:")]


# --- ports, health, dependencies, addresses ------------------------------------------------------


def test_ports_healthchecks_and_addresses_agree_with_the_settings() -> None:
    stack = Stack(base_doc())
    assert checks.check_ports(stack) == []
    assert checks.check_healthchecks(stack) == []
    assert checks.check_addresses(stack) == []
    assert checks.listening_ports(stack, "interceptor") == {8100, 8101}
    assert checks.listening_ports(stack, "node") == {8200}


def _env(service: str, **values: str) -> Callable[[Doc], Any]:
    return lambda d: d["services"][service].setdefault("environment", {}).update(values)


@pytest.mark.parametrize(
    ("edit", "check", "expected"),
    [
        (
            lambda d: d["services"]["interceptor"]["healthcheck"]["test"].__setitem__(
                -1, "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8102/health')"
            ),
            checks.check_ports,
            "interceptor: healthcheck uses port 8102",
        ),
        (
            _env("node", ROLLSTREAM_NODE_PORT="8201"),
            checks.check_ports,
            "node: publishes 127.0.0.1:8200:8200, but listens on [8201]",
        ),
        (
            _env("interceptor", ROLLSTREAM_INTERCEPTOR_HOST="127.0.0.1"),
            checks.check_ports,
            "interceptor: listens on 127.0.0.1",
        ),
        (
            lambda d: d["services"]["node"].pop("healthcheck"),
            checks.check_healthchecks,
            "node: no healthcheck on http://127.0.0.1:8200/health",
        ),
        (
            _env("node", ROLLSTREAM_NODE_BASE_URL="http://interceptor:8000"),
            checks.check_addresses,
            "node: base_url -> interceptor:8000; interceptor not there",
        ),
        (
            _env("scorer", ROLLSTREAM_BOOTSTRAP_SERVERS="kafka:9093"),
            checks.check_addresses,
            "scorer: kafka:9093 is not advertised by kafka",
        ),
        (
            _env("interceptor", ROLLSTREAM_INTERCEPTOR_UPSTREAM="http://vlm:8000"),
            checks.check_addresses,
            "interceptor: upstream -> vlm:8000: no such service",
        ),
        (
            lambda d: d["services"]["interceptor"]["depends_on"]["vllm"].pop("required"),
            checks.check_dependencies,
            "profiles []: interceptor needs vllm, not enabled",
        ),
        (
            lambda d: d["services"]["node"]["depends_on"].update(
                reconstructor={"condition": "service_healthy"}
            ),
            checks.check_dependencies,
            "node: waits for reconstructor healthy; reconstructor has no healthcheck",
        ),
        (
            lambda d: d["services"]["topics"].update(restart="on-failure"),
            checks.check_dependencies,
            "interceptor: waits for topics to complete; topics restarts",
        ),
    ],
    ids=[
        "health-port",
        "published-port",
        "loopback-bind",
        "no-healthcheck",
        "wrong-interceptor-port",
        "controller-port",
        "unknown-host",
        "required-profile-dep",
        "healthy-without-healthcheck",
        "oneshot-restarts",
    ],
)
def test_a_broken_stack_is_caught(
    edit: Callable[[Doc], Any], check: Callable[[Stack], list[str]], expected: str
) -> None:
    assert check(Stack(base_doc())) == []  # the same check passes on the real stack
    problems = check(broken(edit))
    assert any(p.startswith(expected) for p in problems), problems


def test_dependencies_hold_under_every_profile() -> None:
    assert checks.check_dependencies(Stack(base_doc())) == []
    assert checks.check_dependencies(Stack(cluster_doc())) == []


def test_each_profile_starts_its_policy_server() -> None:
    stack = Stack(base_doc())
    core = {"kafka", "topics", "interceptor", "reconstructor", "scorer", "node"}
    assert stack.enabled(()) == core
    assert stack.enabled(("cpu",)) == core | {"backend", "example-trainer"}
    assert stack.enabled(("gpu",)) == core | {"vllm"}
    # Both answer to the interceptor's upstream host, one per profile.
    assert stack.names_on_network()["inference"] == ["vllm", "backend"]


def test_vllm_serves_with_tool_calls_on_a_gpu_under_the_shared_model_name() -> None:
    stack = Stack(base_doc())
    vllm = stack.services["vllm"]
    command = stack.command("vllm")
    assert vllm["entrypoint"] == ["vllm", "serve"]
    assert command[0] == "Qwen/Qwen2.5-7B-Instruct"
    assert "--enable-auto-tool-choice" in command
    assert command[command.index("--tool-call-parser") + 1] == "hermes"
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert "gpu" in device["capabilities"]
    served = command[command.index("--served-model-name") + 1]
    assert stack.environment("node")["ROLLSTREAM_NODE_MODEL"] == served
    assert stack.environment("backend")["ROLLSTREAM_BACKEND_MODEL"] == served
    assert stack.environment("interceptor")["ROLLSTREAM_INTERCEPTOR_UPSTREAM_MODEL"] == served
