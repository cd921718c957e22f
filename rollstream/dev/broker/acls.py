"""Least privilege on the secure broker: one principal per service, and only what it does.

``plan(prefix)`` is the whole table, pure, so that tests read it and the docs print it; each
rule becomes one run of Kafka's own ``AclCommand`` (kafka-tools, fetched with the broker's
jars), made as the ``admin`` super user once per table (a marker holds the table's digest).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from rollstream.dev.broker.secure import SecureFiles, client_properties, write_private
from rollstream.errors import BrokerError
from rollstream.schemas.topics import TopicNames

_MARKER = "acls.applied"


@dataclass(frozen=True)
class Rule:
    """``operations`` allowed to ``principal`` on each of ``resources`` (kind, name, pattern)."""

    principal: str
    operations: tuple[str, ...]
    resources: tuple[tuple[str, str, str], ...]


def _topics(*names: str) -> tuple[tuple[str, str, str], ...]:
    return tuple(("topic", name, "literal") for name in names)


def plan(prefix: str) -> list[Rule]:
    """Every principal's ACLs for the topics under ``prefix`` (least privilege per service).

    - interceptor: writes calls to events and its schemas; follows the control topic.
    - node: reads tasks in its group, writes sessions' lifecycle to events, submitted tasks to
      tasks and undecodable tasks to dead letters; follows the control topic.
    - reconstructor and scorer: read their input in their group, write their output, dead
      letters (and the reconstructor its state) in transactions under their own
      transactional-id prefix.
    - trainer: reads scored in a trainer's group, follows and publishes policy versions.
    - topics: creates and describes the topics (``rollstream topics create``).

    Every service reads the schemas topic. No service may create topics (a mistyped topic
    setting must fail, not make one), and group ids are not under the topic prefix, so each
    principal's groups are named by their own prefixes.
    """
    t = TopicNames(prefix)
    read = ("Read", "Describe")
    write = ("Write", "Describe")

    def group(principal: str, *names: str) -> Rule:
        return Rule(principal, ("Read",), tuple(("group", n, "prefixed") for n in names))

    def transactions(principal: str, name: str) -> Rule:
        return Rule(principal, write, (("transactional-id", name, "prefixed"),))

    return [
        Rule("interceptor", write, _topics(t.events, t.schemas)),
        Rule("interceptor", read, _topics(t.control, t.schemas)),
        Rule("node", read, _topics(t.tasks, t.control, t.schemas)),
        Rule("node", write, _topics(t.events, t.tasks, t.deadletters)),
        group("node", "rollstream-node"),
        Rule("reconstructor", read, _topics(t.events, t.schemas, t.state)),
        Rule("reconstructor", write, _topics(t.trajectories, t.deadletters, t.state)),
        group("reconstructor", "rollstream-reconstruct"),
        transactions("reconstructor", "rollstream-reconstruct"),
        Rule("scorer", read, _topics(t.trajectories, t.schemas)),
        Rule("scorer", write, _topics(t.scored, t.deadletters)),
        group("scorer", "scorer"),
        transactions("scorer", "scorer"),
        Rule("trainer", read, _topics(t.scored, t.control, t.schemas)),
        Rule("trainer", write, _topics(t.control)),
        group("trainer", "trainer", "example-trainer", "demo-trainer"),
        Rule("topics", ("Create", "Describe", "DescribeConfigs"), (("topic", prefix, "prefixed"),)),
    ]


def principals(rules: list[Rule]) -> list[str]:
    """The principals ``rules`` name, in order."""
    return list(dict.fromkeys(rule.principal for rule in rules))


def service_principals() -> list[str]:
    """Every service's principal (the same whatever the topic prefix)."""
    return principals(plan("rollstream"))


def _arguments(rule: Rule) -> list[str]:
    # The tool takes one pattern type per run: a rule's resources share theirs.
    patterns = {pattern for _, _, pattern in rule.resources}
    assert len(patterns) == 1, f"one pattern type per rule: {rule}"
    args = ["--add", "--allow-principal", f"User:{rule.principal}"]
    args += ["--resource-pattern-type", patterns.pop()]
    for operation in rule.operations:
        args += ["--operation", operation]
    for kind, name, _ in rule.resources:
        args += [f"--{kind}", name]
    return args


def apply(java: str, classpath: str, files: SecureFiles, bootstrap: str, rules: list[Rule]) -> bool:
    """Create ``rules`` on the broker as ``admin``, unless this very table was applied already.

    Returns whether it ran. A failing run raises a BrokerError with the tool's words.
    """
    digest = hashlib.sha256(json.dumps([asdict(r) for r in rules]).encode()).hexdigest()
    marker = marker_path(files)
    if marker.exists() and marker.read_text().strip() == digest:
        return False
    config = files.work_dir / "admin.properties"
    write_private(config, client_properties(files, "admin").encode())

    def run(rule: Rule) -> subprocess.CompletedProcess[str]:
        # A short-lived JVM: the client compiler alone starts it faster.
        cmd = [java, "-XX:TieredStopAtLevel=1", "-cp", classpath]
        cmd += ["org.apache.kafka.tools.AclCommand", "--bootstrap-server", bootstrap]
        cmd += ["--command-config", str(config), *_arguments(rule)]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)

    # A JVM per rule (the tool takes one operation set and pattern type per run): a few at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for rule, proc in zip(rules, pool.map(run, rules), strict=True):
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
                raise BrokerError(f"creating the ACLs of {rule.principal} failed:\n{tail}")
    marker.write_text(digest + "\n")
    return True


def marker_path(files: SecureFiles) -> Path:
    """Where the digest of the applied table is kept."""
    return files.work_dir / _MARKER
