"""`algo.gamma` has one home (issue 49): the off-policy loop reads gamma and n_step from the
algorithm's config once (`Returns.of`), every batch carries `Batch.discount` (gamma**m), and
the update bootstraps with that discount, never with a copy of `algo.gamma` of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.actor_critic import SACConfig
from roborl.core.buffer import ReplayBuffer, Returns
from roborl.core.config import build_config
from roborl.core.interfaces import Batch
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner
from roborl.plugins.sac.sac import SAC

OBS, ACT = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)


def test_a_run_with_algo_gamma_x_gives_batches_with_discount_x_to_the_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[torch.Tensor] = []
    update = SAC.update

    def spy(self: SAC, batch: Batch) -> dict[str, Any]:
        seen.append(batch.require_discount(self.name).clone())
        return update(self, batch)

    monkeypatch.setattr(SAC, "update", spy)
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": {"name": "sac", "gamma": 0.8, "n_step": 2, "batch_size": 16,
                 "hidden_sizes": [16, 16]},
        "env": {"id": "Pendulum-v1"}, "seed": 0, "total_steps": 60, "learning_starts": 40,
        "eval_every": 60, "eval_episodes": 1, "checkpoint_every": 60, "log_every": 60,
        "progress": False,
    }  # fmt: skip
    Runner(cfg, tmp_path / "run", host).execute()
    assert seen, "the loop made no update"
    values = torch.cat(seen)
    f32 = 0.8 ** torch.tensor([1.0, 2.0])  # float32 gamma**m, as the sampler computes it
    assert bool(torch.isin(values, f32).all()), values.unique()
    assert bool((values == f32[1]).any())  # two-step rows: gamma**2 from the one gamma


def _sac(gamma: float) -> SAC:
    torch.manual_seed(0)
    return SAC(OBS, ACT, build_config(SACConfig, {"gamma": gamma, "hidden_sizes": [16, 16]}))


def test_the_update_bootstraps_with_the_batch_discount_not_its_own_gamma() -> None:
    """Two SACs that differ only in algo.gamma, one batch with discount 0.7: the same update.
    A second read of algo.gamma in the update would make them differ."""
    g = torch.Generator().manual_seed(1)
    batch = Batch(
        obs=torch.rand(16, 3, generator=g), actions=torch.rand(16, 2, generator=g) * 2 - 1,
        rewards=torch.rand(16, generator=g), next_obs=torch.rand(16, 3, generator=g),
        terminated=torch.zeros(16), discount=torch.full((16,), 0.7),
    )  # fmt: skip
    a, b = _sac(0.5), _sac(0.99)
    torch.manual_seed(3)
    ma = a.update(batch)
    torch.manual_seed(3)
    mb = b.update(batch)
    assert float(ma["critic_loss"]) == float(mb["critic_loss"])
    for (_, x), (_, y) in zip(a.critic.state_dict().items(), b.critic.state_dict().items()):
        assert torch.equal(x, y)


def test_a_batch_without_a_discount_is_refused_not_discounted_silently() -> None:
    batch = Batch(torch.rand(4, 3), torch.zeros(4, 2), torch.zeros(4), torch.rand(4, 3),
                  torch.zeros(4))  # fmt: skip
    with pytest.raises(ValueError, match=r"Batch\.discount"):
        _sac(0.99).update(batch)


def test_returns_reads_gamma_and_n_step_from_the_algorithm_config() -> None:
    cfg = build_config(SACConfig, {"gamma": 0.9, "n_step": 3})
    assert Returns.of(cfg) == Returns(gamma=0.9, n_step=3)
    buf = ReplayBuffer(10, (3,), (2,))
    buf.add(np.zeros((4, 3)), np.zeros((4, 2)), np.ones(4), np.zeros((4, 3)), np.zeros(4))
    one = buf.sample_nstep(5, 1, 0.9, torch.Generator().manual_seed(0))
    assert torch.equal(one.discount, torch.full((5,), 0.9))  # n_step 1: discount gamma
