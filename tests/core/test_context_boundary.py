"""Plugins use the TrainContext through its public surface only.

Walks the AST of every module under roborl/plugins, roborl/robots and roborl/sim and fails on
any attribute write to the context or the runner (`ctx.x = ...`, `ctx.x += ...`,
`ctx.x[k] = ...`, `setattr(ctx, ...)`, `del ctx.x`) and any access to one of their private names (`ctx._x`).
The context is whatever is called `ctx`, `context` or `runner`, `self.ctx`-style attributes of
those names, and any parameter or variable annotated `TrainContext` or `Runner`. The checker is
itself tested on snippets that break each rule, so it cannot silently pass everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "roborl"
PACKAGES = ("plugins", "robots", "sim")
CONTEXT_NAMES = {"ctx", "context", "runner", "train_ctx"}
CONTEXT_TYPES = {"TrainContext", "Runner"}


def _annotated_names(tree: ast.AST) -> set[str]:
    """Names annotated with a context type anywhere in the module."""
    names = set()
    for node in ast.walk(tree):
        ann, name = None, None
        if isinstance(node, ast.arg):
            ann, name = node.annotation, node.arg
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann, name = node.annotation, node.target.id
        if ann is None or name is None:
            continue
        text = ast.unparse(ann)
        if any(t in text for t in CONTEXT_TYPES):
            names.add(name)
    return names


def violations(source: str, filename: str = "<snippet>") -> list[str]:
    tree = ast.parse(source, filename)
    names = CONTEXT_NAMES | _annotated_names(tree)

    def is_ctx(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Attribute):  # self.ctx, self._runner, obj.context
            return node.attr.lstrip("_") in names
        return False

    def where(node: ast.AST) -> str:
        return f"{filename}:{getattr(node, 'lineno', '?')}: {ast.unparse(node)[:80]}"

    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        flat: list[ast.AST] = []
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            else:
                flat.append(t)
        for t in flat:
            while isinstance(t, ast.Subscript):  # ctx.extra_state["k"] = v mutates it too
                t = t.value
            if isinstance(t, ast.Attribute) and is_ctx(t.value):
                found.append(f"writes an attribute of the context: {where(node)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and is_ctx(node.args[0])
        ):
            found.append(f"{node.func.id} on the context: {where(node)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("__setattr__", "__delattr__")
            and node.args
            and is_ctx(node.args[0])
        ):
            found.append(f"{node.func.attr} on the context: {where(node)}")
        if (
            isinstance(node, ast.Attribute)
            and is_ctx(node.value)
            and node.attr.startswith("_")
            and not (node.attr.startswith("__") and node.attr.endswith("__"))
        ):
            found.append(f"touches a private name of the context: {where(node)}")
    return found


def _modules() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30, "the walk found too few modules; did the layout change?"
    return files


def test_plugins_use_only_the_public_context() -> None:
    found = []
    for path in _modules():
        found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "snippet",
    [
        "def train(self, ctx):\n    ctx.step = 5\n",
        "def train(self, ctx):\n    ctx.episodes += 1\n",
        "def loop(runner, ckpt):\n    runner._buffer = b\n",
        "def loop(runner, ckpt):\n    runner.ray_stats: dict = {}\n",
        "def loop(runner):\n    a, runner.step = 1, 2\n",
        "def loop(runner):\n    del runner.step\n",
        "def loop(runner):\n    runner.extra_state['ray'] = {}\n",
        "def loop(ctx):\n    ctx.extra['a']['b'] += 1\n",
        "def loop(ctx):\n    setattr(ctx, 'step', 3)\n",
        "def loop(ctx):\n    object.__setattr__(ctx, '_step', 3)\n",
        "def loop(ctx):\n    return ctx._step\n",
        "def loop(ctx):\n    ctx._open()\n",
        "class C:\n    def start(self):\n        self.ctx.step = 1\n",
        "class C:\n    def start(self):\n        return self.ctx._np_rng\n",
        "def go(trainer: 'TrainContext'):\n    trainer.updates = 0\n",
        "def go(r: Runner):\n    print(r._host)\n",
    ],
)
def test_the_checker_catches_each_kind_of_violation(snippet: str) -> None:
    assert violations(snippet), f"not caught:\n{snippet}"


@pytest.mark.parametrize(
    "snippet",
    [
        "def train(self, ctx):\n    ctx.advance(env_steps=1)\n    x = ctx.step\n",
        "def train(self, ctx):\n    self.step = ctx.step\n    ctx.log({'a': 1})\n",
        "def f(ctx):\n    return ctx.__class__\n",
        "def f(ds):\n    ds._tensors = {}\n",
    ],
)
def test_the_checker_allows_public_use(snippet: str) -> None:
    assert not violations(snippet)
