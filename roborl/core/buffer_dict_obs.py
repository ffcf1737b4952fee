"""Dict observations in the replay buffer: each frame stored once, obs and next obs sharing it.

Why apart: for `gym.spaces.Dict` observations of Box entries (state vectors beside uint8 camera
images) the buffer does not hold obs and next obs side by side as it does for a flat `Box`;
the bookkeeping that lets them share frames is its own job. A Dict buffer keeps one tensor per key in the space's dtype (float64 entries become float32) and stores each
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

from typing import Any

import numpy as np
import torch


class SharedFrames:
    """`ReplayBuffer`'s storage of Dict observations (see the module docstring): the index of
    each slot's next observation, and the side store for those that are not another slot's."""

    capacity: int
    device: torch.device
    obs: Any
    obs_shape: Any

    def _init_shared_frames(self) -> None:
        """Empty bookkeeping for the Dict observation tensors `self.obs` just allocated."""
        kw = {"device": self.device}
        # Where slot i's next observation is: a slot (< capacity) or capacity + a side
        # entry. Kept on the CPU so bookkeeping never waits on the device.
        self._next = torch.full((self.capacity,), -1, dtype=torch.long)
        self._side: dict[str, torch.Tensor] = {
            k: torch.zeros((0, *v.shape[1:]), dtype=v.dtype, **kw) for k, v in self.obs.items()
        }
        self._free: list[int] = []
        self._last: torch.Tensor | None = None  # slots written by the previous `add`
        self._pending: dict[str, np.ndarray] | None = None  # their next obs, for linking

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
