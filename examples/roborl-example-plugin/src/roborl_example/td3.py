"""TD3 (Fujimoto et al., "Addressing Function Approximation Error in Actor-Critic Methods",
ICML 2018): clipped double-Q targets, target policy smoothing (noise 0.2 clipped at 0.5),
delayed actor and target updates (every 2 critic steps), exploration noise 0.1, tau 0.005,
Adam 3e-4, 256x256 networks. Written only against roborl's public interfaces."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from roborl.core.config import OffPolicyConfig, rng
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, mlp, obs_tensor, polyak_update
from roborl.core.policies import BatchedPolicy


@dataclass
class TD3Config(OffPolicyConfig):
    """TD3's settings; gamma, batch_size, buffer_size and n_step come from `OffPolicyConfig`,
    which is what roborl's off-policy loop reads."""

    tau: float = field(default=0.005, metadata=rng(0.0, 1.0))
    lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    policy_noise: float = field(default=0.2, metadata=rng(0.0, None))
    noise_clip: float = field(default=0.5, metadata=rng(0.0, None))
    exploration_noise: float = field(default=0.1, metadata=rng(0.0, None))
    policy_delay: int = field(default=2, metadata=rng(1, None))


class DeterministicPolicy(BatchedPolicy):
    """tanh(actor(obs)) rescaled to the action bounds; BatchedPolicy handles one-vs-batch."""

    def __init__(
        self, actor: nn.Module, obs_space: gym.Space, action_space: gym.spaces.Box
    ) -> None:
        super().__init__(obs_space, action_space)
        self.actor = actor
        self.scaler = ActionScaler(action_space)

    @torch.no_grad()
    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        a = torch.tanh(self.actor(obs_tensor(obs, torch.device("cpu"))))
        return self.scaler.to_env(a.numpy())


class TD3(Algorithm):
    name = "example_td3"
    Config = TD3Config
    loop = "offpolicy"

    def __init__(self, observation_space, action_space, config: TD3Config, device="cpu") -> None:
        super().__init__(observation_space, action_space, config, device)
        obs_dim = int(np.prod(observation_space.shape))
        self.act_dim = int(np.prod(action_space.shape))
        self.scaler = ActionScaler(action_space, self.device)
        self.actor = mlp(obs_dim, config.hidden_sizes, self.act_dim).to(self.device)
        self.critic = EnsembleMLP(2, obs_dim + self.act_dim, config.hidden_sizes, 1).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr)
        self.updates = 0

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        a = torch.tanh(self.actor(obs_tensor(obs, self.device)))
        if not deterministic:
            a = (a + self.config.exploration_noise * torch.randn_like(a)).clamp(-1, 1)
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return DeterministicPolicy(self.actor, self.observation_space, self.action_space)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        actions = self.scaler.to_unit(batch.actions)
        with torch.no_grad():
            noise = (torch.randn_like(actions) * cfg.policy_noise).clamp(
                -cfg.noise_clip, cfg.noise_clip
            )
            next_a = (torch.tanh(self.actor_target(batch.next_obs)) + noise).clamp(-1, 1)
            q_next = (
                self.critic_target(torch.cat([batch.next_obs, next_a], -1))
                .squeeze(-1)
                .min(0)
                .values
            )
            target = batch.rewards + cfg.gamma * (1 - batch.terminated) * q_next
        q = self.critic(torch.cat([batch.obs, actions], -1)).squeeze(-1)
        critic_loss = (q - target).pow(2).mean(-1).sum()
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        self.updates += 1
        metrics = {"critic_loss": critic_loss.detach()}
        if self.updates % cfg.policy_delay == 0:
            pi = torch.tanh(self.actor(batch.obs))
            actor_loss = -self.critic(torch.cat([batch.obs, pi], -1), detach=True)[0].mean()
            self.actor_opt.zero_grad()
            actor_loss.backward()
            self.actor_opt.step()
            polyak_update(self.actor_target.parameters(), self.actor.parameters(), cfg.tau)
            polyak_update(self.critic_target.parameters(), self.critic.parameters(), cfg.tau)
            metrics["actor_loss"] = actor_loss.detach()
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("actor", "critic", "actor_target", "critic_target", "actor_opt", "critic_opt"):
            getattr(self, key).load_state_dict(state[key])
        self.updates = int(state["updates"])
