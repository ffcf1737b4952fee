"""Benchmarks import roborl lazily (inside functions), so a refactor that moves a name breaks
them only when someone runs a long benchmark. Resolve every `from roborl... import name` in
`benchmarks/*.py` here instead, where it costs a second."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def roborl_imports(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) for each `from roborl... import name` anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("roborl"):
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
    return found


def unresolved(imports: list[tuple[str, str, int]]) -> list[str]:
    missing = []
    for module, name, line in imports:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: module {module} ({exc})")
            continue
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"line {line}: {module}.{name}")
    return missing


def test_checker_reports_a_moved_name(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text("def main():\n    from roborl.core.runner import no_such_name\n")
    assert unresolved(roborl_imports(script)) == ["line 2: roborl.core.runner.no_such_name"]


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_benchmark_imports_resolve(script: Path) -> None:
    imports = roborl_imports(script)
    assert unresolved(imports) == [], f"{script.name} imports names roborl no longer has"
