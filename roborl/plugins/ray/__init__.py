"""Distributed collection on Ray: `roborl train collector=ray ray.num_workers=N`
(`distributed=ray` is the older spelling of the same thing).

Rollout workers are Ray actors, each with its own vector env and a copy of the policy; the
off-policy loop in this process owns the replay buffer and the algorithm, takes transitions
from the workers as they arrive, and pushes weights back every `ray.sync_every` env steps.
See `roborl.plugins.ray.loop` and docs/scaling.md. `ray` is imported only when collection
starts.

`roborl tune` sweeps `roborl train` runs: as Ray Tune trials (`roborl.plugins.ray.sweep`), or
as an Optuna study whose pruner stops unpromising trials (`sampler=optuna`,
`roborl.plugins.ray.optuna_sweep`, through this plugin's `roborl_should_stop`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from roborl.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from roborl.core.context import TrainContext
    from roborl.core.loops.collectors import Collector


def _ray_collector(ctx: TrainContext) -> Collector:
    if ctx.config.get("robot"):
        from roborl.core.errors import ConfigError

        raise ConfigError(
            "collector=ray (distributed=ray) cannot drive a real robot: each Ray rollout worker "
            "would open its own driver on the one robot, and nothing would keep the learner's "
            "updates out of the control loop. Use the actor-learner split, collector=actor_learner "
            "(an actor process beside the robot; docs/robots.md), or drop collector=ray / "
            "distributed=ray: with robot= roborl uses the robot collector (whole episodes at "
            "the control rate, updates while the robot holds between episodes)."
        )
    from roborl.plugins.ray.loop import RayCollector

    return RayCollector(ctx)


def _cmd_tune(argv: list[str]) -> int:
    """sweep `roborl train` runs as Ray Tune trials, or an Optuna study that prunes"""
    from roborl.plugins.ray.sweep import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"tune": _cmd_tune}


@hookimpl
def roborl_collectors() -> dict[str, Callable[..., Any]]:
    return {"ray": _ray_collector}


@hookimpl
def roborl_should_stop(step: int, updates: int, metrics: Mapping[str, float]) -> str | None:
    """In a trial of `roborl tune sampler=optuna` only: report the evaluation to the study and
    stop the run when its pruner prunes the trial (`roborl.plugins.ray.optuna_sweep`)."""
    spec = os.environ.get("ROBORL_OPTUNA_TRIAL")
    if not spec:
        return None
    from roborl.plugins.ray.optuna_sweep import report_and_prune

    return report_and_prune(spec, step or updates, metrics)


@hookimpl
def roborl_config_sections() -> dict[str, str]:
    return {"ray": "Ray rollout workers for collector=ray (workers, cluster address, sync)"}
