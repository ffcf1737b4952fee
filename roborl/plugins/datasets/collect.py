"""D4RL-style dataset collection from roborl policies (Fu et al., 2020, Sec. 5 recipe).

- `random`: uniform random actions;
- `expert`: a policy trained with an off-policy algorithm from the registry (SAC by default)
  for `train_steps`, rolled out stochastically;
- `medium`: the training snapshot whose evaluation return is closest to a third of the way from
  random to expert (D4RL: "roughly a third of expert performance");
- `medium-replay`: every transition the training run collected up to that medium snapshot;
- `medium-expert`: medium and expert rollouts concatenated.

`policy=` may also be a checkpoint path or a model folder (`roborl export`), rolled out as the
expert, `random`, or the name of a registered algorithm that acts without training
(`train_steps=0`, e.g. an LLM policy).
Reference returns recorded in the metadata: `random` = mean return of uniform random play,
`expert` = mean deterministic return of the expert policy (or `ref_expert=` when given).
Costs are recorded whenever the env reports `info["cost"]`. `safe-mixed` builds a DSRL-style
safe dataset from reward-only SAC and SAC-Lagrangian at each of `cost_limits` (see `safe.py`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.algorithms import build_algorithm
from roborl.core.buffer import with_discount
from roborl.core.datasets import OfflineDataset
from roborl.core.envs import make_env
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm, Batch
from roborl.core.model_dir import is_model_dir
from roborl.core.obs import copy_obs, index_obs, to_torch
from roborl.core.plugins import get_host
from roborl.core.policy_source import PolicySource, load_policy
from roborl.core.spaces import space_to_dict

QUALITIES = ("random", "medium", "expert", "medium-replay", "medium-expert", "safe-mixed")


def env_config(env: str) -> dict[str, Any]:
    """`hopper` or `safe_point_goal` (an env config, roborl's or a plugin's) or `Hopper-v5`
    (a Gymnasium id) -> the `env` section, composed as `roborl train env=...` composes it."""
    from roborl.core.compose import compose_dict, group_options

    host = get_host()
    if env in group_options(host, "env"):
        return dict(compose_dict(host, [f"env={env}"], "dataset collect")["env"])
    return {"id": env}


class _Recorder:
    """Preallocated transition arrays (grown by doubling).

    `obs_dim` is a shape, or a Dict space: observations are then dicts of arrays in the
    entry's dtype (uint8 images stay uint8)."""

    def __init__(
        self, obs_dim: tuple[int, ...] | gym.spaces.Dict, act_dim: int, cap: int = 4096
    ) -> None:
        self.n = 0
        self.dict_obs = isinstance(obs_dim, gym.spaces.Dict)
        self.d: dict[str, Any] = {
            "observations": _obs_storage(obs_dim, cap),
            "next_observations": _obs_storage(obs_dim, cap),
            "actions": np.zeros((cap, act_dim), np.float32),
            "rewards": np.zeros(cap, np.float32),
            "terminals": np.zeros(cap, bool),
            "timeouts": np.zeros(cap, bool),
            "costs": np.zeros(cap, np.float32),
        }
        self.has_cost = False

    def add(self, o, a, r, o2, term, trunc, cost) -> None:  # type: ignore[no-untyped-def]
        if self.n == len(self.d["rewards"]):
            for k, v in self.d.items():
                self.d[k] = _grow(v)
        i = self.n
        d = self.d
        _put(d["observations"], i, o)
        _put(d["next_observations"], i, o2)
        d["actions"][i], d["rewards"][i] = a, r
        d["terminals"][i], d["timeouts"][i] = term, trunc
        if cost is not None:
            d["costs"][i] = cost
            self.has_cost = True
        self.n += 1

    def arrays(self, upto: int | None = None) -> dict[str, np.ndarray]:
        n = self.n if upto is None else upto
        out = {
            k: copy_obs(index_obs(v, slice(0, n)))
            for k, v in self.d.items()
            if k != "costs" or self.has_cost
        }
        # The last recorded transition ends an episode for bookkeeping (time limit).
        if n and not (out["terminals"][-1] or out["timeouts"][-1]):
            out["timeouts"][-1] = True
        return out

    def batch(self, size: int, gen: np.random.Generator, gamma: float) -> Batch:
        """`size` one-step transitions drawn uniformly, discounted by `gamma` (the algorithm's
        `algo.gamma`: an update bootstraps with `Batch.discount` only)."""
        i = gen.integers(0, self.n, size)
        d = self.d
        t = torch.as_tensor
        batch = Batch(
            obs=to_torch(index_obs(d["observations"], i), "cpu"),
            actions=t(d["actions"][i]),
            rewards=t(d["rewards"][i]),
            next_obs=to_torch(index_obs(d["next_observations"], i), "cpu"),
            terminated=t(d["terminals"][i].astype(np.float32)),
            costs=t(d["costs"][i]) if self.has_cost else None,
        )
        return with_discount(batch, gamma)


def _obs_storage(obs_dim: tuple[int, ...] | gym.spaces.Dict, cap: int) -> Any:
    if isinstance(obs_dim, gym.spaces.Dict):
        return {
            k: np.zeros((cap, *sub.shape), np.uint8 if sub.dtype == np.uint8 else np.float32)
            for k, sub in obs_dim.spaces.items()
        }
    return np.zeros((cap, *obs_dim), np.float32)


def _rec_obs(space: gym.Space) -> tuple[int, ...] | gym.spaces.Dict:
    return space if isinstance(space, gym.spaces.Dict) else space.shape


def _grow(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _grow(x) for k, x in v.items()}
    return np.concatenate([v, np.zeros_like(v)])


def _put(dst: Any, i: int, value: Any) -> None:
    if isinstance(dst, dict):
        for k, arr in dst.items():
            arr[i] = value[k]
    else:
        dst[i] = value


def rollout(
    env: gym.Env,
    act: Callable[[np.ndarray], np.ndarray],
    steps: int | None = None,
    episodes: int | None = None,
    seed: int = 0,
    rec: _Recorder | None = None,
) -> list[float]:
    """Run `act` for `steps` transitions or `episodes` episodes; returns episode returns."""
    obs, _ = env.reset(seed=seed)
    returns, ret, t, eps = [], 0.0, 0, 0
    while (steps is None or t < steps) and (episodes is None or eps < episodes):
        a = np.asarray(act(obs), np.float32)
        o2, r, term, trunc, info = env.step(a)
        if rec is not None:
            rec.add(obs, a, r, o2, term, trunc, info.get("cost"))
        ret += float(r)
        t += 1
        obs = o2
        if term or trunc:
            returns.append(ret)
            ret, eps = 0.0, eps + 1
            obs, _ = env.reset()
    return returns


def collect(
    env: str,
    quality: str = "medium-replay",
    policy: str = "sac",
    steps: int = 10_000,
    train_steps: int = 50_000,
    learning_starts: int = 5_000,
    eval_every: int = 5_000,
    ref_episodes: int = 5,
    seed: int = 0,
    algo_overrides: Mapping[str, Any] | None = None,
    ref_expert: float | None = None,
    log: Callable[[str], None] = print,
    cost_limits: list[float] | None = None,
) -> OfflineDataset:
    """Build one dataset of `quality`; see the module docstring."""
    if quality not in QUALITIES:
        raise ConfigError(f"unknown dataset quality {quality!r}; accepted: {', '.join(QUALITIES)}.")
    if quality == "safe-mixed":
        from roborl.plugins.datasets.safe import collect_safe

        return collect_safe(
            env,
            steps=steps,
            train_steps=train_steps,
            learning_starts=learning_starts,
            cost_limits=cost_limits if cost_limits is not None else (5.0, 25.0),
            ref_episodes=ref_episodes,
            seed=seed,
            algo_overrides=algo_overrides,
            log=log,
            env_config=env_config,
            recorder=_Recorder,
        )
    host = get_host()
    cfg = {"env": env_config(env)}
    e = make_env(host.registry, cfg, seed)
    eval_env = make_env(host.registry, cfg, seed + 10_000)
    obs_space, act_space = e.observation_space, e.action_space
    if not isinstance(act_space, gym.spaces.Box):
        e.close()
        eval_env.close()
        raise ConfigError(
            f"dataset collect records continuous actions (D4RL-style), but env={env} has "
            f"action space {act_space}; roborl's offline algorithms need a Box action space."
        )
    act_space.seed(seed)
    torch.manual_seed(seed)
    t0 = time.time()
    rand_returns = rollout(eval_env, lambda o: act_space.sample(), episodes=ref_episodes, seed=seed)
    r_random = float(np.mean(rand_returns))
    meta: dict[str, Any] = {
        "env_id": cfg["env"]["id"],
        "quality": quality,
        "policy": policy,
        "seed": seed,
        "observation_space": space_to_dict(obs_space),
        "action_space": space_to_dict(act_space),
        "collected_by": "roborl dataset collect",
    }
    rec = _Recorder(_rec_obs(obs_space), int(np.prod(act_space.shape)))

    def evaluate(algo: Algorithm) -> float:
        return float(
            np.mean(
                rollout(
                    eval_env,
                    lambda o: algo.act(o[None], True)[0],
                    episodes=ref_episodes,
                    seed=seed + 1,
                )
            )
        )

    if quality == "random" or policy == "random":
        rollout(e, lambda o: act_space.sample(), steps=steps, seed=seed, rec=rec)
        expert = ref_expert
        meta["reference_returns"] = {"random": r_random}
        if expert is not None:
            meta["reference_returns"]["expert"] = float(expert)
        return OfflineDataset.from_arrays(rec.arrays(), meta)

    if Path(policy).is_file() or is_model_dir(policy):  # a checkpoint or an export folder
        loaded = load_policy(PolicySource.from_path(policy, "dataset collect"), host)
        assert loaded.algorithm is not None
        algo = loaded.algorithm
        train_steps = 0
        meta["policy"] = str(Path(policy).resolve())
    else:
        algo = build_algorithm(
            host, {"name": policy, **dict(algo_overrides or {})}, obs_space, act_space, "cpu"
        )
        if algo.loop != "offpolicy":
            train_steps = 0  # zero-shot policies (e.g. an LLM) are rolled out as they are
    snapshots: list[tuple[int, float, dict[str, Any]]] = []
    if train_steps > 0:
        gen = np.random.default_rng(seed)
        # One-step transitions from the recorder, discounted by the algorithm's own gamma.
        gamma, batch_size = float(algo.config.gamma), int(algo.config.batch_size)
        obs, _ = e.reset(seed=seed)
        for t in range(1, train_steps + 1):
            a = act_space.sample() if t <= learning_starts else algo.act(obs[None], False)[0]
            o2, r, term, trunc, info = e.step(a)
            rec.add(obs, a, r, o2, term, trunc, info.get("cost"))
            obs = o2
            if term or trunc:
                obs, _ = e.reset()
            if t > learning_starts:
                algo.update(rec.batch(batch_size, gen, gamma))
            if t % eval_every == 0 or t == train_steps:
                ret = evaluate(algo)
                snapshots.append((t, ret, copy.deepcopy(algo.state_dict())))
                log(f"[collect] step {t}: eval return {ret:.1f} ({time.time() - t0:.0f}s)")
        replay = rec
    expert_return = evaluate(algo)
    r_expert = float(ref_expert) if ref_expert is not None else expert_return
    meta["reference_returns"] = {"random": r_random, "expert": r_expert}
    meta["expert_policy_return"] = expert_return
    meta["train_steps"] = train_steps

    def roll(algo_: Algorithm, n: int, s: int) -> dict[str, np.ndarray]:
        r = _Recorder(_rec_obs(obs_space), int(np.prod(act_space.shape)))
        rollout(e, lambda o: algo_.act(o[None], False)[0], steps=n, seed=s, rec=r)
        return r.arrays()

    if quality == "expert" or train_steps == 0:
        if quality != "expert":
            meta["note"] = f"policy {policy!r} is rolled out as is (quality ignored)"
        return OfflineDataset.from_arrays(roll(algo, steps, seed + 2), meta)
    target = r_random + (expert_return - r_random) / 3.0
    t_med, ret_med, state_med = min(snapshots, key=lambda s: abs(s[1] - target))
    meta["medium_policy_return"] = ret_med
    meta["medium_snapshot_step"] = t_med
    if quality == "medium-replay":
        return OfflineDataset.from_arrays(replay.arrays(upto=t_med), meta)
    medium = copy.deepcopy(algo)
    medium.load_state_dict(state_med)
    med = roll(medium, steps, seed + 3)
    if quality == "medium":
        return OfflineDataset.from_arrays(med, meta)
    exp = roll(algo, steps, seed + 4)
    both = {k: np.concatenate([med[k], exp[k]]) for k in med}
    return OfflineDataset.from_arrays(both, meta)
