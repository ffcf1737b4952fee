"""Pixel SAC (algo=drq / rlpd): augmentation, encoder gradients, learning on fixed batches."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from roborl.core.algorithms import resolve_algorithm
from roborl.core.compose import compose_dict
from roborl.core.config import build_config
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.core.plugins import get_host
from roborl.plugins.pixel_sac.drq import RLPD, DrQ, DrQConfig, RLPDConfig
from roborl.plugins.pixel_sac.encoder import RandomShift, image_channels_first

H = 16
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def space(stack: int = 0) -> gym.spaces.Dict:
    shape = (stack, H, H, 3) if stack else (H, H, 3)
    return gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, shape, np.uint8),
            "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        }
    )


def make(cls=DrQ, stack: int = 0, **cfg) -> DrQ:
    torch.manual_seed(0)
    config_cls = RLPDConfig if cls is RLPD else DrQConfig
    config = build_config(config_cls, {"hidden_sizes": [32, 32], "batch_size": 16, **cfg})
    return cls(space(stack), ACT, config)


def batch(n: int = 16, stack: int = 0, seed: int = 0, gamma: float = 0.99, **extras) -> Batch:
    g = torch.Generator().manual_seed(seed)
    shape = (n, stack, H, H, 3) if stack else (n, H, H, 3)

    def obs() -> dict[str, torch.Tensor]:
        return {
            "image": torch.randint(0, 256, shape, generator=g, dtype=torch.uint8),
            "state": torch.rand(n, 3, generator=g) * 2 - 1,
        }

    return Batch(
        obs=obs(),
        actions=torch.rand(n, 2, generator=g) * 2 - 1,
        rewards=torch.rand(n, generator=g),
        next_obs=obs(),
        terminated=torch.zeros(n),
        discount=torch.full((n,), gamma),  # the loop's sampler sets it from algo.gamma
        extras=dict(extras),
    )


def offsets(src: torch.Tensor, out: torch.Tensor, pad: int) -> list[tuple[int, int]]:
    """The (dy, dx) crop of the replicate-padded `src` (C, H, W) equal to `out`; fails if none."""
    padded = F.pad(src[None], (pad,) * 4, mode="replicate")[0]
    h, w = src.shape[-2:]
    found = [
        (dy, dx)
        for dy in range(2 * pad + 1)
        for dx in range(2 * pad + 1)
        if torch.allclose(padded[:, dy : dy + h, dx : dx + w], out, atol=1e-2)
    ]
    assert found, "the output is not a shifted crop of the padded input"
    return found


def test_random_shift_crops_the_replicate_padded_image_at_random_offsets() -> None:
    torch.manual_seed(1)
    x = torch.randint(0, 256, (12, 3, H, H)).float()
    y = RandomShift(4)(x)
    assert y.shape == x.shape
    shifts = {offsets(x[i], y[i], 4)[0] for i in range(len(x))}
    assert len(shifts) > 3, "every sample must draw its own offset (DrQ: per-sample shift)"
    assert any(s != (4, 4) for s in shifts), "the images were not shifted"
    assert not torch.equal(x, y)


def test_stacked_frames_of_one_observation_shift_together() -> None:
    torch.manual_seed(2)
    frames = torch.randint(0, 256, (8, 3, H, H, 3), dtype=torch.uint8)  # (B, k, H, W, C)
    x = image_channels_first(frames)
    assert x.shape == (8, 9, H, H)
    y = RandomShift(4)(x)
    for i in range(8):
        per_frame = [
            set(offsets(x[i, 3 * f : 3 * f + 3], y[i, 3 * f : 3 * f + 3], 4)) for f in range(3)
        ]
        assert per_frame[0] & per_frame[1] & per_frame[2], "frames of one stack shifted apart"


@pytest.mark.parametrize("mode", ["independent", "same"])
def test_obs_and_next_obs_shift_independently_as_drq_or_together_when_asked(mode: str) -> None:
    algo = make(shift_next_obs=mode)
    b = batch(32)
    torch.manual_seed(3)
    a, n = algo.augment(b.obs, b.obs)  # the same frames as obs and as next obs
    equal = [torch.equal(a["image"][i], n["image"][i]) for i in range(32)]
    if mode == "same":
        assert all(equal)
    else:  # DrQ Algorithm 1 / DrQ-v2 / SERL: two independent draws
        assert sum(equal) < 16


def test_actor_loss_gradient_does_not_reach_the_encoder_but_the_critic_loss_does() -> None:
    algo = make()
    b = batch()
    obs, nxt = b.obs, b.next_obs
    images, next_images = algo.augment(obs, nxt)
    ndd = torch.full((16,), 0.99)
    loss, feat, _ = algo.critic_loss(images, obs, b.actions, b.rewards, next_images, nxt, ndd)
    actor_loss, _ = algo.actor_loss(feat)
    actor_loss.backward(retain_graph=True)
    enc = list(algo.encoder.parameters())
    assert all(p.grad is None for p in enc), "the actor loss reached the encoder"
    assert all(p.grad is None for p in algo.critic.parameters()), "the actor loss moved Q"
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in algo.actor.parameters())
    loss.backward()
    assert all(p.grad is not None for p in enc)
    assert sum(float(p.grad.abs().sum()) for p in enc) > 0


def test_update_moves_the_encoder_only_through_the_critic_step() -> None:
    algo = make()
    before = [p.detach().clone() for p in algo.encoder.parameters()]
    algo.critic_opt.param_groups[0]["lr"] = 0.0  # freeze the critic step
    algo.update(batch())
    after = list(algo.encoder.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_critic_loss_goes_down_on_a_fixed_batch() -> None:
    algo = make(gamma=0.5)
    b = batch(seed=4, gamma=0.5)

    def td() -> float:
        with torch.no_grad():
            img, nimg = algo.encoder.images(b.obs), algo.encoder.images(b.next_obs)
            ndd = torch.full((16,), 0.5)
            return float(
                algo.critic_loss(img, b.obs, b.actions, b.rewards, nimg, b.next_obs, ndd)[0]
            )

    first = td()
    for _ in range(60):
        algo.update(b)
    assert td() < 0.3 * first


def test_rlpd_splits_demo_and_online_rows_evenly_over_its_critic_steps() -> None:
    algo = make(RLPD, batch_size=16)
    assert algo.config.num_critics == 10 and algo.config.critic_steps == 4
    is_demo = torch.zeros(16, dtype=torch.bool)
    is_demo[:8] = True  # the loop puts demo rows first or anywhere: only the mask counts
    parts = algo._minibatches(batch(is_demo=is_demo))
    assert len(parts) == 4
    assert sorted(torch.cat(parts).tolist()) == list(range(16))
    assert all(int(is_demo[p].sum()) == 2 and len(p) == 4 for p in parts)
    metrics = algo.update(batch(is_demo=is_demo))
    assert float(metrics["demo_fraction"]) == 0.5
    assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values())


def test_rlpd_target_uses_a_random_subset_of_the_ensemble() -> None:
    """Target critics that output the constants 0, 10, ..., 90 and online critics that output
    0, with r = 0, gamma (1 - d) = 1 and no entropy term: the TD loss is v_next^2, so each
    call reveals v_next = min over the subset. A subset of 2 distinct members gives a minimum
    in {0, ..., 80} that varies from call to call; the whole ensemble would always give 0."""
    algo = make(RLPD, critic_subsample=2)  # SERL's subset (RLPD's pixel default is 1)
    assert (algo.config.num_critics, algo.config.backup_entropy) == (10, False)
    torch.manual_seed(5)
    with torch.no_grad():
        algo.critic_target.head.weight.zero_()
        algo.critic_target.head.bias.copy_(torch.arange(10.0).view(10, 1, 1) * 10)
        algo.critic.head.weight.zero_()
        algo.critic.head.bias.zero_()
    b = batch()
    img, nimg = algo.augment(b.obs, b.next_obs)
    zeros, ones = torch.zeros(16), torch.ones(16)
    with torch.no_grad():
        mins = [
            float(algo.critic_loss(img, b.obs, b.actions, zeros, nimg, b.next_obs, ones)[0]) ** 0.5
            for _ in range(30)
        ]
    assert all(min(abs(m - k) for k in range(0, 90, 10)) < 1e-3 for m in mins), mins
    assert len({round(m) for m in mins}) >= 4, "the subset must be drawn anew at every step"


def test_frame_stacked_observations_train_and_act() -> None:
    algo = make(stack=3)
    algo.update(batch(stack=3))
    obs = {"image": np.zeros((3, H, H, 3), np.uint8), "state": np.zeros(3, np.float32)}
    assert algo.policy().act(obs).shape == (2,)


def test_checkpoint_round_trip_acts_the_same_on_dict_observations() -> None:
    algo = make(RLPD)
    algo.update(batch())
    buf = io.BytesIO()
    torch.save(algo.state_dict(), buf)
    buf.seek(0)
    other = make(RLPD)
    other.load_state_dict(torch.load(buf, weights_only=True))
    obs = space().sample()
    np.testing.assert_array_equal(algo.policy().act(obs), other.policy().act(obs))
    many = {k: np.stack([v] * 4) for k, v in obs.items()}
    assert other.policy().act(many).shape == (4, 2)


def test_a_flat_state_vector_is_the_state_only_dict_that_her_gives_the_gate() -> None:
    """Under her= the gate's policy sees one flat vector (state and goal): the algorithm built
    on it updates and acts exactly as on the state-only Dict {state: vector}. Other spaces
    that are not a Dict (an image without one) are refused."""
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    cheap = {"hidden_sizes": [32, 32], "batch_size": 16, "num_critics": 2,
             "critic_subsample": None, "critic_steps": 2}  # fmt: skip

    def build(space: gym.Space) -> RLPD:
        torch.manual_seed(0)
        return RLPD(space, ACT, build_config(RLPDConfig, cheap))

    flat, nested = build(box), build(gym.spaces.Dict({"state": box}))
    g = torch.Generator().manual_seed(0)
    obs, next_obs = torch.rand(16, 3, generator=g), torch.rand(16, 3, generator=g)
    rest = dict(
        actions=torch.rand(16, 2, generator=g), rewards=torch.rand(16, generator=g),
        terminated=torch.zeros(16), discount=torch.full((16,), 0.99),
    )  # fmt: skip
    for _ in range(3):
        torch.manual_seed(1)
        a = flat.update(Batch(obs=obs, next_obs=next_obs, **rest))
        torch.manual_seed(1)
        b = nested.update(Batch(obs={"state": obs}, next_obs={"state": next_obs}, **rest))
        assert float(a["critic_loss"]) == float(b["critic_loss"])
    x = np.full(3, 0.3, np.float32)
    np.testing.assert_array_equal(flat.policy().act(x), nested.policy().act({"state": x}))
    with pytest.raises(ConfigError, match=r"algo=drq learns from camera images.*flat state"):
        DrQ(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), ACT, DrQConfig())


def test_an_image_too_small_for_the_conv_stack_names_the_camera_and_the_remedy() -> None:
    with pytest.raises(ConfigError, match=r"camera 'image' is 16x16 px.*conv_strided"):
        make(conv_strided=2)  # 16 -> 7 -> 3 -> 1: below a 3x3 kernel


def test_subset_larger_than_the_ensemble_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"critic_subsample=3 exceeds algo\.num_critics=2"):
        build_config(DrQConfig, {"critic_subsample": 3})


def test_rlpd_defaults_are_its_official_pixel_config() -> None:
    """rlpd_pixels_config.py over drq_config.py: num_qs 10, num_min_qs 1, critic LayerNorm,
    backup_entropy False, init temperature 0.1, target entropy -|A|/2 (DrQ keeps -|A|)."""
    algo = make(RLPD)
    cfg = algo.config
    assert (cfg.num_critics, cfg.critic_subsample, cfg.critic_layer_norm) == (10, 1, True)
    assert (cfg.backup_entropy, cfg.init_alpha, cfg.gamma) == (False, 0.1, 0.99)
    assert algo.target_entropy == -ACT.shape[0] / 2
    assert make(DrQ).target_entropy == -ACT.shape[0]


def test_serl_preset_composes_over_rlpd_and_builds() -> None:
    """SERL's make_drq_agent: discount 0.96, tanh + LayerNorm in actor and critics, 10
    critics with a subset of 2, no entropy backup, temperature from 1e-2."""
    host = get_host()
    algo = compose_dict(host, ["algo=serl", "env=tabletop_reach_pixels"], "train")["algo"]
    assert algo["name"] == "rlpd"
    assert (algo["activation"], algo["backup_entropy"], algo["init_alpha"]) == ("tanh", False, 0.01)
    cls, config = resolve_algorithm(host, algo)
    assert cls is RLPD and config.num_critics == 10 and config.critic_subsample == 2
    assert (config.gamma, config.actor_layer_norm) == (0.96, True)
    serl = cls(space(), ACT, config)
    assert any(isinstance(m, torch.nn.LayerNorm) for m in serl.actor.modules())
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in make(RLPD).actor.modules())


def test_a_checkpoint_of_unfused_adam_loads_into_the_fused_optimisers_and_trains_on() -> None:
    """Checkpoints written before the fused optimisers carry `fused: None` in their param
    groups; loading one must keep the fused kernel (and the step counts) and keep updating."""
    old = make(RLPD)
    old.update(batch(32))
    state = old.state_dict()
    for key in ("critic_opt", "actor_opt", "alpha_opt"):
        for group in state[key]["param_groups"]:
            group["fused"] = None
    new = make(RLPD)
    new.load_state_dict(state)
    for opt in (new.critic_opt, new.actor_opt, new.alpha_opt):
        assert all(group["fused"] is True for group in opt.param_groups)
    assert new.critic_opt.state_dict()["state"][0]["step"].item() == 4  # critic_steps rows
    new.update(batch(32))
    assert new.critic_opt.state_dict()["state"][0]["step"].item() == 8


def test_a_state_only_dict_learns_without_an_encoder_issue_48s_state_gate() -> None:
    """The state gate runs the same algorithm on the state alone (no camera: no conv, no
    augmentation); the critic still fits a fixed batch's targets."""
    states = gym.spaces.Dict({"state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})
    torch.manual_seed(0)
    cheap = {"num_critics": 2, "critic_subsample": None, "critic_steps": 1}
    config = build_config(RLPDConfig, {"hidden_sizes": [32, 32], "batch_size": 16, **cheap})
    algo = RLPD(states, ACT, config)
    assert algo.encoder.out_dim == 3 and not list(algo.encoder.parameters())
    g = torch.Generator().manual_seed(0)
    fixed = Batch(
        obs={"state": torch.rand(16, 3, generator=g)}, actions=torch.rand(16, 2, generator=g),
        rewards=torch.rand(16, generator=g), next_obs={"state": torch.rand(16, 3, generator=g)},
        terminated=torch.ones(16), discount=torch.full((16,), 0.99),
    )  # fmt: skip
    first = float(algo.update(fixed)["critic_loss"])
    for _ in range(100):
        last = float(algo.update(fixed)["critic_loss"])
    assert last < 0.2 * first
    assert algo.policy().act({"state": np.zeros(3, np.float32)}).shape == (2,)
