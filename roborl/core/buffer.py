"""A replay buffer of preallocated tensors, written and sampled without Python per-sample loops.

Transitions from a vector env arrive as arrays with a leading env axis and are written with
one slice assignment; sampling is one `torch.randint` and one gather per field, on the
training device.

Observations are a flat `Box` (one float32 tensor for obs and one for next_obs, as always) or a
`gym.spaces.Dict` of Box entries (state vectors beside uint8 camera images), whose frames are
stored once (`buffer_dict_obs.py`). Checkpoints of the buffer: `buffer_state.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer_dict_obs import SharedFrames
from roborl.core.buffer_state import BufferState
from roborl.core.interfaces import Batch
from roborl.core.obs import check_obs_space, index_obs

if TYPE_CHECKING:
    from roborl.core.config import OffPolicyConfig

ExtraSpec = Mapping[str, "tuple[tuple[int, ...], Any]"]
"""Extra per-transition fields: name -> (shape, dtype), dtype a numpy or torch dtype."""


def torch_dtype(dtype: Any) -> torch.dtype:
    """A torch dtype for a numpy/torch dtype; float64 becomes float32 (what networks use)."""
    if isinstance(dtype, torch.dtype):
        return torch.float32 if dtype == torch.float64 else dtype
    np_dtype = np.dtype(dtype)
    if np_dtype == np.float64:
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=np_dtype)).dtype


_NUMPY_DTYPES = frozenset(
    {torch.float32, torch.float64, torch.float16, torch.uint8, torch.int64, torch.int32, torch.bool}
)
"""Storage dtypes that `Tensor.numpy()` views (bfloat16, for one, has no NumPy twin)."""


INTERVENED = "intervened"
"""The extra that marks a transition a person took over (`roborl.core.demos.EXTRAS`)."""


@dataclass(frozen=True)
class Returns:
    """The bootstrapped return a replay sampler forms: up to `n_step` rewards discounted by
    `gamma`, and `Batch.discount` = gamma**m for the m <= n_step steps used.

    One home for the discount: `gamma` and `n_step` are the algorithm's settings (`algo.gamma`,
    `algo.n_step`, fields of `roborl.core.config.OffPolicyConfig`), read once, by `Returns.of`,
    when the off-policy loop starts. Every batch the loop samples carries `Batch.discount`,
    and replay-based updates (SAC, DSAC-T, DrQ/RLPD, SAC-Lagrangian) bootstrap with it and
    never read `algo.gamma` themselves (`Batch.require_discount`)."""

    gamma: float
    n_step: int = 1
    stop_at: str | None = None
    """A boolean extra (`"intervened"`) before whose True rows an n-step return stops."""

    @classmethod
    def of(cls, config: OffPolicyConfig) -> Returns:
        """The one accessor: `algo.gamma`, `algo.n_step` and `algo.n_step_stops_at_person` of a
        replay-based algorithm."""
        stop_at = INTERVENED if config.n_step_stops_at_person else None
        return cls(gamma=config.gamma, n_step=config.n_step, stop_at=stop_at)


class ReplayBuffer(SharedFrames, BufferState):
    """Ring buffer of (obs, action, reward, next_obs, terminated[, cost][, extras]) tensors.

    `obs_shape` is a shape tuple or a Box space (flat observations, as before) or a Dict space.
    `extras` names per-transition fields that `add(..., extras=...)` stores and sampling
    returns in `Batch.extras` (e.g. ``{"intervened": ((), np.bool_)}``); missing ones are zero.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...] | gym.Space,
        action_shape: tuple[int, ...],
        device: str | torch.device = "cpu",
        with_costs: bool = False,
        action_dtype: torch.dtype = torch.float32,
        extras: ExtraSpec | None = None,
    ) -> None:
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.action_shape = tuple(action_shape)
        kw = {"device": self.device}
        self.dict_obs = isinstance(obs_shape, gym.spaces.Dict)
        self.obs_space: gym.Space | None = obs_shape if isinstance(obs_shape, gym.Space) else None
        if self.dict_obs:
            check_obs_space(obs_shape, "replay buffer's observation space")
            spaces = obs_shape.spaces
            self.obs_shape: Any = {k: tuple(s.shape) for k, s in spaces.items()}
            self.obs: Any = {
                k: torch.zeros((self.capacity, *s.shape), dtype=torch_dtype(s.dtype), **kw)
                for k, s in spaces.items()
            }
            self.next_obs: Any = None  # shared with obs, see `_next`
            self._init_shared_frames()
        else:
            shape = obs_shape.shape if isinstance(obs_shape, gym.Space) else obs_shape
            self.obs_shape = tuple(shape)
            self.obs = torch.zeros((self.capacity, *self.obs_shape), dtype=torch.float32, **kw)
            self.next_obs = torch.zeros((self.capacity, *self.obs_shape), dtype=torch.float32, **kw)
        self.actions = torch.zeros((self.capacity, *action_shape), dtype=action_dtype, **kw)
        self.rewards = torch.zeros(self.capacity, dtype=torch.float32, **kw)
        self.terminated = torch.zeros(self.capacity, dtype=torch.float32, **kw)
        self.costs = torch.zeros(self.capacity, dtype=torch.float32, **kw) if with_costs else None
        self.extras: dict[str, torch.Tensor] = {
            name: torch.zeros((self.capacity, *shape), dtype=torch_dtype(dtype), **kw)
            for name, (shape, dtype) in (extras or {}).items()
        }
        self.pos = 0
        self.size = 0
        # NumPy views of CPU storage, by tensor id (the tensor is kept to detect replacement).
        self._views: dict[int, tuple[torch.Tensor, np.ndarray]] = {}
        self._row_views: list[np.ndarray | None] | None = None  # `_add_row`'s, built lazily
        # Envs per `add` call: the same env's next transition sits `stride` slots later.
        self.stride = 1

    def __len__(self) -> int:
        return self.size

    def can_sample(self, batch_size: int) -> bool:
        """Whether the loop may draw a batch now (the HER buffer also waits for an episode
        to end, `roborl.core.buffer_her`)."""
        return self.size >= batch_size

    def nbytes(self) -> int:
        """Bytes held by the buffer's tensors (side store included): memory reports."""
        tensors = [self.actions, self.rewards, self.terminated, *self.extras.values()]
        if self.costs is not None:
            tensors.append(self.costs)
        if self.dict_obs:
            tensors += [*self.obs.values(), *self._side.values(), self._next]
        else:
            tensors += [self.obs, self.next_obs]
        return sum(t.numel() * t.element_size() for t in tensors)

    def add(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        costs: np.ndarray | None = None,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Add a batch of transitions (leading axis = env index).

        For a Dict buffer `obs`/`next_obs` are dicts of arrays. `extras` not named at
        construction are ignored; named ones that are missing are stored as zeros.
        """
        n = len(rewards)
        if n > self.capacity:
            raise ValueError(f"adding {n} transitions to a buffer of capacity {self.capacity}")
        if n == 1 and not self.dict_obs and not self.extras and self.device.type == "cpu":
            self._add_row(obs, actions, rewards, next_obs, terminated, costs)
            return
        self._write(obs, actions, rewards, next_obs, terminated, costs, extras, False)

    def _add_row(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        costs: np.ndarray | None,
    ) -> None:
        """`add` of one env's transition into flat CPU storage: element writes into cached
        NumPy views, ~4x cheaper than `_write`'s general path, for the runner's commonest call
        (one env, one step; issue 23)."""
        views = self._row_views
        if views is None:
            fields = [self.obs, self.next_obs, self.actions, self.rewards, self.terminated]
            if any(t.dtype not in _NUMPY_DTYPES for t in fields):
                self._write(obs, actions, rewards, next_obs, terminated, costs, None, False)
                return
            views = self._row_views = [t.numpy() for t in fields] + [
                None if self.costs is None else self.costs.numpy()
            ]
        p = self.pos
        views[0][p] = np.asarray(obs)[0]
        views[1][p] = np.asarray(next_obs)[0]
        views[2][p] = np.asarray(actions)[0]
        views[3][p] = rewards[0]
        views[4][p] = terminated[0]
        if views[5] is not None:
            views[5][p] = 0.0 if costs is None else costs[0]
        self.stride = 1
        self.pos = (p + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

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
        """Add consecutive transitions of ONE stream (a dataset's rows, demo episodes).

        Unlike `add` (one row per env), row j+1 follows row j, so a Dict buffer shares the
        frame between row j's next obs and row j+1's obs wherever they are equal (inside an
        episode), and n-step sampling walks rows one by one. More rows than the capacity keep
        the newest.
        """
        n = len(rewards)
        if n > self.capacity:  # as if all rows were written: the same slots as n adds
            self.pos = (self.pos + n - self.capacity) % self.capacity
            if self.dict_obs:
                self._last = None  # its successor row is among the dropped ones
            keep = slice(n - self.capacity, n)
            obs, next_obs = index_obs(obs, keep), index_obs(next_obs, keep)
            actions, rewards, terminated = actions[keep], rewards[keep], terminated[keep]
            costs = None if costs is None else costs[keep]
            extras = None if extras is None else {k: v[keep] for k, v in extras.items()}
        self._write(obs, actions, rewards, next_obs, terminated, costs, extras, True)

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
        self.stride = 1 if consecutive else n
        # CPU storage written through a NumPy view of the slots (a slice when they do not
        # wrap): ~2 us per field instead of ~20 us for tensor creation + index_put, which
        # made `add` most of the runner's per-step cost with one env (issue 23). The index
        # tensor is built only for the paths that need it.
        pos, flat = self.pos, self.device.type == "cpu" and self.pos + n <= self.capacity
        idx_cpu = idx = None
        if not flat or self.dict_obs or self.extras:
            idx_cpu = (torch.arange(n) + pos) % self.capacity
            idx = idx_cpu.to(self.device)

        views = self._views

        def put(dst: torch.Tensor, src: Any) -> None:
            if flat and dst.dtype in _NUMPY_DTYPES:
                entry = views.get(id(dst))
                if entry is None or entry[0] is not dst:  # first write, or a loaded tensor
                    entry = views[id(dst)] = (dst, dst.numpy())
                view = entry[1]
                view[pos : pos + n] = np.asarray(src).reshape((n, *view.shape[1:]))
                return
            slots = idx if idx is not None else ((torch.arange(n) + pos) % self.capacity)
            dst[slots] = (
                torch.as_tensor(np.asarray(src), dtype=dst.dtype)
                .to(self.device)
                .reshape((n, *dst.shape[1:]))
            )

        if self.dict_obs:
            self._add_dict_obs(obs, next_obs, idx_cpu, put, consecutive)
        else:
            put(self.obs, obs)
            put(self.next_obs, next_obs)
        put(self.actions, actions)
        put(self.rewards, rewards)
        put(self.terminated, terminated)
        if self.costs is not None:
            put(self.costs, costs if costs is not None else np.zeros(n))
        for name, dst in self.extras.items():
            value = None if extras is None else extras.get(name)
            if value is None:
                dst[idx] = 0
            else:
                put(dst, value)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    # -- sampling ---------------------------------------------------------------------------

    def _obs_at(self, idx: torch.Tensor) -> Any:
        if self.dict_obs:
            return {k: v[idx] for k, v in self.obs.items()}
        return self.obs[idx]

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx_cpu = torch.randint(0, self.size, (batch_size,), generator=generator)
        idx = idx_cpu.to(self.device)
        if self.dict_obs:
            next_obs = self._gather_next(self._next[idx_cpu])
        else:
            next_obs = self.next_obs[idx]
        return Batch(
            obs=self._obs_at(idx),
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_obs=next_obs,
            terminated=self.terminated[idx],
            costs=None if self.costs is None else self.costs[idx],
            extras={name: t[idx] for name, t in self.extras.items()},
        )

    def sample_nstep(
        self,
        batch_size: int,
        n_step: int,
        gamma: float,
        generator: torch.Generator | None = None,
        stop_at: str | None = None,
    ) -> Batch:
        """Sample n-step transitions: sum_k gamma^k r_{t+k}, s_{t+m}, d_{t+m-1}, gamma^m.

        m <= n_step stops early at a terminal, at an episode boundary (a time-limit reset, found
        where next_obs of one step differs from obs of the same env's next step; for Dict
        observations, where the next obs is not linked to that slot), at the newest data and,
        with `stop_at` (an extra's name, `"intervened"`), before a later step whose flag is set:
        a person's actions are not the policy's, so their rewards must not be credited to the
        row's action (a stop just before a takeover would earn the person's push). Rows
        whose own flag is set keep their first reward (Q of the person's action, bootstrapped
        with the policy's), as Retrace cuts its traces at actions the policy would not take.
        All n steps are gathered as one [B, n] index tensor, no Python loop over samples.
        `Batch.discount` carries gamma^m (gamma for every row when n_step is 1: the same
        transitions as `sample`, with the discount set), which replay-based updates use in
        their targets (`Returns`).
        """
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if n_step == 1:
            return with_discount(self.sample(batch_size, generator), gamma)
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        start = torch.randint(0, self.size, (batch_size,), generator=generator)
        oldest = self.pos if self.size == self.capacity else 0
        logical = (start - oldest) % self.capacity  # 0 = oldest transition held
        ks = torch.arange(n_step)
        idx = (start[:, None] + ks[None, :] * self.stride) % self.capacity  # [B, n]
        in_data = logical[:, None] + ks[None, :] * self.stride < self.size
        dev = self.device
        idx_d = idx.to(dev)
        term = self.terminated[idx_d]  # [B, n]
        # step k is used iff steps 0..k-1 neither terminated nor ended the episode
        if self.dict_obs:
            same_episode = (self._next[idx[:, :-1]] == idx[:, 1:]).to(dev).float()
        else:
            same_episode = (
                (self.next_obs[idx_d[:, :-1]] == self.obs[idx_d[:, 1:]]).flatten(2).all(-1).float()
            )
        cont = (1.0 - term[:, :-1]) * same_episode
        cont = cont * in_data[:, 1:].to(dev).float()
        cont = cont * self._not_flagged(stop_at, idx_d[:, 1:])
        valid = torch.cat([torch.ones_like(cont[:, :1]), torch.cumprod(cont, dim=1)], dim=1)
        disc = gamma ** ks.to(dev, torch.float32)
        rewards = (self.rewards[idx_d] * valid * disc).sum(1)
        m = valid.sum(1).long()  # steps used, 1..n
        last = idx_d.gather(1, (m - 1)[:, None]).squeeze(1)
        first = idx_d[:, 0]
        costs = None
        if self.costs is not None:
            costs = (self.costs[idx_d] * valid * disc).sum(1)
        if self.dict_obs:
            next_obs = self._gather_next(self._next[last.cpu()])
        else:
            next_obs = self.next_obs[last]
        return Batch(
            obs=self._obs_at(first),
            actions=self.actions[first],
            rewards=rewards,
            next_obs=next_obs,
            terminated=self.terminated[last],
            costs=costs,
            discount=gamma ** m.to(torch.float32),
            extras={name: t[first] for name, t in self.extras.items()},
        )

    def _not_flagged(self, name: str | None, idx: torch.Tensor) -> torch.Tensor | float:
        """1.0 where the extra `name` is unset at `idx` (everywhere without `name`, or when
        the buffer keeps no such extra: then nobody but the policy acted)."""
        if name is None or name not in self.extras:
            return 1.0
        return (~self.extras[name][idx].bool()).float()


def with_discount(batch: Batch, gamma: float) -> Batch:
    """`batch` with `discount` = gamma on every row (one-step transitions)."""
    batch.discount = torch.full(
        (len(batch),), gamma, dtype=torch.float32, device=batch.rewards.device
    )
    return batch
