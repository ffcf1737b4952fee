"""Behaviour-cloning baselines of the FISOR comparison (DSRL, Liu et al. 2023): BC-all (every
transition) and BC-safe (only trajectories whose episode cost is within the cost limit).

Both are deterministic MLP policies trained by MSE to the dataset actions (DSRL's BC). The
trajectory filter for BC-safe is `safe_subset`; the algorithm is the same class with
``safe_only: true`` so the runner can build it from a config alone: its `prepare(dataset)`
(called by the offline loop before the first update) hands the loop the safe subset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.actor_critic import require_box
from roborl.core.actor_graph import ActorGraph, flat_actor_graph
from roborl.core.config import rng
from roborl.core.errors import DatasetError
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, mlp, obs_tensor
from roborl.core.policies import AlgorithmPolicy
from roborl.core.spaces import flat_dim


def safe_subset(dataset: Any, cost_limit: float) -> Any:
    """The dataset restricted to episodes whose summed cost is <= `cost_limit`."""
    ep_costs = dataset.episode_costs()
    if ep_costs is None:
        raise DatasetError("BC-safe (safe_only=true) needs a dataset with a 'costs' field")
    keep = np.zeros(len(dataset), dtype=bool)
    for sl, c in zip(dataset.episodes(), ep_costs):
        if c <= cost_limit:
            keep[sl] = True
    if not keep.any():
        raise DatasetError(
            f"no episode of the dataset has summed cost <= {cost_limit}, so BC-safe has no "
            "data; raise algo.cost_limit or use a dataset with safe episodes."
        )
    arrays = {k: v[keep] for k, v in dataset.arrays().items() if len(v) == len(dataset)}
    return dataset.replace(**arrays)


@dataclass
class BCConfig:
    lr: float = field(default=1e-3, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(
        default_factory=lambda: [256, 256], metadata=rng(1, None, "hidden widths")
    )
    safe_only: bool = False
    cost_limit: float = field(default=0.0, metadata=rng(0.0, None, "episode cost for BC-safe"))


class BC(Algorithm):
    """Deterministic behaviour cloning (tanh MLP, MSE to the dataset action)."""

    name = "bc"
    Config = BCConfig
    loop = "offline"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BCConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        require_box(action_space, self.name)  # the tanh output is rescaled to finite bounds
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        self.scaler = ActionScaler(action_space, self.device)
        self.net = mlp(obs_dim, list(config.hidden_sizes), act_dim, "relu").to(self.device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.lr)

    def prepare(self, dataset: Any) -> Any:
        """BC-safe trains on `safe_subset` (returned to the loop); BC-all on everything."""
        return safe_subset(dataset, self.config.cost_limit) if self.config.safe_only else None

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        return self.scaler.to_env(torch.tanh(self.net(x)).cpu().numpy())

    def update(self, batch: Batch) -> dict[str, float]:
        target = self.scaler.to_unit(batch.actions).clamp(-1.0, 1.0)
        loss = (torch.tanh(self.net(batch.obs.flatten(1))) - target).pow(2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"bc_loss": float(loss.detach())}

    def policy(self) -> Policy:
        return AlgorithmPolicy(self)

    def actor_graph(self) -> ActorGraph:
        """`policy()` as tensor ops for ONNX export: tanh(MLP), scaled to the bounds."""
        unit = torch.nn.Sequential(self.net, torch.nn.Tanh())
        return flat_actor_graph(unit, self.observation_space, self.action_space)

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
