"""roborl's floors: core <- plugins, sim, hil <- robots <- benchmarks. A module imports only from its
own floor or below, and two folders on one floor never import each other both ways (a cycle
that crosses folders). Every import counts, a deferred one inside a function too: it runs.

The check reads the source (`ast`), so it needs no import of anything it checks. Imports that
still run back up are listed in `KNOWN_UPWARD` with what would remove them; a new one fails, and
so does a listed one that is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {
    "roborl.core": 0,
    "roborl.plugins": 1,
    "roborl.sim": 1,
    "roborl.hil": 1,  # human in the loop: core reaches it through core.training_wrappers
    "roborl.robots": 2,
    "benchmarks": 3,
}
# (importing module, imported module): why it is still there.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def folder_of(module: str) -> str | None:
    """The floor's folder `module` lives in (None: outside the checked tree)."""
    for folder in FLOORS:
        if module == folder or module.startswith(folder + "."):
            return folder
    return None


def imports_of(source: str) -> list[tuple[str, int]]:
    """(absolute module, line) of every import in `source`; relative imports stay inside a
    package, so they never cross a floor."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cross_folder_imports(sources: dict[str, str]) -> dict[tuple[str, str], list[str]]:
    """(importing module, imported module) -> where, for imports that leave their folder."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, source in sources.items():
        home = folder_of(module)
        for imported, line in imports_of(source):
            there = folder_of(imported)
            if home and there and there != home:
                out[(module, imported)].append(f"{module}:{line}")
    return dict(out)


def upward(edges: dict[tuple[str, str], list[str]]) -> set[tuple[str, str]]:
    def floor(module: str) -> int:
        folder = folder_of(module)
        assert folder is not None
        return FLOORS[folder]

    return {(a, b) for a, b in edges if floor(b) > floor(a)}


def folder_cycles(edges: dict[tuple[str, str], list[str]]) -> set[tuple[str, str]]:
    """Pairs of folders on the same floor that import each other."""
    pairs = {(folder_of(a), folder_of(b)) for a, b in edges}
    return {
        (a, b) for a, b in pairs if a and b and a < b and (b, a) in pairs and FLOORS[a] == FLOORS[b]
    }  # across floors, one direction is upward: the other test's


def tree_sources() -> dict[str, str]:
    files = [*ROOT.joinpath("roborl").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py")]
    return {module_name(p): p.read_text() for p in files}


def test_no_import_runs_back_up_a_floor_beyond_the_known_ones() -> None:
    edges = cross_folder_imports(tree_sources())
    found = upward(edges)
    new = sorted(found - set(KNOWN_UPWARD))
    assert not new, "imports that run back up a floor: " + "; ".join(
        f"{a} -> {b} at {', '.join(edges[(a, b)])}" for a, b in new
    )
    gone = sorted(set(KNOWN_UPWARD) - found)
    assert not gone, f"no longer imported, remove from KNOWN_UPWARD: {gone}"


def test_no_two_folders_import_each_other() -> None:
    assert not folder_cycles(cross_folder_imports(tree_sources()))


def test_an_added_upward_import_fails_and_names_where() -> None:
    """The check itself: core importing a plugin, even deferred in a function, is upward; a
    plugin importing core is not; sim and plugins importing each other is a cycle."""
    sources = {
        "roborl.core.example": "def f():\n    from roborl.plugins.sac import SAC\n",
        "roborl.plugins.example": "from roborl.core.buffer import ReplayBuffer\n",
        "roborl.sim.a": "import roborl.plugins.example\n",
        "roborl.plugins.b": "from roborl.sim.a import x\n",
    }
    edges = cross_folder_imports(sources)
    assert upward(edges) == {("roborl.core.example", "roborl.plugins.sac")}
    assert edges[("roborl.core.example", "roborl.plugins.sac")] == ["roborl.core.example:2"]
    assert folder_cycles(edges) == {("roborl.plugins", "roborl.sim")}
    real = cross_folder_imports(tree_sources())
    assert not upward(real | edges) <= set(KNOWN_UPWARD)  # the real check would fail on it
