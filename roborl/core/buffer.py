"""A replay buffer of preallocated tensors, written and sampled without Python per-sample loops.

Transitions from a vector env arrive as arrays with a leading env axis and are written with
one slice assignment; sampling is one `torch.randint` and one gather per field, on the
training device.

Observations are a flat `Box` (one float32 tensor for obs and one for next_obs, as always) or a
`gym.spaces.Dict` of Box entries (state vectors beside uint8 camera images). A Dict buffer
keeps one tensor per key in the space's dtype (float64 entries become float32) and stores each
frame ONCE: the next observation of slot i is the observation at the slot where the same env's
next transition was written (i + stride), because a collector's next call starts from exactly
that observation. Where this is not so (the step ended an episode and the env reset, a chunk
from another source, the newest transitions whose successor has not arrived), the next
observation lives in a small side store. The link is made only when the successor's
observation is bit-identical to the stored next observation, so sharing can never return a
wrong frame, whatever order callers add data in. Memory: capacity frames plus about one frame
per episode end held and one per env; SB3's `optimize_memory_usage` applies the same idea to
Box spaces and refuses Dict ones.

Frame-stacked image keys (rank 4, (k, H, W, C)) are stored as stacks: each transition holds its
k frames (next obs still shared), so a k-stack costs k frames per transition, not 2k.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.errors import CheckpointError
from roborl.core.interfaces import Batch
from roborl.core.obs import check_obs_space, index_obs

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


class ReplayBuffer:
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
            # Where slot i's next observation is: a slot (< capacity) or capacity + a side
            # entry. Kept on the CPU so bookkeeping never waits on the device.
            self._next = torch.full((self.capacity,), -1, dtype=torch.long)
            self._side: dict[str, torch.Tensor] = {
                k: torch.zeros((0, *v.shape[1:]), dtype=v.dtype, **kw) for k, v in self.obs.items()
            }
            self._free: list[int] = []
            self._last: torch.Tensor | None = None  # slots written by the previous `add`
            self._pending: dict[str, np.ndarray] | None = None  # their next obs, for linking
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

    # -- Dict observations: shared obs/next_obs storage -------------------------------------

    def _add_dict_obs(
        self, obs: Any, next_obs: Any, idx: torch.Tensor, put: Any, consecutive: bool
    ) -> None:
        n = len(idx)
        group = 1 if consecutive else n  # rows per env step: the previous add's rows link here
        missing = [k for k in self.obs if k not in obs or k not in next_obs]
        if missing:
            raise ValueError(f"observation dict lacks the key(s) {missing} of the buffer's space")
        # Slots about to be overwritten give back the side entries they held.
        old = self._next[idx]
        self._release(old[old >= self.capacity] - self.capacity)
        new_obs = {k: np.asarray(obs[k]).reshape(n, *self.obs_shape[k]) for k in self.obs}
        for k, dst in self.obs.items():
            put(dst, new_obs[k])
        new_next = {k: np.asarray(next_obs[k]).reshape(n, *self.obs_shape[k]) for k in self.obs}
        # Link the previous add's transitions to these obs where they are the same frames
        # (never when this write overwrites them: capacity < rows of both writes).
        last = self._last
        if (
            last is not None
            and len(last) == group
            and self.capacity >= n + group
            and self._pending is not None
        ):
            same = np.ones(group, dtype=bool)
            for k, pend in self._pending.items():
                same &= (pend == new_obs[k][:group]).reshape(group, -1).all(axis=1)
            link = torch.from_numpy(same)
            if link.any():
                refs = self._next[last[link]]
                self._release(refs - self.capacity)
                self._next[last[link]] = idx[:group][link]
        # Consecutive rows: row j's next obs is row j+1's obs wherever the frames are equal.
        inner = np.zeros(n, dtype=bool)
        if consecutive and n > 1:
            inner[:-1] = True
            for k in self.obs:
                inner[:-1] &= (new_next[k][:-1] == new_obs[k][1:]).reshape(n - 1, -1).all(axis=1)
        inner_t = torch.from_numpy(inner)
        self._next[idx[inner_t]] = idx[1:][inner_t[:-1]] if n > 1 else idx[:0]
        # The other next obs wait in the side store until their successor arrives (if ever).
        rows = torch.from_numpy(~inner)
        entries = self._alloc(int(rows.sum()))
        ent_d, rows_d = entries.to(self.device), rows.to(self.device)
        for k, side in self._side.items():
            side[ent_d] = torch.as_tensor(new_next[k]).to(self.device, side.dtype)[rows_d]
        self._next[idx[rows]] = entries + self.capacity
        self._last = idx[n - group :].clone()
        self._pending = {k: np.array(v[n - group :], copy=True) for k, v in new_next.items()}

    def _alloc(self, n: int) -> torch.Tensor:
        if len(self._free) < n:
            size = next(iter(self._side.values())).shape[0]
            grow = max(size, n - len(self._free), 16)
            for k, side in self._side.items():
                extra = torch.zeros((grow, *side.shape[1:]), dtype=side.dtype, device=self.device)
                self._side[k] = torch.cat([side, extra])
            self._free.extend(range(size + grow - 1, size - 1, -1))
        taken = [self._free.pop() for _ in range(n)]
        return torch.tensor(taken, dtype=torch.long)

    def _release(self, entries: torch.Tensor) -> None:
        self._free.extend(int(e) for e in entries.tolist())

    def _gather_next(self, where: torch.Tensor) -> dict[str, torch.Tensor]:
        """Next observations for CPU indices `where` (slots or capacity + side entries)."""
        in_side = where >= self.capacity
        slots = torch.where(in_side, torch.zeros_like(where), where).to(self.device)
        out = {k: v[slots] for k, v in self.obs.items()}
        if in_side.any():
            rows = torch.nonzero(in_side).squeeze(1)
            ent = (where[rows] - self.capacity).to(self.device)
            rows = rows.to(self.device)
            for k, v in out.items():
                v[rows] = self._side[k][ent]
        return out

    def next_observation(self, slots: torch.Tensor) -> Any:
        """Stored next observations of `slots` (CPU long tensor), for tests and exports."""
        if not self.dict_obs:
            return self.next_obs[slots.to(self.device)]
        return self._gather_next(self._next[slots.cpu()])

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
    ) -> Batch:
        """Sample n-step transitions: sum_k gamma^k r_{t+k}, s_{t+m}, d_{t+m-1}, gamma^m.

        m <= n_step stops early at a terminal, at an episode boundary (a time-limit reset, found
        where next_obs of one step differs from obs of the same env's next step; for Dict
        observations, where the next obs is not linked to that slot) and at the newest data.
        All n steps are gathered as one [B, n] index tensor, no Python loop over samples.
        `Batch.discount` carries gamma^m, which SAC and DSAC-T use in their targets.
        """
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if n_step == 1:
            return self.sample(batch_size, generator)
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

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Only the filled part, on CPU (the checkpoint stays small early in a run).

        Plain tensors, ints and dicts of them: loads with `torch.load(weights_only=True)`.
        """
        n = self.size
        data: dict[str, Any] = {
            "actions": self.actions[:n].cpu(),
            "rewards": self.rewards[:n].cpu(),
            "terminated": self.terminated[:n].cpu(),
            "pos": self.pos,
            "size": self.size,
            "capacity": self.capacity,
            "stride": self.stride,
        }
        if self.dict_obs:
            data["obs"] = {k: v[:n].cpu() for k, v in self.obs.items()}
            data["next_index"] = self._next[:n].clone()
            data["side"] = {k: v.cpu() for k, v in self._side.items()}
            data["free"] = torch.tensor(self._free, dtype=torch.long)
            data["last"] = self._last.clone() if self._last is not None else None
            pend = self._pending
            data["pending"] = None if pend is None else {
                k: torch.from_numpy(v) for k, v in pend.items()
            }  # fmt: skip
        else:
            data["obs"] = self.obs[:n].cpu()
            data["next_obs"] = self.next_obs[:n].cpu()
        if self.costs is not None:
            data["costs"] = self.costs[:n].cpu()
        if self.extras:
            data["extras"] = {name: t[:n].cpu() for name, t in self.extras.items()}
        return data

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict`, also into a buffer of another capacity.

        A resumed run with more (or fewer) total_steps sizes its buffer anew. The saved ring is
        then unrolled oldest-first into rows 0..size-1 with `pos = size % capacity`, for Box and
        Dict observations and every per-transition field alike, so the next transitions go
        after the newest ones (never over the oldest) and sampling draws only written rows. A
        saved buffer holding more transitions than this capacity is refused (which ones to
        drop is the user's call, not a silent one). The same capacity loads slot for slot.
        """
        n = int(state["size"])
        saved_cap = int(state.get("capacity", self.capacity))
        if n > self.capacity:
            raise CheckpointError(
                f"the checkpoint's replay buffer holds {n} transitions, but this run's buffer "
                f"has room for {self.capacity} (min(buffer_size, total_steps)); resume with "
                f"total_steps and buffer_size of at least {n}."
            )
        self._views.clear()  # storage may be replaced below
        self._row_views = None
        saved_dict = isinstance(state["obs"], Mapping)
        if saved_dict != self.dict_obs:
            kinds = {True: "Dict", False: "flat (Box)"}
            raise ValueError(
                f"saved buffer holds {kinds[saved_dict]} observations, this buffer "
                f"{kinds[self.dict_obs]} ones: the checkpoint belongs to another env"
            )
        pos = int(state["pos"]) % self.capacity
        order: torch.Tensor | None = None  # saved slots in the order they are loaded
        if saved_cap != self.capacity:
            oldest = int(state["pos"]) % saved_cap if n == saved_cap else 0
            order = (torch.arange(n) + oldest) % saved_cap
            pos = n % self.capacity
        if self.dict_obs:
            if set(state["obs"]) != set(self.obs):
                raise ValueError(
                    f"saved buffer has observation keys {sorted(state['obs'])}, this buffer "
                    f"{sorted(self.obs)}"
                )
            nxt = state["next_index"].clone()
            last = state.get("last")
            last = None if last is None else last.clone()
            if order is not None:
                renumber = torch.full((saved_cap,), -1, dtype=torch.long)
                renumber[order] = torch.arange(n)
                nxt = nxt[order]
                in_side = nxt >= saved_cap
                nxt = torch.where(
                    in_side, nxt - saved_cap + self.capacity, renumber[nxt.clamp(0, saved_cap - 1)]
                )
                if last is not None:
                    last = renumber[last]
                    last = None if bool((last < 0).any()) else last
            for k, v in state["obs"].items():
                self.obs[k][:n] = (v if order is None else v[order]).to(self.device)
            self._next.fill_(-1)
            self._next[:n] = nxt
            # A copy: the side store is written in place, and `state` may alias another
            # buffer's (`state_dict` of a CPU buffer returns its tensors, not copies).
            self._side = {k: v.to(self.device, copy=True) for k, v in state["side"].items()}
            self._free = [int(e) for e in state["free"].tolist()]
            self._last = last
            pend = state.get("pending")
            self._pending = None if pend is None else {k: v.numpy().copy() for k, v in pend.items()}

        def load(dst: torch.Tensor, values: torch.Tensor) -> None:
            dst[:n] = (values if order is None else values[order]).to(self.device)

        for name in ("actions", "rewards", "terminated"):
            load(getattr(self, name), state[name])
        if self.costs is not None and "costs" in state:
            load(self.costs, state["costs"])
        if not self.dict_obs:
            load(self.obs, state["obs"])
            load(self.next_obs, state["next_obs"])
        for name, values in (state.get("extras") or {}).items():
            if name in self.extras:
                load(self.extras[name], values)
        self.size = n
        self.pos = pos
        self.stride = int(state.get("stride", 1))
