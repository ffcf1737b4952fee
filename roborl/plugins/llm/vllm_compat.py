"""Start an in-process vLLM engine safely next to other libraries.

Without Triton (vLLM's CPU build, where roborl uninstalls Triton: its LLVM crashes next to
MuJoCo's EGL), vLLM 0.32 registers C++ kernel overrides by scanning every attribute of every
imported module and calling ``vars(value).get(...)``. llvmlite (imported by numba, which
``rliable``/``arch`` import) keeps an object whose ``__dict__`` is a function wrapper, so the
scan dies with ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'`` whenever
numba was imported first. `start_engine` hides such attributes for the length of the engine's
start-up and puts them back afterwards; nothing changes where Triton is installed (GPU vLLM).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def _breaks_vars_scan(value: Any) -> bool:
    """True for an object that vLLM's scan would choke on (no mapping behind ``vars``)."""
    if isinstance(value, (type, types.ModuleType, types.FunctionType)):
        return False
    try:
        if not hasattr(value, "__dict__"):
            return False
        return not isinstance(vars(value), Mapping)
    except Exception:
        return True


@contextmanager
def kernel_scan_guard() -> Iterator[int]:
    """Temporarily remove module attributes that break vLLM's kernel-override scan.

    Yields how many attributes were hidden; they are restored on exit, even on error.
    """
    hidden: list[tuple[dict[str, Any], str, Any]] = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if _breaks_vars_scan(value):
                hidden.append((namespace, name, value))
    for namespace, name, _ in hidden:
        del namespace[name]
    try:
        yield len(hidden)
    finally:
        for namespace, name, value in hidden:
            namespace[name] = value


def _triton_missing() -> bool:
    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        return False
    return not HAS_TRITON


def start_engine(**engine_args: Any) -> Any:
    """``vllm.LLM(**engine_args)``, guarded against the scan bug when Triton is absent."""
    import vllm

    if not _triton_missing():
        return vllm.LLM(**engine_args)
    with kernel_scan_guard():
        return vllm.LLM(**engine_args)
