"""compose/tasks/hello.yaml is a task the stack's node accepts and its scorer can score."""

from __future__ import annotations

import ast
import re

import yaml

from rollstream.consumers.score.evaluators.registry import EVALUATORS
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.producers.node.api import task_from_document
from tests.compose.stack import COMPOSE_DIR, Stack, base_doc

TASK_FILE = COMPOSE_DIR / "tasks" / "hello.yaml"


def test_the_node_accepts_the_example_task() -> None:
    task = task_from_document(yaml.safe_load(TASK_FILE.read_text()))
    assert task.harness == "python"
    assert task.samples > 1  # a group GRPO can compare
    module, _, function = task.metadata["harness.function"].partition(":")
    source = task.workspace.files[f"{module}.py"]
    tree = ast.parse(source)
    runs = [n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == function]
    assert [len(r.args.args) for r in runs] == [4]  # (base_url, session, instruction, workdir)


def test_the_scorer_knows_the_example_evaluator_and_its_default() -> None:
    task = task_from_document(yaml.safe_load(TASK_FILE.read_text()))
    assert task.evaluator is not None
    assert task.evaluator.kind in EVALUATORS
    pattern = re.compile(task.evaluator.config["pattern"])
    assert pattern.search("x" * 40)
    assert not pattern.search("x" * 39)
    default = Stack(base_doc()).settings("scorer", ScoreSettings).default_evaluator
    assert default in EVALUATORS
