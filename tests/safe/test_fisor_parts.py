"""FISOR's reachability value on a hand-built MDP, and its diffusion policy on bimodal data."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from roborl.core.interfaces import Batch
from roborl.plugins.fisor.fisor import FISOR, DiffusionPolicy, FISORConfig


def _chain_mdp() -> Batch:
    """States 0..4 on a line (one-hot). a=+1 moves right, a=-1 left; 4 is a violation and
    absorbing. The data holds both actions in 0..2 but only a=+1 in state 3, so from 3 every
    in-data action leads to violation: infeasible = {3, 4}, feasible = {0, 1, 2}."""
    rows = []
    for s in range(5):
        acts = [1.0] if s >= 3 else [-1.0, 1.0]
        for a in acts:
            nxt = 4 if s == 4 else int(np.clip(s + a, 0, 4))
            rows.append((s, a, nxt, 1.0 if s == 4 else 0.0))
    eye = np.eye(5, dtype=np.float32)
    s, a, n, c = (np.array(x) for x in zip(*rows))
    return Batch(
        obs=torch.as_tensor(eye[s]),
        actions=torch.as_tensor(a, dtype=torch.float32)[:, None],
        rewards=torch.zeros(len(s)),
        next_obs=torch.as_tensor(eye[n]),
        terminated=torch.zeros(len(s)),
        costs=torch.as_tensor(c, dtype=torch.float32),
    )


def test_reachability_value_marks_exactly_the_doomed_states_infeasible() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = FISORConfig(
        gamma=0.9,
        tau=0.05,
        hidden_sizes=[64, 64],
        actor_width=32,
        actor_blocks=1,
        critic_lr=1e-3,
        # h = +1/-1: with the official +25 a 50/50 safe/unsafe state needs tau_h > 0.95 for
        # the expectile to reach its min (V(2) = +1.1 at tau_h = 0.9), see the FISOR docstring
        cost_scale=1.0,
    )
    algo = FISOR(
        gym.spaces.Box(0, 1, (5,), np.float32), gym.spaces.Box(-1, 1, (1,), np.float32), cfg
    )
    batch = _chain_mdp()
    for _ in range(500):
        algo.update(batch)
    with torch.no_grad():
        vh = algo.vh_values(torch.eye(5)).numpy()
    # exact fixed points: V_h = -1 (0, 1), about -0.8 (2), 0.8 (3), 1 (4)
    assert (vh[:3] < -0.3).all(), vh
    assert (vh[3:] > 0.3).all(), vh


def test_diffusion_policy_reproduces_a_bimodal_action_distribution() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    n = 2048
    modes = torch.where(torch.rand(n, generator=g) < 0.5, -0.7, 0.7)
    actions = (modes + 0.05 * torch.randn(n, generator=g))[:, None].clamp(-1, 1)
    obs = torch.zeros(n, 1)
    pol = DiffusionPolicy(1, 1, width=64, blocks=2, T=5, dropout=0.0)
    opt = torch.optim.Adam(pol.parameters(), lr=1e-3)
    for _ in range(1000):
        idx = torch.randint(0, n, (256,), generator=g)
        loss = pol.loss(obs[idx], actions[idx], torch.ones(256))
        opt.zero_grad()
        loss.backward()
        opt.step()
    a = pol.sample(torch.zeros(4000, 1), generator=torch.Generator().manual_seed(2))[:, 0]

    def mass(c: float, x: torch.Tensor = a) -> float:
        return float(((x - c).abs() < 0.1).float().mean())

    center, left, right = mass(0.0), mass(-0.7), mass(0.7)
    # the best Gaussian fit (mean 0, std ~0.7) is densest at 0: more mass there than at +-0.7
    std = float(actions.std())
    gauss = torch.randn(200_000, generator=torch.Generator().manual_seed(3)) * std
    assert mass(0.0, gauss) > 1.3 * mass(0.7, gauss)
    # the diffusion policy puts its mass at the two modes and little in between
    assert left > 0.1 and right > 0.1, (left, right)
    assert center < 0.5 * min(left, right), (center, left, right)
