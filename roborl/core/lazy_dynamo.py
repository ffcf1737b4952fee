"""Keep `torch._dynamo` unimported until something compiles.

torch's optimiser `step` (its `_use_grad_for_differentiable` wrapper) imports `torch._dynamo` on
every call, only to place `graph_break()` calls that do nothing outside a trace; torch marks
`Optimizer.add_param_group`, `state_dict`, `load_state_dict` and friends with
`torch._disable_dynamo`, whose wrapper imports `torch._dynamo` on the first call only to mark
the method "never trace". That import took ~2 s of a roborl process on a 2-core CPU (a tenth
of a 100k-step random-action run, issue 23), and every algorithm builds an optimiser. Nothing
can be traced before `torch._dynamo` is imported, so until then calling the plain method is
exactly what the disabled one does. `defer_dynamo_import()` gives each such method that
behaviour, and hands over to torch's own `torch._dynamo.disable` on the first call after
`torch._dynamo` is loaded (`torch.compile` loads it), so compiled runs are unchanged.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch._compile


def _disable_wrapper_parts(attr: Any) -> tuple[Callable[..., Any], bool] | None:
    """(fn, recursive) when `attr` is `torch._disable_dynamo`'s wrapper around `fn`."""
    code = getattr(attr, "__code__", None)
    if code is None or code.co_filename != torch._compile.__file__ or code.co_name != "inner":
        return None
    cells = dict(zip(code.co_freevars, attr.__closure__ or (), strict=False))
    if "fn" not in cells or "recursive" not in cells:
        return None
    return cells["fn"].cell_contents, bool(cells["recursive"].cell_contents)


def _plain_until_dynamo(fn: Callable[..., Any], recursive: bool) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(fn, recursive, wrapping=False)
        fn.__dynamo_disable = disabled  # type: ignore[attr-defined]  # torch's own cache slot
        return disabled(*args, **kwargs)

    return call


# torch.optim deletes its submodules' names from the package; the module itself stays imported.
_OPTIMIZER_FILE = importlib.import_module("torch.optim.optimizer").__file__


def _use_grad_step(attr: Any) -> Callable[..., Any] | None:
    """The step function inside torch's `_use_grad_for_differentiable` wrapper around `attr`
    (None when `attr` is not that wrapper)."""
    code = getattr(attr, "__code__", None)
    if code is None or code.co_filename != _OPTIMIZER_FILE:
        return None
    return getattr(attr, "__wrapped__", None) if code.co_name == "_use_grad" else None


def _step_until_dynamo(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapper` (torch's `_use_grad`) without its `import torch._dynamo`: the same grad mode
    around `fn`; its `torch._dynamo.graph_break()` calls do nothing outside a trace, and no
    trace can exist before `torch._dynamo` is imported. Once it is, torch's wrapper runs."""

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return wrapper(*args, **kwargs)
        prev = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(args[0].defaults["differentiable"])
            return fn(*args, **kwargs)
        finally:
            torch.set_grad_enabled(prev)

    return step


def _subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


def defer_dynamo_import() -> int:
    """Make torch's optimisers stop importing `torch._dynamo` (see the module docstring).

    Returns how many methods were deferred (0 once `torch._dynamo` is already loaded: then
    there is nothing to save, and torch's behaviour is left as it is).
    """
    if "torch._dynamo" in sys.modules:
        return 0
    count = 0
    for cls in _subclasses(torch.optim.Optimizer):
        step = vars(cls).get("step")
        fn = _use_grad_step(step)
        if fn is not None:  # not yet wrapped by an instance's profiling hook
            cls.step = _step_until_dynamo(step, fn)  # type: ignore[method-assign]
            count += 1
        for attr in vars(cls).values():
            parts = _disable_wrapper_parts(attr)
            if parts is None:
                continue
            fn, recursive = parts
            if getattr(fn, "__dynamo_disable", None) is None:
                fn.__dynamo_disable = _plain_until_dynamo(fn, recursive)  # type: ignore[attr-defined]
                count += 1
    return count
