"""DSRL-style safe datasets (Liu et al., 2023, "Datasets and Benchmarks for Offline Safe RL").

`roborl dataset collect env=SAFE_TASK quality=safe-mixed cost_limits=[...]` trains a spread of
behaviour policies on a task that reports ``info["cost"]`` and records their transitions with
per-step costs:

- reward-only SAC (`sac`), which ignores costs and so produces high-return, unsafe behaviour;
- SAC-Lagrangian (`sac_lagrangian`) at each episode-cost budget in `cost_limits`, which trades
  return for cost.

For each policy the dataset holds the transitions of its training run (learning_starts random
steps, then the learning policy: a range of returns and costs, as DSRL's mixture of training
trajectories) and `steps` transitions of the final stochastic policy. The metadata records the
DSRL normalisation references: ``reference_returns`` = {min, max} and ``reference_costs`` =
{min, max} over the dataset's episodes, ``cost_limits`` and a ``policies`` table (algorithm,
budget, transitions, deterministic eval return/cost of the final policy).

Deviation from DSRL: DSRL trains many agents for 1e6+ steps per task and then filters the
trajectories to cover the return-cost plane evenly; here the budgets are the caller's and no
density filter is applied. SAC-Lagrangian's multiplier learning rate defaults to 3e-3 per update
here (`algo.lambda_lr=` overrides it) so that short collection runs still react to the budget.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from roborl.core.algorithms import build_algorithm
from roborl.core.datasets import OfflineDataset
from roborl.core.envs import make_env
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.core.spaces import space_to_dict

SAFE_LAMBDA_LR = 3e-3


def _episode_horizon(env: Any) -> int:
    spec = getattr(env, "spec", None)
    steps = getattr(spec, "max_episode_steps", None) if spec is not None else None
    return int(steps or getattr(env.unwrapped, "max_episode_steps", 0) or 1000)


def _eval(env: Any, algo: Any, episodes: int, seed: int) -> tuple[float, float]:
    """Mean deterministic (return, cost) over `episodes` episodes."""
    rets, costs = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        ret = cost = 0.0
        while True:
            obs, r, term, trunc, info = env.step(algo.act(obs[None], True)[0])
            ret, cost = ret + float(r), cost + float(info.get("cost", 0.0))
            if term or trunc:
                break
        rets.append(ret)
        costs.append(cost)
    return float(np.mean(rets)), float(np.mean(costs))


def collect_safe(
    env: str,
    steps: int = 5_000,
    train_steps: int = 20_000,
    learning_starts: int = 2_000,
    cost_limits: Sequence[float] = (5.0, 25.0),
    ref_episodes: int = 5,
    seed: int = 0,
    algo_overrides: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = print,
    env_config: Callable[[str], dict[str, Any]] | None = None,
    recorder: Callable[..., Any] | None = None,
) -> OfflineDataset:
    """Train SAC and SAC-Lagrangian at each budget, record everything; see the module doc."""
    if isinstance(cost_limits, (int, float)):
        cost_limits = [float(cost_limits)]
    limits = [float(c) for c in cost_limits]
    if any(c < 0 for c in limits):
        raise ConfigError(f"cost_limits={limits} must be >= 0 (episode-cost budgets).")
    # one thread, as the runner's default (torch_threads=1): two threads collapse on a busy CPU
    torch.set_num_threads(1)
    host = get_host()
    env_cfg = env_config(env) if env_config is not None else {"id": env}
    cfg = {"env": env_cfg}
    e = make_env(host.registry, cfg, seed)
    eval_env = make_env(host.registry, cfg, seed + 10_000)
    if not getattr(e.unwrapped, "reports_cost", False):
        raise ConfigError(
            f"quality=safe-mixed needs a safe task that reports info['cost']; env={env!r} does "
            "not. Accepted: the safe tasks (e.g. safe_point_goal, safe_hopper_velocity)."
        )
    obs_space, act_space = e.observation_space, e.action_space
    act_space.seed(seed)
    horizon = _episode_horizon(e)
    algos = host.registry.algorithms
    specs: list[tuple[str, float | None]] = [("sac", None)] + [
        ("sac_lagrangian", c) for c in limits
    ]
    parts: list[dict[str, np.ndarray]] = []
    table: list[dict[str, Any]] = []
    t0 = time.time()
    for k, (name, limit) in enumerate(specs):
        if name not in algos:
            raise ConfigError(f"quality=safe-mixed needs the {name!r} algorithm plugin.")
        fields = {f.name for f in dataclasses.fields(algos[name].Config)}
        over = {key: v for key, v in dict(algo_overrides or {}).items() if key in fields}
        if limit is not None:
            over.setdefault("lambda_lr", SAFE_LAMBDA_LR)
            over.update(cost_limit=limit, episode_length=horizon)
        torch.manual_seed(seed + k)
        algo = build_algorithm(host, {"name": name, **over}, obs_space, act_space, "cpu")
        rec = recorder(obs_space.shape, int(np.prod(act_space.shape)))
        gen = np.random.default_rng(seed + k)
        obs, _ = e.reset(seed=seed + 1000 * k)
        batch_size = int(getattr(algo.config, "batch_size", 256))
        gamma = float(algo.config.gamma)  # the recorder's one-step batches carry it
        for t in range(1, train_steps + steps + 1):
            learning = t <= train_steps
            if learning and t <= learning_starts:
                a = act_space.sample()
            else:
                a = algo.act(obs[None], False)[0]
            o2, r, term, trunc, info = e.step(a)
            rec.add(obs, a, r, o2, term, trunc, float(info.get("cost", 0.0)))
            obs = o2
            if term or trunc or t == train_steps:  # the final policy starts a fresh episode
                obs, _ = e.reset()
            if learning and t > learning_starts:
                algo.update(rec.batch(batch_size, gen, gamma))
        ret, cost = _eval(eval_env, algo, ref_episodes, seed + 1)
        arrays = rec.arrays()
        # the last training step ends an episode for bookkeeping (we reset there)
        if train_steps > 0 and not arrays["terminals"][train_steps - 1]:
            arrays["timeouts"][train_steps - 1] = True
        parts.append(arrays)
        table.append(
            {
                "algo": name,
                "cost_limit": limit,
                "transitions": len(arrays["rewards"]),
                "eval_return": ret,
                "eval_cost": cost,
            }
        )
        log(
            f"[collect] {name} (cost_limit={limit}): eval return {ret:.1f}, cost {cost:.1f} "
            f"({time.time() - t0:.0f}s)"
        )
    data = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    meta: dict[str, Any] = {
        "env_id": env_cfg["id"],
        "quality": "safe-mixed",
        "seed": seed,
        "observation_space": space_to_dict(obs_space),
        "action_space": space_to_dict(act_space),
        "collected_by": "roborl dataset collect",
        "cost_limits": limits,
        "episode_horizon": horizon,
        "train_steps": train_steps,
        "policies": table,
    }
    ds = OfflineDataset.from_arrays(data, meta)
    rets, costs = ds.episode_returns(), ds.episode_costs()
    refs = {
        "reference_returns": {"min": float(rets.min()), "max": float(rets.max())},
        "reference_costs": {"min": float(costs.min()), "max": float(costs.max())},
    }
    return ds.replace(metadata=refs)
