"""roborl's built-in training loops and collectors, registered like any plugin's.

This module is the `loops` entry point of the ``roborl.plugins`` group: the runner finds
"offpolicy", "offline" and "own" through the `roborl_loops` hook and "vector" through
`roborl_collectors`, exactly as it finds a third-party loop or collector. Nothing here is
imported until a loop runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from roborl.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from roborl.core.context import TrainContext
    from roborl.core.interfaces import Algorithm
    from roborl.core.loops.collectors import Collector


def _offpolicy(ctx: TrainContext) -> Algorithm:
    from roborl.core.loops.offpolicy import offpolicy_loop

    return offpolicy_loop(ctx)


def _offline(ctx: TrainContext) -> Algorithm:
    from roborl.core.loops.offline import offline_loop

    return offline_loop(ctx)


def _own(ctx: TrainContext) -> Algorithm:
    from roborl.core.loops.own import own_loop

    return own_loop(ctx)


def _vector(ctx: TrainContext) -> Collector:
    from roborl.core.loops.collectors import VectorCollector

    return VectorCollector(ctx)


@hookimpl
def roborl_loops() -> Mapping[str, Callable[[Any], Any]]:
    return {"offpolicy": _offpolicy, "offline": _offline, "own": _own, "custom": _own}


@hookimpl
def roborl_collectors() -> Mapping[str, Callable[[Any], Any]]:
    return {"vector": _vector}
