"""Learned rewards: `reward=NAME` puts a reward model from `roborl_rewards` between the env
and everything that steps it, on sim envs and on `robot=` envs alike.

A real robot has no reward function; SERL and HIL-SERL (Luo et al., 2024) train a binary
success classifier on camera frames and use its thresholded output as a sparse reward that
also ends the episode. `LearnedReward` does that for any `RewardModel`:

- reward = the model's reward (the classifier's: 1[p >= threshold]);
- terminated = the model's success when `terminate_on_success` (default true);
- the env's own termination (e.g. a sim task that ends on its privileged success check)
  still ends the episode, but as a truncation unless `keep_env_termination=true`, so nothing
  the robot could not know enters the critic's targets;
- `info["env_reward"]` keeps the env's reward and `info["learned_success"]` the model's
  verdict; `info["success"]` stays the env's.

Demonstrations (`demos=`) are relabelled the same way (`relabel`), so demo rows and online rows
carry one reward: before, demos kept the reward stored with them (e.g. a sim task's dense
reward) beside the classifier's 0/1 online. Evaluation in simulation runs without the model
(`make_env(..., learned_reward=False)`): it measures the task, the env's own reward, success
and termination, not the classifier's verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from roborl.core.errors import ConfigError

WRAPPER_KEYS = ("name", "terminate_on_success", "keep_env_termination")
"""`reward.*` keys the wrapper reads; every other key goes to the model's factory."""


@runtime_checkable
class RewardModel(Protocol):
    """What a `roborl_rewards` factory returns: ``factory(**options) -> RewardModel``."""

    def __call__(self, obs: Any) -> tuple[Any, Any]:
        """One observation (as the env returns it) -> (reward: float, success: bool)."""
        ...


def reward_options(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's `reward` section as a dict with `name` (None when no reward model is set);
    `reward=classifier` (a bare name) and `reward={name: classifier, path: ...}` both work."""
    section = cfg.get("reward")
    if not section:
        return None
    if isinstance(section, str):
        return {"name": section}
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"reward={section!r} must be a reward model's name or a mapping with name=, "
            "e.g. reward=classifier reward.path=DIR."
        )
    options = dict(section)
    if not options.get("name"):
        raise ConfigError(
            "reward.* options were given without reward.name: pass reward=<name>, "
            "e.g. reward=classifier reward.path=DIR."
        )
    return options


def build_reward_model(registry: Any, options: Mapping[str, Any]) -> RewardModel:
    """The model named by `reward.name`, built from the non-wrapper `reward.*` options."""
    factory = registry.get("rewards", options["name"])
    kwargs = {k: v for k, v in options.items() if k not in WRAPPER_KEYS}
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"reward={options['name']} rejected its options {sorted(kwargs)}: {exc}"
        ) from None


def with_learned_reward(
    registry: Any, cfg: Mapping[str, Any], maker: Callable[[], gym.Env]
) -> Callable[[], gym.Env]:
    """`maker`, wrapped in `LearnedReward` when the config sets `reward=`; the model is
    built in the process that builds the env (async vector envs included)."""
    options = reward_options(cfg)
    if options is None:
        return maker
    for key in ("terminate_on_success", "keep_env_termination"):
        if key in options and not isinstance(options[key], bool):
            raise ConfigError(f"reward.{key}={options[key]!r} must be true or false.")
    terminate = bool(options.get("terminate_on_success", True))
    keep_term = bool(options.get("keep_env_termination", False))

    def make() -> gym.Env:
        return LearnedReward(maker(), build_reward_model(registry, options), terminate, keep_term)

    return make


def relabel(
    model: RewardModel,
    next_observations: Any,
    env_terminals: np.ndarray,
    options: Mapping[str, Any],
) -> tuple[np.ndarray, np.ndarray, int]:
    """Rewards and terminal flags for stored transitions, as `LearnedReward.step` labels online
    ones: the model's reward on each next observation; terminal where it says success (with
    `terminate_on_success`) or, with `keep_env_termination`, where the env ended the episode
    (otherwise an env termination is a truncation: not terminal). Returns (rewards, terminals,
    successes)."""
    terminate = bool(options.get("terminate_on_success", True))
    keep_term = bool(options.get("keep_env_termination", False))
    n = len(env_terminals)
    rewards = np.zeros(n, np.float32)
    success = np.zeros(n, bool)
    for i in range(n):
        if isinstance(next_observations, Mapping):
            obs = {k: np.asarray(v[i]) for k, v in next_observations.items()}
        else:
            obs = np.asarray(next_observations[i])
        r, ok = model(obs)
        rewards[i] = float(np.asarray(r).item())
        success[i] = bool(np.asarray(ok).item())
    terminals = (success & terminate) | (np.asarray(env_terminals, bool) & keep_term)
    return rewards, terminals, int(success.sum())


class LearnedReward(gym.Wrapper):
    """The env with its reward (and termination) from a `RewardModel`; see the module doc."""

    def __init__(
        self,
        env: gym.Env,
        model: RewardModel,
        terminate_on_success: bool = True,
        keep_env_termination: bool = False,
    ) -> None:
        super().__init__(env)
        check = getattr(model, "check_space", None)
        if check is not None:
            check(env.observation_space)
        self.model = model
        self.terminate_on_success = terminate_on_success
        self.keep_env_termination = keep_env_termination

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        reward, success = self.model(obs)
        success = bool(np.asarray(success).item())
        info = {**info, "env_reward": float(env_reward), "learned_success": success}
        ended_by_env = bool(terminated)
        terminated = success and self.terminate_on_success
        if ended_by_env and self.keep_env_termination:
            terminated = True
        elif ended_by_env and not terminated:
            truncated = True
        return obs, float(np.asarray(reward).item()), terminated, bool(truncated), info
