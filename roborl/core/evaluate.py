"""Deterministic evaluation episodes: returns, lengths, costs (safe tasks) and successes.

Success, where the env reports it (``info["success"]`` or ``info["is_success"]``), is counted
two ways: at the end (`success_rate`: the last step's flag, Fetch's and Gymnasium-Robotics'
standard) and at any step (`success_any_rate`: the flag was set on some step of the episode,
what an episode that ends on its first success, as HIL-SERL's training episodes do, scores).
A policy that pushes the block onto the goal and knocks it off again counts in the second
only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np


def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    env: gym.Env,
    episodes: int,
    seed: int,
    reset_policy: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run `episodes` episodes with `act(obs) -> action`, seeded `seed, seed+1, ...`.

    The same seeds at every evaluation make points on a learning curve comparable.
    """
    returns, lengths, costs, successes, any_successes = [], [], [], [], []
    for i in range(episodes):
        if reset_policy is not None:
            reset_policy()
        obs, _ = env.reset(seed=seed + i)
        done, ep_ret, ep_len, ep_cost, success, any_success = False, 0.0, 0, 0.0, None, False
        while not done:
            action = act(obs)
            obs, reward, terminated, truncated, info = env.step(action)
            ep_ret += float(reward)
            ep_len += 1
            if "cost" in info:
                ep_cost += float(info["cost"])
            if "success" in info or "is_success" in info:
                success = bool(info.get("success", info.get("is_success")))
                any_success = any_success or success
            done = terminated or truncated
        returns.append(ep_ret)
        lengths.append(ep_len)
        costs.append(ep_cost)
        if success is not None:
            successes.append(success)
            any_successes.append(any_success)
    result: dict[str, Any] = {
        "returns": returns,
        "lengths": lengths,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
    }
    if any(c != 0.0 for c in costs) or _reports_cost(env):
        result["costs"] = costs
        result["cost_mean"] = float(np.mean(costs))
    if successes:
        result["success_rate"] = float(np.mean(successes))
        result["success_any_rate"] = float(np.mean(any_successes))
    return result


def _reports_cost(env: gym.Env) -> bool:
    return bool(getattr(env.unwrapped, "reports_cost", False))


def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The `eval/...` metric names of DESIGN.md."""
    out = {
        "eval/return_mean": result["return_mean"],
        "eval/return_std": result["return_std"],
        "eval/length_mean": result["length_mean"],
    }
    if "cost_mean" in result:
        out["eval/cost_mean"] = result["cost_mean"]
    if "success_rate" in result:
        out["eval/success_rate"] = result["success_rate"]
    if "success_any_rate" in result:
        out["eval/success_any_rate"] = result["success_any_rate"]
    for key, value in result.items():
        if key.startswith("normalized_"):
            out[f"eval/{key}"] = value
    return out
