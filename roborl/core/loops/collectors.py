"""Collectors: where the off-policy loop's experience comes from.

The off-policy loop is the same whether transitions come from an in-process vector env
(`VectorCollector`, ``collector=vector``, the default), from Ray rollout workers
(``collector=ray``, `roborl.plugins.ray`), or from an actor process beside a robot: only the
collector differs. A collector is built by a factory registered through the
`roborl_collectors` hook, ``factory(ctx) -> Collector``, and the loop calls

1. `start(algo)` once (after a resume has restored the counters and RNGs),
2. `collect(algo, random)` repeatedly; each call returns a `Chunk` of transitions,
3. `sync(algo)` after the loop's updates for that chunk (a remote collector pushes weights),
4. `metrics()` when the schedule logs, `state()` before each checkpoint, `close()` at the end.

The idea of a collector that yields batches of transitions to a trainer is torchrl's
(`SyncDataCollector`, `MultiaSyncDataCollector`); here it is cut to what an off-policy learner
with a replay buffer needs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from roborl.core.goals import ACHIEVED_GOAL, EPISODE_END
from roborl.core.interfaces import Algorithm
from roborl.core.obs import Obs, copy_obs, index_obs
from roborl.core.single_vector import SingleEnvVector

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

STEP_INFO_FIELDS = ("cost",)
"""Per-step info fields stored with each transition (the buffer's `costs`)."""
STEP_INFO_EXTRAS = ("intervened",)
"""Boolean per-step info fields that go into `Chunk.extras` when an env reports them
(a robot env reports `intervened` when a person took over)."""
EXECUTED_ACTION = "executed_action"
"""Info field of an env where something other than the policy may act (a person's teleop):
the action actually executed, which is the one stored."""
_STEP_INFO_KEYS = frozenset({*STEP_INFO_FIELDS, *STEP_INFO_EXTRAS, EXECUTED_ACTION, ACHIEVED_GOAL})
"""What `VectorCollector` reads from the infos of a step that ends no episode."""


@dataclass
class Chunk:
    """Transitions in arrival order (leading axis = transition) plus finished episodes.

    `obs`/`next_obs` are arrays, or dicts of arrays for Dict observation spaces (camera images
    beside states). `episodes` holds (return, length, extra metrics to log with it), e.g. the
    worker index. `extras` holds per-transition fields beside the standard ones (e.g.
    "intervened", a bool per transition), which the loop passes to `ReplayBuffer.add`.
    """

    obs: Obs
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: Obs
    terminated: np.ndarray
    costs: np.ndarray | None = None
    episodes: list[tuple[float, int, dict[str, float]]] = field(default_factory=list)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    consecutive: bool = False
    """Rows are successive steps of ONE env (`ReplayBuffer.extend`), not one step of each
    env (`ReplayBuffer.add`): n-step returns walk rows differently."""

    def __len__(self) -> int:
        return len(self.rewards)

    def head(self, n: int) -> Chunk:
        """The first `n` transitions (the loop trims the last chunk to the budget)."""
        if n >= len(self):
            return self
        costs = None if self.costs is None else self.costs[:n]
        return Chunk(
            obs=index_obs(self.obs, slice(0, n)),
            actions=self.actions[:n],
            rewards=self.rewards[:n],
            next_obs=index_obs(self.next_obs, slice(0, n)),
            terminated=self.terminated[:n],
            costs=costs,
            episodes=self.episodes,
            extras={k: v[:n] for k, v in self.extras.items()},
            consecutive=self.consecutive,
        )

    @staticmethod
    def concat(chunks: list[Chunk]) -> Chunk:
        """Successive one-env chunks (Box observations) as one `consecutive` chunk."""
        if len(chunks) == 1:
            return chunks[0]

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(c, name) for c in chunks])

        costs = None
        if any(c.costs is not None for c in chunks):
            costs = np.concatenate(
                [np.zeros(len(c), np.float32) if c.costs is None else c.costs for c in chunks]
            )
        extras = {
            key: np.concatenate([c.extras.get(key, np.zeros(len(c), bool)) for c in chunks])
            for key in {k for c in chunks for k in c.extras}
        }
        episodes = [ep for c in chunks for ep in c.episodes]
        return Chunk(
            obs=cat("obs"), actions=cat("actions"), rewards=cat("rewards"),
            next_obs=cat("next_obs"), terminated=cat("terminated"),
            costs=costs, episodes=episodes, extras=extras, consecutive=True,
        )  # fmt: skip


class Collector(abc.ABC):
    """Where experience comes from; see the module docstring for the call order."""

    observation_space: gym.Space
    action_space: gym.Space

    def start(self, algo: Algorithm) -> None:  # noqa: B027 - optional
        """Begin collecting with `algo` (reset envs, start workers)."""

    @abc.abstractmethod
    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        """The next transitions; `random`: uniform random actions (before learning_starts)."""

    def sync(self, algo: Algorithm) -> None:  # noqa: B027 - optional
        """The learner updated `algo`; a remote collector may push its weights now."""

    def metrics(self) -> dict[str, float]:
        """Extra `dist/...` style metrics for the next train log record."""
        return {}

    def state(self) -> dict[str, Any] | None:
        """What to keep in checkpoints (under `extra[<collector name>]`), or None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional
        """Release envs, workers, connections."""


def step_info(infos: dict[str, Any], key: str, done: np.ndarray) -> np.ndarray | None:
    """A per-step info field of a same-step-autoreset vector env, for every env.

    On a step that ends an episode the env resets within the same call, so `infos[key]` then
    holds the reset's value; the step's own value is in `infos["final_info"][key]`. Without
    this, the cost of the step that ends an episode was lost (issue 17).
    """
    final = infos.get("final_info") if done.any() else None
    has_final = bool(final) and key in final
    if key not in infos and not has_final:
        return None
    n = len(done)
    values = np.asarray(infos[key], np.float32) if key in infos else np.zeros(n, np.float32)
    if has_final:
        mask = done & np.asarray(final.get(f"_{key}", done), bool)
        values = np.where(mask, np.asarray(final[key], np.float32), values)
    return values


def step_extras(infos: dict[str, Any], done: np.ndarray) -> dict[str, np.ndarray]:
    """The `STEP_INFO_EXTRAS` this step's infos carry, as bool arrays (one per env)."""
    out = {}
    for key in STEP_INFO_EXTRAS:
        values = step_info(infos, key, done)
        if values is not None:
            out[key] = values.astype(bool)
    return out


def executed_actions(infos: dict[str, Any], done: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """`actions` with each env's `executed_action` where its info reports one (the step's own
    info, from `final_info` on a step that ended the episode)."""
    final = infos.get("final_info") if done.any() else None
    out = None
    for i in range(len(done)):
        source = final if done[i] and final and EXECUTED_ACTION in final else infos
        mask = source.get(f"_{EXECUTED_ACTION}")
        if EXECUTED_ACTION not in source or (mask is not None and not mask[i]):
            continue
        out = np.array(actions, copy=True) if out is None else out
        out[i] = source[EXECUTED_ACTION][i]
    return actions if out is None else out


def goal_extras(infos: dict[str, Any], done: np.ndarray) -> dict[str, np.ndarray]:
    """What the HER buffer relabels with (a goal env under ``her=``, `GoalObservation`): each
    step's `achieved_goal` (of its own next observation: from `final_info` where the episode
    ended and the env reset in the same step) and `episode_end`."""
    goals = np.array(infos[ACHIEVED_GOAL], dtype=np.float32)
    final = infos.get("final_info") if done.any() else None
    if final and ACHIEVED_GOAL in final:
        mask = done & np.asarray(final.get(f"_{ACHIEVED_GOAL}", done), bool)
        goals[mask] = np.asarray(final[ACHIEVED_GOAL], np.float32)[mask]
    return {ACHIEVED_GOAL: goals, EPISODE_END: np.array(done, dtype=bool)}


def _has_extras(infos: dict[str, Any]) -> bool:
    return any(key in infos for key in STEP_INFO_EXTRAS)


def finished_episodes(
    infos: dict[str, Any], done: np.ndarray
) -> list[tuple[float, int, dict[str, float]]]:
    """(return, length, {}) for each sub-env whose episode ended in this step."""
    if not done.any():
        return []
    final = infos.get("final_info") or {}
    if "episode" not in final:
        return []
    ep = final["episode"]
    mask = final.get("_episode", done)
    return [(float(ep["r"][i]), int(ep["l"][i]), {}) for i in np.flatnonzero(mask)]


def real_next_obs(next_obs: Obs, infos: dict[str, Any], done: np.ndarray) -> Obs:
    """`next_obs` with the final observation (not the reset one) for envs that ended.

    Gymnasium 1.x gives `infos["final_obs"]` as an object array with one single-env
    observation per sub-env (None where it did not end); for a Dict space each is a dict.
    """
    if not done.any() or "final_obs" not in infos:
        return next_obs
    final = infos["final_obs"]
    mask = np.asarray(infos.get("_final_obs", done), bool) & done
    out = copy_obs(next_obs)
    for i in np.flatnonzero(mask):
        if isinstance(out, dict):
            for k, v in out.items():
                v[i] = final[i][k]
        else:
            out[i] = final[i]
    return out


class VectorCollector(Collector):
    """The default collector: one in-process vector env, one vector step per `collect`."""

    def __init__(self, ctx: TrainContext) -> None:
        self.ctx = ctx
        self.envs = ctx.make_vec_env()
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        self.obs: Obs | None = None
        self._ended = False
        space = self.action_space
        self._box = isinstance(space, gym.spaces.Box)
        # Random-phase chunks of several steps (one env, Box spaces): see `_random_steps`.
        self._burst_ok = (
            self._box
            and self.envs.num_envs == 1
            and isinstance(self.observation_space, gym.spaces.Box)
        )
        self._burst = 1
        self._intervened = self._extras_steps = 0
        # A `SingleEnvVector` batches only the info keys read below on ordinary steps.
        lean = isinstance(self.envs, SingleEnvVector)
        self._step_kwargs = {"info_keys": _STEP_INFO_KEYS} if lean else {}
        self._rand_shape = (self.envs.num_envs, *space.shape) if self._box else None
        if self._box:  # Generator.uniform's own arithmetic (low + range * U), ~10x cheaper
            self._low = space.low.astype(np.float64)
            self._range = space.high.astype(np.float64) - self._low

    def start(self, algo: Algorithm) -> None:
        ctx = self.ctx
        ckpt = ctx.resume_checkpoint
        if ckpt is not None:
            # Each sub-env's RNG as its cut episode began (`ResetRecorder`): the reset below
            # restarts that episode from its initial state; at an episode boundary it is the
            # episode an uninterrupted run plays next.
            saved = ckpt["runner"].get("env_rng") or []
            for sub, state in zip(getattr(self.envs, "envs", None) or [], saved):
                if state is not None:
                    sub.unwrapped.np_random.bit_generator.state = state
            self.obs, _ = self.envs.reset()
        else:
            self.obs, _ = self.envs.reset(seed=ctx.run.seed)
        self.action_space.seed(ctx.run.seed)
        self._burst = ctx.event_stride() if self._burst_ok else 1

    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        if random and self._burst > 1:
            return self._random_steps(algo)
        return self._step(algo, random)

    def _random_steps(self, algo: Algorithm) -> Chunk:
        """Random steps up to the next multiple of the context's `event_stride` or the end of
        an episode, as one chunk: the loop's per-chunk work (buffer write, counters, schedule)
        is paid once per chunk, nothing scheduled runs late, and every finished episode is
        still logged at its own last step. The same transitions and RNG draws as one step per
        call."""
        chunks = []
        for _ in range(self._burst - self.ctx.step % self._burst):
            chunk = self._step(algo, True)
            chunks.append(chunk)
            if chunk.episodes or self._ended:
                break
        return Chunk.concat(chunks)

    def _step(self, algo: Algorithm, random: bool) -> Chunk:
        space, rng = self.action_space, self.ctx.np_rng
        if not random:
            actions = algo.act(self.obs, deterministic=False)
        elif self._box:  # the values rng.uniform(low, high) draws, without its per-call checks
            actions = (self._low + self._range * rng.random(self._rand_shape)).astype(np.float32)
        else:
            actions = rng.integers(0, space.n, size=self.envs.num_envs)
        next_obs, rewards, terminated, truncated, infos = self.envs.step(
            actions, **self._step_kwargs
        )
        done = np.logical_or(terminated, truncated)
        self._ended = bool(done.any())
        if EXECUTED_ACTION in infos or self._ended:  # a person may have acted instead
            actions = executed_actions(infos, done, actions)
        if self._ended:
            chunk = Chunk(
                obs=self.obs,
                actions=actions,
                rewards=rewards,
                next_obs=real_next_obs(next_obs, infos, done),
                terminated=terminated.astype(np.float32),
                costs=step_info(infos, "cost", done),
                episodes=finished_episodes(infos, done),
                extras=step_extras(infos, done),
            )
        else:  # the common step: no final obs or episode to look for (issue 23: runner cost)
            chunk = Chunk(
                obs=self.obs,
                actions=actions,
                rewards=rewards,
                next_obs=next_obs,
                terminated=terminated.astype(np.float32),
                costs=step_info(infos, "cost", done) if "cost" in infos else None,
                episodes=[],
                extras=step_extras(infos, done) if _has_extras(infos) else {},
            )
        if ACHIEVED_GOAL in infos:
            chunk.extras.update(goal_extras(infos, done))
        self.obs = next_obs
        if "intervened" in chunk.extras:
            self._intervened += int(chunk.extras["intervened"].sum())
            self._extras_steps += len(chunk)
        return chunk

    def metrics(self) -> dict[str, float]:
        """The share of steps a person took over since the last log (envs that report it)."""
        if not self._extras_steps:
            return {}
        rate = self._intervened / self._extras_steps
        self._intervened = self._extras_steps = 0
        return {"train/intervention_rate": rate}

    def close(self) -> None:
        self.envs.close()
