"""DSAC-T: the loss on a hand-computed case, and reward-scale robustness on MuJoCo."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.checkpoint import load_checkpoint
from roborl.core.hookspecs import hookimpl
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner
from roborl.plugins.sac.dsac_t import DSACT, DSACTConfig, dsac_t_critic_loss, dsac_t_targets


def test_targets_bound_and_weight_match_hand_computation() -> None:
    mean = torch.tensor([[1.0, 2.0], [1.5, 0.5]])
    std = torch.tensor([[0.5, 1.0], [2.0, 0.2]], requires_grad=True)
    mean.requires_grad_(True)
    sigma_bar = torch.tensor([1.0, 0.5])
    out = dsac_t_targets(
        rewards=torch.tensor([1.0, -1.0]),
        terminated=torch.tensor([0.0, 1.0]),
        discount=0.9,
        next_mean=torch.tensor([[3.0, 0.0], [2.0, 1.0]]),
        next_std=torch.tensor([[1.0, 1.0], [0.5, 2.0]]),
        next_logp=torch.tensor([-1.0, 2.0]),
        alpha=0.5,
        mean=mean.detach(),
        sigma_bar=sigma_bar,
        noise=torch.tensor([[4.0, -1.0], [1.0, 0.5]]),
    )
    # Sample 0: critic 1 has the smaller next mean (2.0 < 3.0); its sample 2.0 + 1.0*0.5.
    # Expected target 1 + 0.9 (2.0 + 0.5) = 3.25, sampled 1 + 0.9 (2.5 + 0.5) = 3.7.
    # Sample 1 is terminal: both targets are the reward, -1.
    torch.testing.assert_close(out["target"], torch.tensor([3.25, -1.0]))
    torch.testing.assert_close(out["target_sample"], torch.tensor([3.7, -1.0]))
    # Bound mean +- 3 sigma_bar: critic 0 (+-3) keeps 3.7; critic 1 (+-1.5) clips to 1.5+1.5.
    torch.testing.assert_close(out["target_bound"], torch.tensor([[3.7, -1.0], [3.0, -1.0]]))

    loss, ratio = dsac_t_critic_loss(mean, std, sigma_bar, out["target"], out["target_bound"])
    # clip(sigma_bar^2 / (std^2 + 0.1), 0.1, 10): 1/0.35, 1/1.1, 0.25/4.1 -> 0.1, 0.25/0.14.
    torch.testing.assert_close(
        ratio, torch.tensor([[1 / 0.35, 1 / 1.1], [0.1, 0.25 / 0.14]]), rtol=1e-5, atol=1e-6
    )
    # Per sample: ratio * (0.5 (m - y)^2 + s (s^2 - 0.5 (m - y_b)^2) / (s + 0.1)), worked by hand.
    terms = [
        (1 / 0.35) * (2.53125 + 0.5 * (0.25 - 3.645) / 0.6),
        (1 / 1.1) * (4.5 + 1.0 * (1.0 - 4.5) / 1.1),
        0.1 * (1.53125 + 2.0 * (4.0 - 1.125) / 2.1),
        (0.25 / 0.14) * (1.125 + 0.2 * (0.04 - 1.125) / 0.3),
    ]
    expected = (terms[0] + terms[1]) / 2 + (terms[2] + terms[3]) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    loss.backward()
    # Expected value substitution: the mean's gradient is ratio * (m - y) / B, not (m - y_sample).
    torch.testing.assert_close(mean.grad[0, 0], torch.tensor((1 / 0.35) * (1.0 - 3.25) / 2))


class ScaledPendulum:
    """InvertedPendulum with rewards multiplied by a constant (the paper's robustness claim)."""

    @hookimpl
    def roborl_envs(self):
        def make(scale: float = 1.0) -> gym.Env:
            env = gym.make("InvertedPendulum-v5")
            return gym.wrappers.TransformReward(env, lambda r: scale * r)

        return {"ScaledPendulum-v0": make}


def _train(scale: float, tmp_path) -> tuple[float, float]:
    """Unscaled final eval return and the critics' final sigma_bar (mean of the two)."""
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(ScaledPendulum(), "scaled_pendulum")
    cfg = {
        "algo": {"name": "dsac_t", "hidden_sizes": [64, 64, 64], "batch_size": 128,
                 "actor_lr": 3e-4, "critic_lr": 3e-4, "init_alpha": 1.0},
        "env": {"id": "ScaledPendulum-v0", "kwargs": {"scale": scale}},
        "seed": 1, "total_steps": 2000, "learning_starts": 300, "eval_every": 2000,
        "eval_episodes": 5, "checkpoint_every": 2000, "log_every": 1000, "progress": False,
        "torch_threads": 1,
    }  # fmt: skip
    run_dir = tmp_path / f"scale{scale}"
    summary = Runner(cfg, run_dir, host).execute()
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")["state"]
    return summary["final_eval_return"] / scale, float(state["sigma_bar"].mean())


def test_reward_scale_hundred_leaves_learning_intact(tmp_path) -> None:
    """Reward x100: learning survives and the critics' std follows the scale.

    Measured at this budget (seed 1, alpha from 1 rather than the official e, so 2000 steps
    suffice; updates from env step 301): x1 returns 98.8, x100 48.6 with sigma_bar 0.5 vs
    ~19. At 2000 steps x100 is still catching up, and the gap moves with any change to the
    random stream (this docstring's earlier figures, updates from step 300: 92.4 vs 57.6; with
    299 random steps: 84.6 vs 38.2), so the bounds are: both far above random play (under
    10), x100 above 0.4 times x1. The old clamped log-std cap (54.6) does not bind yet at x100
    in 2000 steps; the std test below is the one that fails with it.
    Negative control at this budget (x1, seed 1): gamma=0 returns 13.6 (against 98.8), under
    both bounds, as is doing nothing (zero action, 26).
    """
    plain, sigma_plain = _train(1.0, tmp_path)
    scaled, sigma_scaled = _train(100.0, tmp_path)
    print(
        f"DSAC-T unscaled eval return: reward x1 {plain:.1f}, reward x100 {scaled:.1f}; "
        f"sigma_bar x1 {sigma_plain:.2f}, x100 {sigma_scaled:.1f}"
    )
    # Random play averages under 10 on this task (best random episodes about 10-20); both runs
    # must learn well past it within 2000 steps, and the x100 run must not collapse relative
    # to the x1 run.
    assert plain > 40 and scaled > 30
    assert scaled > 0.4 * plain
    assert sigma_scaled > 20 * sigma_plain  # the return spread grew with the reward scale


def test_critic_std_is_an_unbounded_softplus_with_gradient() -> None:
    """Official `ActionValueDistri`: std = softplus(raw); no cap, and a gradient at any size.
    The old exp(clamp(raw, -5, 4)) gave 54.6 here, with zero gradient."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    algo = DSACT(space, space, DSACTConfig(hidden_sizes=[8]))
    with torch.no_grad():
        algo.critic.head.weight[..., 1].zero_()
        algo.critic.head.bias[..., 1] = 100.0  # raw std output of both critics
    obs, act = torch.zeros(3, 2), torch.zeros(3, 2)
    _, std = algo.distribution(obs, act)
    torch.testing.assert_close(std, torch.full((2, 3), 100.0))
    std.sum().backward()
    assert (algo.critic.head.bias.grad[..., 1] > 0.9).all()


def test_defaults_match_the_official_code() -> None:
    cfg = DSACTConfig()
    assert (cfg.actor_lr, cfg.critic_lr, cfg.alpha_lr) == (1e-4, 1e-4, 3e-4)
    assert cfg.hidden_sizes == [256, 256, 256] and cfg.activation == "gelu"
    assert cfg.init_alpha == pytest.approx(np.e)  # official log_alpha starts at 1
    assert (cfg.delay_update, cfg.tau, cfg.tau_b, cfg.batch_size) == (2, 0.005, 0.005, 256)
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    algo = DSACT(space, space, DSACTConfig(hidden_sizes=[8]))
    assert (algo.actor.log_std_min, algo.actor.log_std_max) == (-20.0, 0.5)
