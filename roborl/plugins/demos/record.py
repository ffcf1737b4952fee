"""Recording demonstrations: whole episodes of any policy on any env or robot, as a dataset.

The dataset is roborl's D4RL-style format (`OfflineDataset`: NPZ or HDF5, Dict observations
with uint8 camera frames kept uint8), so `roborl train demos=PATH` and `roborl reward train
data=PATH` read it like any other; ``out=lerobot:DIR`` writes the same transitions as a
LeRobotDataset. Per-step success (the env's ``info["success"]``) goes into the metadata as
``success_rows`` (row indices), the labels the success classifier trains on, and the steps a
person took over (``info["intervened"]``, from a robot's teleop channel) as
``intervened_rows``; ``fps`` (the env's control rate) and ``task`` describe the recording.

Where actions come from (`policy=`):
- ``expert``: the env's scripted ``expert_action(noise=)`` (RoborlTabletop has one);
- ``random``: uniform random actions;
- a model folder (`roborl export`) or a checkpoint `.pt`: the trained policy, deterministic;
- teleoperation: on ``robot=`` with the teleop intervention channel, the person's command
  overrides the policy and the robot env reports it as ``info["executed_action"]``; the
  recorder stores that executed action, so ``policy=random`` with ``robot.intervention...``
  (or a policy that holds) records what the person did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError
from roborl.core.obs import copy_obs, stack_obs
from roborl.core.spaces import space_to_dict

Act = Callable[[Any], np.ndarray]


def make_policy(spec: str, env: gym.Env, host: Any, noise: float = 0.0, device: str = "cpu") -> Act:
    """`policy=` as a function from one observation to one action (see the module docstring)."""
    if spec == "expert":
        expert = getattr(env.unwrapped, "expert_action", None)
        if expert is None:
            raise ConfigError(
                f"policy=expert needs an env with a scripted expert_action() (RoborlTabletop "
                f"has one); {type(env.unwrapped).__name__} has none. Give policy=random, a "
                "model folder (roborl export) or a checkpoint .pt instead."
            )
        return lambda obs: np.asarray(expert(noise=noise), np.float32)
    if spec == "random":
        return lambda obs: np.asarray(env.action_space.sample(), np.float32)
    path = Path(spec)
    if not path.exists():
        raise ConfigError(
            f"policy={spec!r} is neither expert, random, a model folder nor a checkpoint file "
            "(no such path)."
        )
    from roborl.core.policy_source import PolicySource, load_policy

    policy = load_policy(PolicySource.from_path(path, "demos record"), host, device).policy
    return lambda obs: np.asarray(policy.act(obs), np.float32)


def record(
    env: gym.Env,
    act: Act,
    episodes: int,
    seed: int = 0,
    successes_only: bool = False,
    max_attempts: int | None = None,
    log: Callable[[str], None] = print,
    stop_after_success: int | None = None,
) -> tuple[OfflineDataset | None, dict[str, Any]]:
    """Roll out `act` for `episodes` kept episodes (seeds seed, seed+1, ...).

    With `successes_only` an episode without ``info["success"]`` is dropped (SERL records
    successful demonstrations only), up to `max_attempts` episodes (default 3x). With
    `stop_after_success=k` an episode ends k steps after its first success, as a time limit
    (SERL's demos end at success, k=0), so an expert that holds still once done does not fill
    most rows with a still arm. A Ctrl-C keeps the finished episodes: the caller saves them
    (the file is written atomically).
    Returns the dataset (None when no episode was kept) and a summary.
    """
    if episodes < 1:
        raise ConfigError(f"episodes={episodes} must be at least 1.")
    attempts = max_attempts or (3 * episodes if successes_only else episodes)
    kept: list[dict[str, Any]] = []
    tried, interrupted = 0, False
    try:
        while len(kept) < episodes and tried < attempts:
            ep = _episode(env, act, seed + tried, stop_after_success)
            tried += 1
            ok = bool(ep["success"].any())
            if ok or not successes_only:
                kept.append(ep)
            log(
                f"episode {tried}: {len(ep['rewards'])} steps, return {ep['rewards'].sum():.2f}, "
                f"success {ok}{'' if ok or not successes_only else ' (dropped)'}"
            )
    except KeyboardInterrupt:
        interrupted = True
        log(f"interrupted: keeping the {len(kept)} finished episode(s)")
    summary = {
        "episodes": len(kept),
        "attempts": tried,
        "success_rate": float(np.mean([e["success"].any() for e in kept])) if kept else 0.0,
        "interrupted": interrupted,
    }
    if not kept:
        return None, summary
    return _dataset(kept, env), summary


def _episode(
    env: gym.Env, act: Act, seed: int, stop_after_success: int | None = None
) -> dict[str, Any]:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)  # policy=random: the same episode seed, the same actions
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "next", "act", "rew", "term", "tout")}
    success: list[bool] = []
    intervened: list[bool] = []
    done = False
    first_success: int | None = None
    while not done:
        action = act(obs)
        nxt, rew, term, trunc, info = env.step(action)
        # Teleop: the command the robot executed (the person's, when they took over).
        executed = info.get("executed_action")
        action = np.asarray(action if executed is None else executed, np.float32)
        for key, value in zip(rows, (obs, nxt, action, rew, term, trunc)):
            rows[key].append(copy_obs(value) if key in ("obs", "next") else value)
        success.append(bool(info.get("success", False)))
        intervened.append(bool(info.get("intervened", False)))
        if first_success is None and success[-1]:
            first_success = len(success) - 1
        obs, done = nxt, bool(term or trunc)
        if (
            not done
            and stop_after_success is not None
            and first_success is not None
            and len(success) - 1 - first_success >= stop_after_success
        ):
            rows["tout"][-1] = done = True  # cut short: a time limit, not an end
    return {
        "observations": stack_obs(rows["obs"]),
        "next_observations": stack_obs(rows["next"]),
        "actions": np.stack(rows["act"]).astype(np.float32),
        "rewards": np.asarray(rows["rew"], np.float32),
        "terminals": np.asarray(rows["term"], bool),
        "timeouts": np.asarray(rows["tout"], bool),
        "success": np.asarray(success, bool),
        "intervened": np.asarray(intervened, bool),
    }


def _concat(parts: list[Any]) -> Any:
    if isinstance(parts[0], Mapping):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)


def control_fps(env: gym.Env) -> int | None:
    """The env's steps per second: its ``render_fps`` metadata, else ``1 / dt`` (MuJoCo)."""
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    if fps is None:
        dt = getattr(env.unwrapped, "dt", None)
        fps = 1.0 / dt if isinstance(dt, (int, float)) and dt > 0 else None
    return None if fps is None else max(1, round(float(fps)))


def _dataset(kept: list[dict[str, Any]], env: gym.Env) -> OfflineDataset:
    flags = ("success", "intervened")
    arrays = {k: _concat([e[k] for e in kept]) for k in kept[0] if k not in flags}
    success = np.concatenate([e["success"] for e in kept])
    intervened = np.concatenate([e["intervened"] for e in kept])
    ends = arrays["terminals"] | arrays["timeouts"]
    ends[-1] = True  # the recorder never stops mid-episode; mark the end for bookkeeping
    arrays["timeouts"] = arrays["timeouts"] | (ends & ~arrays["terminals"])
    spec = getattr(env, "spec", None)
    meta = {
        "source": "roborl demos record",
        "env_id": getattr(spec, "id", None),
        "observation_space": space_to_dict(env.observation_space),
        "action_space": space_to_dict(env.action_space),
        "success_rows": np.flatnonzero(success).tolist(),
        "intervened_rows": np.flatnonzero(intervened).tolist(),
        "fps": control_fps(env),
    }
    return OfflineDataset.from_arrays(arrays, meta, source="demos")
