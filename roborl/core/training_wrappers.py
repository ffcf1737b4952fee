"""Wrappers that only training envs get, by config key (a person in the loop, issue 49).

A scripted or real person stepping in belongs to training: evaluation measures the policy
alone. Core names no such wrapper: a plugin provides one through the `roborl_training_wrappers`
hook under the top-level config key that turns it on (`roborl.hil` provides
``scripted_person``), and `make_vec_env` applies each whose key is set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roborl.core.plugins import Registry

Maker = Callable[[], Any]
TrainingWrapper = Callable[[Mapping[str, Any], Maker], Maker]
"""``wrap(cfg, maker) -> maker``: the env `maker` builds, wrapped as the config asks."""


def with_training_wrappers(registry: Registry, cfg: Mapping[str, Any], maker: Maker) -> Maker:
    """`maker`, wrapped by every registered wrapper whose config key is set."""
    for key in sorted(registry.training_wrappers):
        if cfg.get(key) not in (None, False):
            wrap: TrainingWrapper = registry.get("training_wrappers", key)
            maker = wrap(cfg, maker)
    return maker
