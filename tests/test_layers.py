"""The package's layers hold: import-linter's contracts in pyproject.toml, checked on the source.

The contracts: the product's layers from the contract (``schemas``) up to the interceptor, on the
producers and the consumers; the development tools (``rollstream.dev``) above the whole product
and never imported by it, the CLI on top; in the producers the rollout node on the capture
publisher (the node reaches the interceptor over HTTP only), in the consumers the trainer client
and export on reconstruction and scoring; and no import cycle between the modules of any
package. Imports inside functions count as much as those at the top of a module, and so do
imports made only for annotations (``if TYPE_CHECKING:``).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_import_contracts_are_kept() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


def test_the_contracts_see_a_lazy_import_of_a_tool_and_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "house"
    for part in ("product", "dev"):
        (package / part).mkdir(parents=True)
        (package / part / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "product" / "a.py").write_text(
        "def f():\n    from house.dev import tool\n\nimport house.product.b\n"
    )
    (package / "product" / "b.py").write_text("import house.product.a\n")
    (package / "dev" / "tool.py").write_text("import house.product.a\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_package = "house"\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "layers"\ntype = "layers"\nlayers = ["house.dev", "house.product"]\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "no cycles"\ntype = "acyclic_siblings"\nancestors = ["house"]\n'
    )
    result = _lint(tmp_path)
    assert result.returncode == 1
    assert "house.product is not allowed to import house.dev" in result.stdout
    assert "No cycles are allowed in house.product" in result.stdout


def test_a_cycle_through_imports_for_annotations_only_is_seen(tmp_path: Path) -> None:
    """As the project configures import-linter: a TYPE_CHECKING import is still a dependency.

    Two were hidden so (the pool and its admin port, the node's API and the node)."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    package = tmp_path / "house"
    (package / "product").mkdir(parents=True)
    for init in (package / "__init__.py", package / "product" / "__init__.py"):
        init.write_text("")
    (package / "product" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import house.product.b\n"
    )
    (package / "product" / "b.py").write_text("import house.product.a\n")
    flag = str(settings["exclude_type_checking_imports"]).lower()
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.importlinter]\nroot_package = "house"\nexclude_type_checking_imports = {flag}\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "no cycles"\ntype = "acyclic_siblings"\nancestors = ["house"]\n'
    )
    result = _lint(tmp_path)
    assert result.returncode == 1, result.stdout
    assert "No cycles are allowed in house.product" in result.stdout
