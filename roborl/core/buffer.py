"""A replay buffer of preallocated tensors, written and sampled without Python per-sample loops.

Transitions from a vector env arrive as arrays with a leading env axis and are written with
one slice assignment; sampling is one `torch.randint` and one gather per field, on the
training device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from roborl.core.interfaces import Batch


class ReplayBuffer:
    """Ring buffer of (obs, action, reward, next_obs, terminated[, cost]) tensors."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        device: str | torch.device = "cpu",
        with_costs: bool = False,
        action_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_shape)
        kw = {"device": self.device}
        self.obs = torch.zeros((self.capacity, *obs_shape), dtype=torch.float32, **kw)
        self.next_obs = torch.zeros((self.capacity, *obs_shape), dtype=torch.float32, **kw)
        self.actions = torch.zeros((self.capacity, *action_shape), dtype=action_dtype, **kw)
        self.rewards = torch.zeros(self.capacity, dtype=torch.float32, **kw)
        self.terminated = torch.zeros(self.capacity, dtype=torch.float32, **kw)
        self.costs = torch.zeros(self.capacity, dtype=torch.float32, **kw) if with_costs else None
        self.pos = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        costs: np.ndarray | None = None,
    ) -> None:
        """Add a batch of transitions (leading axis = env index)."""
        n = len(rewards)
        idx = (torch.arange(n) + self.pos) % self.capacity
        idx = idx.to(self.device)

        def put(dst: torch.Tensor, src: np.ndarray) -> None:
            dst[idx] = (
                torch.as_tensor(np.asarray(src), dtype=dst.dtype)
                .to(self.device)
                .reshape((n, *dst.shape[1:]))
            )

        put(self.obs, obs)
        put(self.actions, actions)
        put(self.rewards, rewards)
        put(self.next_obs, next_obs)
        put(self.terminated, terminated)
        if self.costs is not None:
            put(self.costs, costs if costs is not None else np.zeros(n))
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator)
        idx = idx.to(self.device)
        return Batch(
            obs=self.obs[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_obs=self.next_obs[idx],
            terminated=self.terminated[idx],
            costs=None if self.costs is None else self.costs[idx],
        )

    def state_dict(self) -> dict[str, Any]:
        """Only the filled part, on CPU (the checkpoint stays small early in a run)."""
        n = self.size
        data = {
            "obs": self.obs[:n].cpu(),
            "actions": self.actions[:n].cpu(),
            "rewards": self.rewards[:n].cpu(),
            "next_obs": self.next_obs[:n].cpu(),
            "terminated": self.terminated[:n].cpu(),
            "pos": self.pos,
            "size": self.size,
            "capacity": self.capacity,
        }
        if self.costs is not None:
            data["costs"] = self.costs[:n].cpu()
        return data

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.capacity:
            raise ValueError(f"saved buffer holds {n} transitions, capacity is {self.capacity}")
        for name in ("obs", "actions", "rewards", "next_obs", "terminated"):
            getattr(self, name)[:n] = state[name].to(self.device)
        if self.costs is not None and "costs" in state:
            self.costs[:n] = state["costs"].to(self.device)
        self.size = n
        self.pos = int(state["pos"]) % self.capacity
