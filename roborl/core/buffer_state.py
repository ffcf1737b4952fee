"""Replay buffer checkpoints: the filled part out, and back in (also into another capacity).

Why apart: what a checkpoint holds (plain tensors that load with `weights_only=True`) and how a
resumed run with another buffer size unrolls the saved ring are one job, separate from writing
and sampling transitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from roborl.core.errors import CheckpointError


class BufferState:
    """`ReplayBuffer.state_dict` / `load_state_dict`."""

    capacity: int
    device: torch.device
    dict_obs: bool
    size: int
    pos: int
    stride: int

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
