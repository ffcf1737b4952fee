"""A seeded batch of random transitions, for unit tests of an algorithm's update step."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from roborl.core.interfaces import Batch


def random_batch(
    seed: int,
    size: int,
    obs_dim: int,
    act_dim: int,
    *,
    discount: float | None = None,
    costs: bool = False,
    extras: Sequence[str] = (),
) -> Batch:
    """`size` transitions: normal observations and rewards, uniform actions in [-1, 1], 30%
    terminal; `costs` adds uniform costs, `extras` a normal column per name, `discount` a
    constant per-row discount. The draws come in that order from one generator, so a batch
    is the same whatever a test asks for after it."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(size, obs_dim, generator=gen)
    actions = torch.rand(size, act_dim, generator=gen) * 2 - 1
    rewards = torch.randn(size, generator=gen)
    next_obs = torch.randn(size, obs_dim, generator=gen)
    terminated = (torch.rand(size, generator=gen) < 0.3).float()
    row_costs = torch.rand(size, generator=gen) if costs else None
    columns = {name: torch.randn(size, generator=gen) for name in extras}
    return Batch(
        obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated,
        costs=row_costs, discount=None if discount is None else torch.full((size,), discount),
        extras=columns,
    )  # fmt: skip
