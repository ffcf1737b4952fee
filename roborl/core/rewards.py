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
  verdict; `info["success"]` stays the env's;
- `consecutive=k`: success only once the model has said so on k frames in a row within the
  episode (a single false positive does not end the episode or pay the reward); with k > 1 the
  reward is the model's on a confirmed frame and 0 otherwise. A sim task that ends on its
  own first success frame leaves no second frame to confirm: run it so that success does not
  end the episode (e.g. `env.kwargs.end_on_success=false` on the Fetch pixel tasks); the
  wrapper warns once when it sees the env end a successful episode unconfirmed;
- `save_fired=DIR` (the run's `reward_fired/` by default): every frame the model fired on
  (before the `consecutive` check) is saved with the env's own success where it reports one,
  so `roborl reward relabel` can retrain with the false positives as hard negatives (SERL's
  remedy, Luo et al., 2024, Sec. IV-B);
- `relabel_every=N` (env steps; 0, the default, is off): that retraining every N env steps of
  the run, the new model swapped into every training env (`roborl.core.reward_rounds`).

Demonstrations (`demos=`) are relabelled the same way (`relabel`), so demo rows and online rows
carry one reward: before, demos kept the reward stored with them (e.g. a sim task's dense
reward) beside the classifier's 0/1 online. Evaluation in simulation runs without the model
(`make_env(..., learned_reward=False)`): it measures the task, the env's own reward, success
and termination, not the classifier's verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from roborl.core.errors import ConfigError
from roborl.core.fired_frames import FiredFrames

log = logging.getLogger("roborl.rewards")

WRAPPER_KEYS = (
    "name", "terminate_on_success", "keep_env_termination", "consecutive", "save_fired",
    "relabel_every",
)  # fmt: skip
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
    consecutive = consecutive_frames(options)
    fired_dir = options.get("save_fired")
    if relabel_every(options) and not fired_dir:
        raise ConfigError(
            "reward.relabel_every needs the fired frames it retrains on: leave "
            "reward.save_fired at its default (the run's reward_fired/) or set a folder."
        )

    def make() -> gym.Env:
        model = build_reward_model(registry, options)
        fired = FiredFrames(fired_dir) if fired_dir else None
        return LearnedReward(maker(), model, terminate, keep_term, consecutive, fired)

    return make


def consecutive_frames(options: Mapping[str, Any]) -> int:
    """`reward.consecutive`: how many frames in a row the model must say success (default 1)."""
    k = options.get("consecutive", 1)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(
            f"reward.consecutive={k!r} must be a whole number of frames, at least 1 (the "
            "model must say success on that many frames in a row)."
        )
    return k


def relabel_every(options: Mapping[str, Any]) -> int:
    """`reward.relabel_every`: env steps between hard-negative rounds (0 or absent: none)."""
    n = options.get("relabel_every")
    n = 0 if n is None else n  # reward.relabel_every=null: off, as absent
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(
            f"reward.relabel_every={n!r} must be a whole number of env steps, 0 (no rounds, the "
            "default) or more: the classifier is retrained with its fired frames as hard "
            "negatives every that many steps."
        )
    return n


def with_fired_frames_dir(cfg: Mapping[str, Any], run_dir: Any) -> Mapping[str, Any]:
    """The run config with `reward.save_fired` defaulting to `<run_dir>/reward_fired` when a
    reward model is set (`reward.save_fired=null` turns saving off)."""
    options = reward_options(cfg)
    if options is None or "save_fired" in options:
        return cfg
    return {**cfg, "reward": {**options, "save_fired": f"{run_dir}/reward_fired"}}


def relabel(
    model: RewardModel,
    next_observations: Any,
    env_terminals: np.ndarray,
    options: Mapping[str, Any],
    episode_ends: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Rewards and terminal flags for stored transitions, as `LearnedReward.step` labels online
    ones: the model's reward on each next observation; terminal where it says success (with
    `terminate_on_success`) or, with `keep_env_termination`, where the env ended the episode
    (otherwise an env termination is a truncation: not terminal). With `consecutive=k` a row
    counts as success once the model said so on its frame and the k-1 before it in the same
    episode (`episode_ends`: rows after which a new episode starts; default the terminals).
    Returns (rewards, terminals, successes)."""
    terminate = bool(options.get("terminate_on_success", True))
    keep_term = bool(options.get("keep_env_termination", False))
    consecutive = consecutive_frames(options)
    n = len(env_terminals)
    ends = np.asarray(env_terminals if episode_ends is None else episode_ends, bool)
    rewards = np.zeros(n, np.float32)
    success = np.zeros(n, bool)
    streak = 0
    for i in range(n):
        if isinstance(next_observations, Mapping):
            obs = {k: np.asarray(v[i]) for k, v in next_observations.items()}
        else:
            obs = np.asarray(next_observations[i])
        r, ok = model(obs)
        streak = streak + 1 if bool(np.asarray(ok).item()) else 0
        success[i] = streak >= consecutive
        confirmed = success[i] or consecutive == 1
        rewards[i] = float(np.asarray(r).item()) if confirmed else 0.0
        if ends[i]:
            streak = 0
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
        consecutive: int = 1,
        fired: FiredFrames | None = None,
    ) -> None:
        super().__init__(env)
        check = getattr(model, "check_space", None)
        if check is not None:
            check(env.observation_space)
        self.model = model
        self.terminate_on_success = terminate_on_success
        self.keep_env_termination = keep_env_termination
        self.consecutive = consecutive
        self.fired = fired
        self._streak = 0
        self._warned = False

    def set_model(self, model: RewardModel) -> None:
        """Swap in a retrained model (a `reward.relabel_every` round), checked like the first."""
        check = getattr(model, "check_space", None)
        if check is not None:
            check(self.env.observation_space)
        self.model = model

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._streak = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        reward, fired = self.model(obs)
        fired = bool(np.asarray(fired).item())
        if fired and self.fired is not None:
            self.fired.add(obs, info.get("success"))
        self._streak = self._streak + 1 if fired else 0
        success = self._streak >= self.consecutive
        if self.consecutive > 1 and not success:
            reward = 0.0  # an unconfirmed verdict pays nothing
        info = {**info, "env_reward": float(env_reward), "learned_success": success}
        ended_by_env = bool(terminated)
        if ended_by_env and info.get("success") and not success and self.consecutive > 1:
            self._warn_unconfirmable()
        terminated = success and self.terminate_on_success
        if ended_by_env and self.keep_env_termination:
            terminated = True
        elif ended_by_env and not terminated:
            truncated = True
        return obs, float(np.asarray(reward).item()), terminated, bool(truncated), info

    def _warn_unconfirmable(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "the env ended a successful episode on its own check before reward.consecutive="
                "%d frames confirmed it: the learned reward cannot pay for it; run the task so "
                "that success does not end the episode (e.g. env.kwargs.end_on_success=false).",
                self.consecutive,
            )

    def close(self) -> None:
        if self.fired is not None:
            self.fired.flush()
        super().close()
