"""The guard around vLLM's CPU start-up hides only what breaks its module scan, and restores it."""

from __future__ import annotations

import sys
import types

from roborl.plugins.llm.vllm_compat import kernel_scan_guard


class _DictLess:
    """Answers ``__dict__`` with a non-mapping, like llvmlite's ffi library wrapper."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        return lambda: None


def test_guard_hides_unscannable_attributes_and_restores_them() -> None:
    module = types.ModuleType("roborl_test_unscannable")
    module.bad = _DictLess()
    module.good = object()
    module.number = 3
    sys.modules[module.__name__] = module
    try:
        with kernel_scan_guard() as hidden:
            assert hidden >= 1
            assert not hasattr(module, "bad")
            assert module.good is not None and module.number == 3
        assert isinstance(module.bad, _DictLess)
    finally:
        del sys.modules[module.__name__]


def test_guard_restores_on_error() -> None:
    module = types.ModuleType("roborl_test_unscannable_err")
    module.bad = _DictLess()
    sys.modules[module.__name__] = module
    try:
        try:
            with kernel_scan_guard():
                raise RuntimeError("engine failed to start")
        except RuntimeError:
            pass
        assert isinstance(module.bad, _DictLess)
    finally:
        del sys.modules[module.__name__]
