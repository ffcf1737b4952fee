"""The "own" loop (alias "custom"): the algorithm trains itself in `train(ctx)`.

For methods whose loop does not fit off-policy or offline (PPO-style rollouts, offline-to-
online pipelines, wrappers around other libraries). The algorithm still uses the context for
env steps, the schedule (`ctx.due`), logs, evaluations and checkpoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roborl.core.interfaces import Algorithm

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


def own_loop(ctx: TrainContext) -> Algorithm:
    env = ctx.make_env(seed=ctx.run.seed)
    try:
        algo = ctx.build_algorithm(env.observation_space, env.action_space)
    finally:
        env.close()
    ctx.attach(algo)
    ctx.resume(algo)
    ctx.begin("steps")
    algo.train(ctx)
    return algo
