"""The check that a compiled loss failing on its first call leaves no stray gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from roborl.core.interfaces import Batch


def assert_failed_compile_retries_cleanly(plain: Any, failing: Any, data: Batch) -> None:
    """Two identical algorithms; `failing`'s compiled loss runs a backward pass, then fails.
    The eager retry must start from zeroed gradients (`reset`), so its step equals `plain`'s
    and the gradients are not doubled by the failed attempt."""

    def broken(*args: Any) -> None:
        failing._losses(*args)[0].backward()  # gradients written, then the failure
        raise RuntimeError("compiled graph failed")

    failing._loss_call.compiled, failing._loss_call.checked = broken, False
    torch.manual_seed(4)
    plain.update(data)
    torch.manual_seed(4)
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        failing.update(data)
    for pa, pb in zip(plain.critic.parameters(), failing.critic.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad)
