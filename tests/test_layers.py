"""The product does not import the reference backend (a development tool beside it).

The model-family layer is the bottom of the house under the product parts: the interceptor,
the producers, the consumers (reconstruction, scoring, the trainer client) and the report use
it, and none of them, nor it, may reach into ``rollstream.backend``. Checked on the source, so
a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rollstream

PRODUCT = ("models", "interceptor", "producers", "consumers", "report", "schemas")
BACKEND = "rollstream.backend"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_the_product_never_imports_the_reference_backend() -> None:
    root = Path(rollstream.__file__).parent
    offenders = {
        str(path.relative_to(root)): sorted(
            n for n in _imports(path) if n == BACKEND or n.startswith(BACKEND + ".")
        )
        for part in PRODUCT
        for path in sorted((root / part).rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from rollstream.backend.tokenizer import x\n")
    assert "rollstream.backend.tokenizer" in _imports(module)
