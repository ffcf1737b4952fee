"""Goal-conditioned envs: what the policy sees, and the `her` option that relabels goals.

Gymnasium-Robotics' goal envs (Fetch, the `GoalEnv` API) observe a Dict ``{observation,
achieved_goal, desired_goal}`` and reward through ``compute_reward(achieved_goal,
desired_goal, info)``. ``env.concat_obs`` joins the three entries into one vector, so the goal
structure is gone by the time a transition is stored, and nothing can relabel it. With
``her=<strategy>`` (Hindsight Experience Replay, `roborl.core.buffer_her`) every env the run
builds is wrapped in `GoalObservation` instead:

- the policy sees one vector, ``concat(observation, desired_goal)`` (the paper's input
  ``s || g``), everywhere: training, evaluation, checkpoints, `roborl eval`, deploy, ONNX;
- each step's ``info["achieved_goal"]`` carries the achieved goal of the observation it
  returns, which the collector stores with the transition (`Chunk.extras`), so the buffer
  can relabel and recompute rewards with the env's own `compute_reward`.

`her_options` reads the run's ``her`` section: ``her=future`` (a config group in
roborl/configs/her/, options under it, e.g. ``her.n_sampled_goal=8``) or a mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
"""The entries of a goal env's Dict observation (Gymnasium-Robotics' `GoalEnv`)."""
ACHIEVED_GOAL = "achieved_goal"
"""Info field `GoalObservation` adds to every reset and step; `Chunk.extras` key too."""
EPISODE_END = "episode_end"
"""`Chunk.extras` key beside `ACHIEVED_GOAL`: the transition ended its episode (terminated or
truncated), so the HER buffer knows which transitions form an episode."""
STRATEGIES = ("future", "final", "episode")
"""Goal selection strategies of Andrychowicz et al. (2017), Sec. 4.5, as SB3 names them."""

RewardFn = Callable[[np.ndarray, np.ndarray, Any], np.ndarray]
"""``compute_reward(achieved_goal, desired_goal, info) -> rewards``, batched on axis 0."""


@dataclass(frozen=True)
class HerConfig:
    """``her.*``: SB3's `HerReplayBuffer` options (same names and defaults)."""

    strategy: str = field(
        default="future",
        metadata={
            "choices": list(STRATEGIES),
            "help": "where relabelled goals come from: future (an achieved goal later in the "
            "same episode, inclusive), final (the episode's last), episode (any of it)",
        },
    )
    n_sampled_goal: int = field(
        default=4,
        metadata=rng(
            0,
            None,
            "virtual transitions per real one: a share 1 - 1/(1+n) of each batch is "
            "relabelled (n=4: 0.8)",
        ),
    )

    @property
    def relabel_fraction(self) -> float:
        """SB3's `her_ratio`: the share of a batch with a new goal."""
        return 1.0 - 1.0 / (self.n_sampled_goal + 1)


def her_options(cfg: Mapping[str, Any]) -> HerConfig | None:
    """The run's ``her`` section validated (None when HER is off).

    ``her=future`` selects roborl/configs/her/future.yaml (a mapping); a bare strategy string
    (a config written by hand, ``{"her": "final"}``) works too; ``her=none`` / null is off.
    """
    section = cfg.get("her")
    if section is None or section is False or section == "none":
        return None
    if isinstance(section, str):
        section = {"strategy": section}
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"her={section!r} must be a goal selection strategy ({', '.join(STRATEGIES)}) "
            "or a mapping, e.g. her=future her.n_sampled_goal=4."
        )
    return build_config(HerConfig, section, prefix="her.")


def goal_env_problem(env: gym.Env) -> str | None:
    """What makes `env` unusable for HER, in words (None when it is a goal env)."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        return (
            f"its observation space is a {type(space).__name__} {getattr(space, 'shape', '')}, "
            f"not a Dict with the entries {', '.join(GOAL_KEYS)}"
        )
    missing = [k for k in GOAL_KEYS if k not in space.spaces]
    if missing:
        return (
            f"its observation Dict has the entries {', '.join(space.spaces)} but lacks "
            f"{', '.join(missing)}"
        )
    bad = [k for k in GOAL_KEYS if not isinstance(space.spaces[k], gym.spaces.Box)]
    if bad:
        return f"its entries {', '.join(bad)} are not Box spaces"
    ag, dg = space.spaces["achieved_goal"].shape, space.spaces["desired_goal"].shape
    if ag != dg or len(ag) != 1:
        return f"achieved_goal {ag} and desired_goal {dg} are not vectors of one shape"
    if not callable(getattr(env.unwrapped, "compute_reward", None)):
        return "its env has no compute_reward(achieved_goal, desired_goal, info) method"
    return None


class GoalObservation(gym.Wrapper):
    """A goal env as the policy sees it under HER: ``concat(observation, desired_goal)``.

    The achieved goal leaves the observation (the policy never needed it: Fetch's
    ``observation`` already holds the gripper and object positions it is made of) and goes to
    ``info["achieved_goal"]`` on every reset and step, where the collector finds it. The
    desired goal is the last `goal_dim` entries (`goal_slice`), which the HER buffer
    overwrites when it relabels. A non-goal env is refused with what it lacks.
    """

    def __init__(self, env: gym.Env, what: str = "her") -> None:
        problem = goal_env_problem(env)
        if problem is not None:
            spec = getattr(env, "spec", None)
            name = getattr(spec, "id", None) or type(env.unwrapped).__name__
            raise ConfigError(
                f"{what} needs a goal-conditioned env (Gymnasium-Robotics' GoalEnv API: a Dict "
                f"observation with {', '.join(GOAL_KEYS)} and compute_reward(achieved_goal, "
                f"desired_goal, info)), but env {name!r} does not qualify: {problem}. Use a "
                "goal env (env=fetch_reach, fetch_push, fetch_slide, fetch_pick_and_place) or "
                "drop her= (her=none)."
            )
        super().__init__(env)
        spaces = env.observation_space.spaces
        obs_space, goal_space = spaces["observation"], spaces["desired_goal"]
        self.obs_dim = int(np.prod(obs_space.shape))
        self.goal_dim = int(goal_space.shape[0])
        self.goal_slice = slice(self.obs_dim, self.obs_dim + self.goal_dim)
        low = np.concatenate([obs_space.low.ravel(), goal_space.low]).astype(np.float32)
        high = np.concatenate([obs_space.high.ravel(), goal_space.high]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def _view(self, obs: Mapping[str, Any], info: dict[str, Any]) -> np.ndarray:
        info[ACHIEVED_GOAL] = np.asarray(obs["achieved_goal"], np.float32).copy()
        return np.concatenate(
            [np.asarray(obs["observation"], np.float32).ravel(), obs["desired_goal"]]
        ).astype(np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        info = dict(info)
        return self._view(obs, info), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        return self._view(obs, info), reward, terminated, truncated, info

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> Any:
        """The wrapped env's reward for (achieved, desired) goal batches."""
        return self.env.unwrapped.compute_reward(achieved_goal, desired_goal, info)


def find_goal_wrapper(env: gym.Env) -> GoalObservation | None:
    """The `GoalObservation` inside `env`'s wrapper chain, if any."""
    inner: Any = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, GoalObservation):
            return inner
        inner = inner.env
    return None
