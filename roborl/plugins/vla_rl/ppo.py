"""PPO pieces used by VLA-RL: GAE per env step and the clipped losses.

Schulman et al., "Proximal Policy Optimization Algorithms" (2017), eq. 7 (clipped surrogate);
"High-Dimensional Continuous Control Using GAE" (2016), eq. 16. Value clipping as in the
PPO reference implementation (OpenAI baselines ppo2). VLA-RL (Lu et al., 2025) uses
gamma 0.99, lambda 0.95, clip 0.2, no KL penalty, no advantage normalisation.
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for (T, N) rollouts; `dones[t]` = the episode ended at step t.

    Time-limit truncations are handled by the caller, which adds gamma * V(final state) to
    that step's reward before calling (as SB3 does), so `dones` can mark every episode end.
    """
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(last_values)
    for t in reversed(range(T)):
        next_value = last_values if t == T - 1 else values[t + 1]
        cont = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * cont - values[t]
        last = delta + gamma * lam * cont * last
        adv[t] = last
    return adv, adv + values


def clipped_policy_loss(
    new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """-E[min(r A, clip(r, 1-eps, 1+eps) A)] and the fraction of clipped ratios."""
    ratio = torch.exp(new_logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    frac = ((ratio - 1.0).abs() > clip).float().mean()
    return loss, frac


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """0.5 E[max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)]."""
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2).mean()
