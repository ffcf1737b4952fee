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
        # Envs per `add` call: the same env's next transition sits `stride` slots later.
        self.stride = 1

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
        self.stride = n
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

    def sample_nstep(
        self,
        batch_size: int,
        n_step: int,
        gamma: float,
        generator: torch.Generator | None = None,
    ) -> Batch:
        """Sample n-step transitions: sum_k gamma^k r_{t+k}, s_{t+m}, d_{t+m-1}, gamma^m.

        m <= n_step stops early at a terminal, at an episode boundary (a time-limit reset, found
        where next_obs of one step differs from obs of the same env's next step) and at the
        newest data. All n steps are gathered as one [B, n] index tensor, no Python loop over
        samples. `Batch.discount` carries gamma^m, which SAC and DSAC-T use in their targets.
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
        cont = (1.0 - term[:, :-1]) * (
            (self.next_obs[idx_d[:, :-1]] == self.obs[idx_d[:, 1:]]).flatten(2).all(-1).float()
        )
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
        return Batch(
            obs=self.obs[first],
            actions=self.actions[first],
            rewards=rewards,
            next_obs=self.next_obs[last],
            terminated=self.terminated[last],
            costs=costs,
            discount=gamma ** m.to(torch.float32),
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
            "stride": self.stride,
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
        self.stride = int(state.get("stride", 1))
