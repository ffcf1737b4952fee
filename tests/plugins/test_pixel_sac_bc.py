"""`algo.bc_weight`: Nair et al. (2018)'s behaviour cloning with the Q-filter, on the demo and
intervention rows of RLPD/SERL's actor step.

The term is ||mu(s) - a_demo||^2 (mu: the policy's mean action, in [-1, 1]) on demo rows where
the critics rate the demo action above the policy's, averaged over the demo rows; online rows
never count. Checked against that formula by hand, then in training: the policy's actions on
the demo states approach the demo's with the term and not without it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.algorithms import resolve_algorithm
from roborl.core.compose import compose_dict
from roborl.core.interfaces import Batch
from roborl.core.plugins import get_host
from roborl.plugins.pixel_sac.drq import DrQ

OBS, ACT, B = 5, 3, 32


def make(**kw: object) -> DrQ:
    algo_cfg = compose_dict(get_host(), ["algo=serl"], "train")["algo"]
    small = {"hidden_sizes": [32, 32], "batch_size": B, "num_critics": 2, "critic_steps": 1}
    cls, config = resolve_algorithm(get_host(), {**algo_cfg, **small, **kw})
    torch.manual_seed(0)
    space = gym.spaces.Dict({"state": gym.spaces.Box(-1.0, 1.0, (OBS,), np.float32)})
    return cls(space, gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32), config)


def test_bc_loss_is_the_demo_rows_mean_squared_distance_without_the_filter() -> None:
    algo = make(bc_weight=1.0, bc_q_filter=False)
    gen = torch.Generator().manual_seed(1)
    feat = torch.randn(B, OBS, generator=gen)
    actions = torch.rand(B, ACT, generator=gen) * 2 - 1
    is_demo = torch.arange(B) % 3 == 0  # scattered demo rows
    loss, kept = algo.bc_loss(feat, actions, is_demo)
    with torch.no_grad():
        mu = torch.tanh(algo.actor(feat)[0])
    expected = (mu - actions).pow(2).sum(-1)[is_demo].mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert kept.item() == 1.0
    # online rows never count: changing their actions leaves the loss alone
    moved = torch.where(is_demo[:, None], actions, -actions)
    assert algo.bc_loss(feat, moved, is_demo)[0].item() == pytest.approx(loss.item(), rel=1e-6)


def test_q_filter_keeps_only_demo_actions_the_critics_prefer() -> None:
    algo = make(bc_weight=1.0, bc_q_filter=True)
    gen = torch.Generator().manual_seed(2)
    feat = torch.randn(B, OBS, generator=gen)
    actions = torch.rand(B, ACT, generator=gen) * 2 - 1
    is_demo = torch.ones(B, dtype=torch.bool)
    with torch.no_grad():
        mu = torch.tanh(algo.actor(feat)[0])
        q_demo = algo.critic(torch.cat([feat, actions], -1)).squeeze(-1).mean(0)
        q_pi = algo.critic(torch.cat([feat, mu], -1)).squeeze(-1).mean(0)
    better = q_demo > q_pi
    assert 0 < int(better.sum()) < B  # the filter has something to decide
    loss, kept = algo.bc_loss(feat, actions, is_demo)
    expected = ((mu - actions).pow(2).sum(-1) * better).sum() / B
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert kept.item() == pytest.approx(float(better.float().mean()))


def _demo_batch(gen: torch.Generator) -> tuple[Batch, torch.Tensor]:
    """Half demo rows whose action is a fixed function of the state, half random online rows;
    rewards are zero everywhere, so Q gives the actor no reason to prefer the demo action."""
    obs = torch.rand(B, OBS, generator=gen) * 2 - 1
    demo_action = torch.tanh(obs[:, :ACT] * 2)
    online = torch.rand(B, ACT, generator=gen) * 2 - 1
    is_demo = torch.arange(B) >= B // 2
    actions = torch.where(is_demo[:, None], demo_action, online)
    batch = Batch(
        obs={"state": obs},
        actions=actions,
        rewards=torch.zeros(B),
        next_obs={"state": torch.rand(B, OBS, generator=gen) * 2 - 1},
        terminated=torch.zeros(B),
        discount=torch.full((B,), 0.96),
        extras={"is_demo": is_demo},
        demo_rows=B // 2,
    )
    return batch, is_demo


def _distance_after_updates(bc_weight: float, updates: int = 150) -> tuple[float, float]:
    algo = make(bc_weight=bc_weight, bc_q_filter=False, actor_lr=1e-3)
    batch, is_demo = _demo_batch(torch.Generator().manual_seed(3))

    def distance() -> float:
        with torch.no_grad():
            mu = torch.tanh(algo.actor(batch.obs["state"][is_demo])[0])
        return float((mu - batch.actions[is_demo]).pow(2).sum(-1).mean())

    before = distance()
    for _ in range(updates):
        algo.update(batch)
    return before, distance()


def test_the_bc_term_pulls_the_policy_to_the_demo_actions() -> None:
    before, with_bc = _distance_after_updates(bc_weight=5.0)
    _, without = _distance_after_updates(bc_weight=0.0)
    assert with_bc < 0.3 * before, (before, with_bc)
    assert with_bc < 0.5 * without, (with_bc, without)
