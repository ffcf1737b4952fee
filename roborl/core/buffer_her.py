"""Hindsight Experience Replay: a replay buffer that relabels goals when it samples.

Andrychowicz et al., "Hindsight Experience Replay", NeurIPS 2017 (arXiv 1707.01495): a
transition of an episode that missed its goal is also replayed as if a goal the episode did
reach had been asked for, with the reward recomputed for that goal, so a sparse-reward goal
task (Fetch) yields learning signal long before the first success. This buffer follows
stable-baselines3's `HerReplayBuffer` (SB3 2.x, `stable_baselines3/her/`):

- goal selection strategies (the paper's Sec. 4.5): ``future`` (an achieved goal of the same
  episode at the sampled step or later: inclusive, as SB3), ``final`` (the episode's last),
  ``episode`` (any step of the episode);
- `n_sampled_goal` = k virtual transitions per real one: the first int((1 - 1/(1+k)) *
  batch_size) rows of every batch are relabelled (0.8 for SB3's and the paper's k = 4), the
  rest are stored transitions as they were;
- relabelling at sample time within the stored episode: the new goal is the achieved goal of
  the chosen step's next observation, written into both obs and next obs, and the reward is
  the env's own ``compute_reward(next achieved goal, new goal, info)``;
- only transitions of finished episodes are sampled (an episode's goals are known only once it
  ended); an episode whose first transitions were overwritten by the ring is dropped whole;
  `terminated` is kept as stored (Fetch never terminates, truncations do not bootstrap-stop).

Deviations from SB3 (none changes what a batch means):

- The policy's input is ``concat(observation, desired_goal)`` (`roborl.core.goals
  .GoalObservation`, the paper's ``s || g``); SB3's `MultiInputPolicy` also feeds it the
  achieved goal. The achieved goal is stored beside each transition instead.
- Sampling draws from the run's seeded torch generator, not NumPy's global RNG.
- `info` is not stored (SB3's `copy_info_dict=False`, its default): `compute_reward` gets an
  empty dict per row, which Gymnasium-Robotics' rewards ignore.
- Before the first episode ends the loop waits (`can_sample` is False) where SB3 raises.
- A resumed run closes the episodes its checkpoint cut as truncated ones (SB3's
  `truncate_last_trajectory`, done by hand there): the resumed collector restarts them.
- n-step returns (``algo.n_step > 1``; SB3's HER has none): a relabelled row's n rewards are
  all recomputed for its new goal, and it bootstraps from the window's last next observation
  with that goal. Like every uncorrected n-step return this is biased towards the behaviour
  policy (Yang et al., "Bias-reduced multi-step hindsight experience replay", 2021, measure it
  on Fetch); issue 48's state gate uses n = 3 with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ExtraSpec, ReplayBuffer, with_discount
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.goals import (
    ACHIEVED_GOAL,
    EPISODE_END,
    HerConfig,
    RewardFn,
    find_goal_wrapper,
)
from roborl.core.interfaces import Algorithm, Batch

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


class HerReplayBuffer(ReplayBuffer):
    """`ReplayBuffer` of a goal env's flat observations that relabels goals when sampling.

    `goal_slice` locates the desired goal inside each observation vector (the last entries
    under `GoalObservation`); `compute_reward` is the env's. Every write must carry
    ``extras["achieved_goal"]`` (the next observation's achieved goal) and
    ``extras["episode_end"]``, which `VectorCollector` adds for a `GoalObservation` env.
    """

    def __init__(
        self,
        capacity: int,
        obs_space: gym.spaces.Box,
        action_shape: tuple[int, ...],
        goal_slice: slice,
        compute_reward: RewardFn,
        her: HerConfig | None = None,
        device: str | torch.device = "cpu",
        with_costs: bool = False,
        action_dtype: torch.dtype = torch.float32,
        extras: ExtraSpec | None = None,
    ) -> None:
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ConfigError(
                f"the HER buffer stores flat goal observations, got {obs_space}: build the "
                "env with her= (roborl.core.goals.GoalObservation)"
            )
        goal_dim = goal_slice.stop - goal_slice.start
        self.her = her or HerConfig()
        self.goal_slice = goal_slice
        self.compute_reward = compute_reward
        self._user_extras = list(extras or {})
        own = {ACHIEVED_GOAL: ((goal_dim,), np.float32)}
        super().__init__(
            capacity, obs_space, action_shape, device, with_costs, action_dtype,
            {**(extras or {}), **own},
        )  # fmt: skip
        # Episode bookkeeping, on the CPU whatever the storage device: each slot's step within
        # its episode (-1: none) and its episode's length (0: open or dropped, never sampled).
        self._step = np.full(self.capacity, -1, dtype=np.int64)
        self._len = np.zeros(self.capacity, dtype=np.int64)
        self._cur = np.zeros(0, dtype=np.int64)  # per env stream: steps of its open episode
        self._valid: torch.Tensor | None = None  # slots that may be sampled (built lazily)

    # -- writing ------------------------------------------------------------------------------

    def extend(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        costs: np.ndarray | None = None,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """`ReplayBuffer.extend`, refusing more rows than the capacity (whose dropped first
        rows would leave episodes without their start)."""
        if len(rewards) > self.capacity:
            raise ValueError(
                f"extending a HER buffer of capacity {self.capacity} with {len(rewards)} rows: "
                "its episodes would lose their first transitions"
            )
        super().extend(obs, actions, rewards, next_obs, terminated, costs, extras)

    def _write(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        costs: np.ndarray | None,
        extras: Mapping[str, np.ndarray] | None,
        consecutive: bool,
    ) -> None:
        n = len(rewards)
        if extras is None or ACHIEVED_GOAL not in extras or EPISODE_END not in extras:
            raise ValueError(
                "HER needs each transition's achieved goal and episode end (extras "
                f"{ACHIEVED_GOAL!r}, {EPISODE_END!r}); collector=vector adds them for a goal env "
                "built with her= (roborl.core.goals.GoalObservation), other sources do not"
            )
        ends = np.asarray(extras[EPISODE_END], dtype=bool).reshape(n)
        streams = 1 if consecutive else n
        if streams != len(self._cur):
            self._restart(streams)
        slots = (self.pos + np.arange(n)) % self.capacity
        self._drop_overwritten(slots)
        steps, finished = self._number(ends, consecutive, slots)
        super()._write(obs, actions, rewards, next_obs, terminated, costs, extras, consecutive)
        self._step[slots] = steps
        self._len[slots] = 0
        for last, length in finished:
            self._finish(last, length)

    def _restart(self, streams: int) -> None:
        """A new number of env streams (the first write, or another num_envs): slots of the old
        layout can no longer be walked, so their episodes stop being sampled."""
        if len(self._cur):
            self._step[:] = -1
            self._len[:] = 0
            self._valid = None
        self._cur = np.zeros(streams, dtype=np.int64)

    def _drop_overwritten(self, slots: np.ndarray) -> None:
        """SB3's rule: overwriting any transition of a finished episode drops the whole
        episode (its earlier slots are older, so already overwritten; the rest go here)."""
        stride = len(self._cur)
        for slot in slots[self._len[slots] > 0]:
            length, step = self._len[slot], self._step[slot]
            if length == 0:  # dropped with an earlier slot of its episode in this loop
                continue
            rest = (slot + np.arange(length - step) * stride) % self.capacity
            self._len[rest] = 0
            self._step[rest] = -1
            self._valid = None

    def _number(
        self, ends: np.ndarray, consecutive: bool, slots: np.ndarray
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Each new row's step within its episode, and the (last slot, length) of the episodes
        these rows end."""
        if not consecutive:  # one row per env stream
            steps = self._cur.copy()
            self._cur += 1
            finished = [(int(slots[e]), int(self._cur[e])) for e in np.flatnonzero(ends)]
            self._cur[ends] = 0
            return steps, finished
        # Successive rows of one stream: the step restarts after every episode end.
        n = len(ends)
        seg = np.concatenate([[0], np.cumsum(ends[:-1])])  # episode ends before each row
        first = np.concatenate([[0], np.flatnonzero(ends) + 1])[seg]
        steps = np.arange(n) - first + np.where(seg == 0, self._cur[0], 0)
        finished = [(int(slots[j]), int(steps[j]) + 1) for j in np.flatnonzero(ends)]
        self._cur[0] = 0 if ends[-1] else steps[-1] + 1
        return steps, finished

    def _finish(self, last: int, length: int) -> None:
        """The episode ending at slot `last` is complete: its slots become sampleable, unless
        the ring already overwrote its first ones (capacity < its span)."""
        stride = len(self._cur)
        if length * stride > self.capacity:
            return
        self._len[(last - np.arange(length) * stride) % self.capacity] = length
        self._valid = None

    # -- sampling -----------------------------------------------------------------------------

    def _valid_slots(self) -> torch.Tensor:
        if self._valid is None:
            self._valid = torch.from_numpy(np.flatnonzero(self._len[: self.size] > 0))
        return self._valid

    def can_sample(self, batch_size: int) -> bool:
        """A batch needs `batch_size` stored transitions and one finished episode."""
        return self.size >= batch_size and len(self._valid_slots()) > 0

    def goal_slots(self, slots: np.ndarray, generator: torch.Generator | None = None) -> np.ndarray:
        """For transitions at `slots`, the slots whose achieved goals become their new goals,
        chosen within each transition's episode by the configured strategy."""
        step, length = self._step[slots], self._len[slots]
        strategy = self.her.strategy
        if strategy == "final":
            chosen = length - 1
        else:
            u = torch.rand(len(slots), generator=generator, dtype=torch.float64).numpy()
            lo = step if strategy == "future" else np.zeros_like(step)
            chosen = np.minimum(lo + np.floor(u * (length - lo)).astype(np.int64), length - 1)
        return (slots + (chosen - step) * len(self._cur)) % self.capacity

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Uniform over transitions of finished episodes; the first int(relabel_fraction *
        batch_size) rows get a goal from their episode and the reward for it."""
        return self._sample(batch_size, 1, 1.0, generator)

    def sample_nstep(
        self,
        batch_size: int,
        n_step: int,
        gamma: float,
        generator: torch.Generator | None = None,
        stop_at: str | None = None,
    ) -> Batch:
        """`sample` with n-step returns: up to `n_step` rewards of the transition's episode
        (fewer at its end, after a terminal or, with `stop_at`, before a step a person took:
        `ReplayBuffer.sample_nstep`), each recomputed for the new goal on relabelled rows,
        bootstrapping from the last step's next observation with that goal."""
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        batch = self._sample(batch_size, n_step, gamma, generator, stop_at)
        if n_step == 1:
            return with_discount(batch, gamma)
        return batch

    def _sample(
        self,
        batch_size: int,
        n_step: int,
        gamma: float,
        generator: torch.Generator | None,
        stop_at: str | None = None,
    ) -> Batch:
        valid = self._valid_slots()
        if len(valid) == 0:
            raise RuntimeError(
                "the HER buffer holds no finished episode yet: it samples transitions of "
                "finished episodes only (make learning_starts longer than an episode)"
            )
        idx_cpu = valid[torch.randint(0, len(valid), (batch_size,), generator=generator)]
        slots = idx_cpu.numpy()
        # The window of each transition: its episode's next n_step slots, `inside` it.
        ks = np.arange(n_step)
        window = (slots[:, None] + ks[None, :] * len(self._cur)) % self.capacity
        inside = torch.from_numpy(self._step[slots][:, None] + ks < self._len[slots][:, None])
        dev = self.device
        win = torch.from_numpy(window).to(dev)  # [B, n]
        cont = (1.0 - self.terminated[win[:, :-1]]) * inside[:, 1:].to(dev).float()
        cont = cont * self._not_flagged(stop_at, win[:, 1:])
        used = torch.cat([torch.ones_like(win[:, :1], dtype=cont.dtype), cont.cumprod(1)], 1)
        m = used.sum(1).long()  # steps used, 1..n_step
        first, last = win[:, 0], win.gather(1, (m - 1)[:, None]).squeeze(1)
        obs, next_obs, rewards = self.obs[first], self.next_obs[last], self.rewards[win]
        n_virtual = int(self.her.relabel_fraction * batch_size)
        if n_virtual:
            achieved = self.extras[ACHIEVED_GOAL]
            where = self.goal_slots(slots[:n_virtual], generator)
            goals = achieved[torch.from_numpy(where).to(dev)]
            obs[:n_virtual, self.goal_slice] = goals
            next_obs[:n_virtual, self.goal_slice] = goals
            reached = achieved[win[:n_virtual]].reshape(n_virtual * n_step, -1)
            new = self.compute_reward(
                reached.cpu().numpy(),
                goals.repeat_interleave(n_step, 0).cpu().numpy(),
                [{} for _ in range(n_virtual * n_step)],
            )
            rewards[:n_virtual] = torch.as_tensor(
                np.asarray(new, dtype=np.float32).reshape(n_virtual, n_step), device=dev
            )
        disc = gamma ** torch.arange(n_step, device=dev, dtype=torch.float32)
        weights = used * disc
        return Batch(
            obs=obs,
            actions=self.actions[first],
            rewards=(rewards * weights).sum(1),
            next_obs=next_obs,
            terminated=self.terminated[last],
            costs=None if self.costs is None else (self.costs[win] * weights).sum(1),
            discount=None if n_step == 1 else gamma ** m.to(torch.float32),
            extras={name: self.extras[name][first] for name in self._user_extras},
        )

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        data = super().state_dict()
        n = self.size
        data["her"] = {
            "step": torch.from_numpy(self._step[:n].copy()),
            "length": torch.from_numpy(self._len[:n].copy()),
        }
        return data

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The base restore (also into another capacity), the episode bookkeeping unrolled
        the same way, then the episodes the checkpoint cut closed as truncated ones."""
        her = state.get("her")
        if her is None:
            raise CheckpointError(
                "the checkpoint's replay buffer has no HER bookkeeping (its run had no her=): "
                "resume it without her=, or start a new run"
            )
        super().load_state_dict(state)
        n, saved_cap = self.size, int(state.get("capacity", self.capacity))
        step, length = her["step"].numpy(), her["length"].numpy()
        if saved_cap != self.capacity:  # BufferState's unrolling, oldest first
            oldest = int(state["pos"]) % saved_cap if n == saved_cap else 0
            order = (np.arange(n) + oldest) % saved_cap
            step, length = step[order], length[order]
        self._step[:] = -1
        self._len[:] = 0
        self._step[:n], self._len[:n] = step, length
        self._cur = np.zeros(max(self.stride, 1), dtype=np.int64)
        self._valid = None
        for e in range(len(self._cur)):  # each stream's newest row
            if n <= e:
                break
            last = (self.pos - 1 - e) % self.capacity
            if self._len[last] == 0 and self._step[last] >= 0:
                self._finish(int(last), int(self._step[last]) + 1)


def her_replay_buffer(
    ctx: TrainContext,
    algo: Algorithm,
    her: HerConfig,
    capacity: int,
    extras: ExtraSpec | None = None,
) -> HerReplayBuffer:
    """The off-policy loop's buffer under ``her=``: checks that the run can relabel (a goal env
    built with `GoalObservation`, the in-process collector, the env's own reward), then builds it with that env's `compute_reward`."""
    run = ctx.run
    what = f"her={her.strategy}"
    if run.collector_name != "vector":
        raise ConfigError(
            f"{what} needs each transition's achieved goal, which only collector=vector "
            f"delivers; collector={run.collector_name} does not"
        )
    if run.reward:
        raise ConfigError(
            f"{what} recomputes rewards with the env's compute_reward, so it cannot relabel a "
            f"learned reward (reward={run.reward!r}); drop one of them"
        )
    env = ctx.make_env(learned_reward=False)
    goal_env = find_goal_wrapper(env)
    if goal_env is None:
        env.close()
        raise ConfigError(
            f"{what} needs a goal env built from env= (a Dict observation with observation, "
            "achieved_goal, desired_goal and compute_reward); this run's env is not one "
            "(robot= envs never are)"
        )
    space = algo.observation_space
    if not isinstance(space, gym.spaces.Box) or space.shape != goal_env.observation_space.shape:
        raise ConfigError(
            f"{what}: algo={ctx.algo_name} was built on {space}, not on the goal env's "
            f"(observation, desired_goal) vector {goal_env.observation_space}; HER works with "
            "vector algorithms (sac, dsac_t, ...)"
        )
    act = algo.action_space
    discrete = isinstance(act, gym.spaces.Discrete)
    return HerReplayBuffer(
        capacity,
        space,
        () if discrete else act.shape,
        goal_env.goal_slice,
        goal_env.compute_reward,
        her,
        device=run.buffer_device or ctx.device,
        with_costs=True,
        action_dtype=torch.long if discrete else torch.float32,
        extras=extras,
    )
