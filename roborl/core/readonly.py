"""Read-only views of the run's config, so a loop can read every key but change none.

`TrainContext.config` and `TrainContext.algo_config` hand these out: a loop or plugin that
wrote into the config would change the run behind the runner's back (and the saved
config.yaml would no longer describe it).
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from typing import Any


def freeze(value: Any) -> Any:
    """Nested mappings as read-only `MappingProxyType`s, lists as tuples."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


class ReadOnlyView:
    """Attribute access to a config dataclass without the means to change it."""

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        return freeze(copy.deepcopy(getattr(self._target, name)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the run's config is read-only (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"ReadOnlyView({self._target!r})"
