"""The offline loop: `total_updates` gradient updates on batches from `dataset=`, evaluated
online in the env on the same schedule (counted in updates, not env steps)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from roborl.core.interfaces import Algorithm

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


def offline_loop(ctx: TrainContext) -> Algorithm:
    """Check the data against the env, `prepare`, then update until `total_updates`."""
    from roborl.core.dataset_spaces import check_dataset_spaces

    dataset = ctx.load_dataset()
    env = ctx.make_env(seed=ctx.run.seed)
    try:
        env_cfg, robot_cfg = ctx.config.get("env") or {}, ctx.config.get("robot") or {}
        env_name = f"robot:{robot_cfg['name']}" if robot_cfg.get("name") else env_cfg.get("id")
        check_dataset_spaces(dataset, env.observation_space, env.action_space, str(env_name))
        action_space = env.action_space
    finally:
        env.close()
    refs = dataset.reference_returns
    if refs:
        ctx.set_extra("reference_returns", dict(refs))
    # The env's action bounds, not the data's: a file without recorded bounds would otherwise
    # scale the policy by the range of its (possibly out-of-bound) actions.
    algo = ctx.build_algorithm(dataset.observation_space, action_space)
    algo.set_total_updates(ctx.run.total_updates)
    prepared = algo.prepare(dataset)
    if prepared is not None:  # e.g. BC-safe trains on a subset
        dataset = prepared
    ctx.attach(algo)
    ctx.resume(algo)
    ctx.begin("updates")
    batch_size = int(algo.config.batch_size)
    sums: dict[str, Any] = defaultdict(float)
    count, t_log, u_log = 0, time.time(), ctx.updates
    while not ctx.finished:
        for k, v in algo.update(dataset.sample(batch_size, ctx.torch_gen)).items():
            sums[k] = sums[k] + (v.detach() if torch.is_tensor(v) else v)
        count += 1
        ctx.advance(updates=1)
        if ctx.due("log"):
            now = time.time()
            record = {f"train/{k}": float(v) / count for k, v in sums.items()}
            record["time/updates_per_s"] = (ctx.updates - u_log) / max(now - t_log, 1e-9)
            ctx.log(record)
            sums, count, t_log, u_log = defaultdict(float), 0, now, ctx.updates
        if ctx.due("eval"):
            ctx.evaluate(algo)
        if ctx.due("checkpoint"):
            ctx.checkpoint(algo)
    ctx.finish(algo)
    return algo
