"""The static-shape update (issue 52) equals the eager update it replaced, for sac, dsac_t,
wsrl and serl: same batch, same random state, float64, parameters, optimiser state and
returned losses within 1e-6 after one and after several updates.

The reference functions below are the `update` methods as they were before the rewrite
(commit 4c0ade0), kept verbatim apart from `self` becoming `algo`: they are what the rewrite
must not change. Each algorithm runs three ways from the same initial weights: the reference,
the new update, and the new update with `capture=true`, which on CPU falls back to eager with
one warning and must give the same numbers. For serl the batch holds demo rows as the loop's
symmetric sampling lays them out (last, with `Batch.demo_rows`: the fixed-slice path) and
scattered (the `nonzero` path).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.algorithms import resolve_algorithm
from roborl.core.compile import fused_adam_step
from roborl.core.compose import compose_dict
from roborl.core.interfaces import Algorithm, Batch
from roborl.core.nn import polyak_update
from roborl.core.obs import to_torch
from roborl.core.plugins import get_host
from roborl.plugins.sac.fast_update import fast_losses_and_grads
from roborl.plugins.wsrl.config import WSRLConfig
from roborl.plugins.wsrl.wsrl import WSRL

B, OBS_DIM, ACT_DIM, PX = 16, 5, 2, 12
ACT = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32))
SMALL = {"hidden_sizes": [16, 16], "batch_size": B}
PIXEL_SMALL = {**SMALL, "feature_dim": 6, "conv_channels": 4, "conv_layers": 2}


# -- the updates before the rewrite ----------------------------------------------------------


def ref_sac(algo: Any, batch: Batch) -> dict[str, torch.Tensor]:
    cfg = algo.config
    obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
    actions = algo.scaler.to_unit(batch.actions)
    discount = batch.discount
    noise = torch.randn(2 * obs.shape[0], algo.act_dim, device=algo.device)
    args = (obs, actions, batch.rewards, next_obs, batch.terminated, discount, noise)
    if algo.fast_path:
        metrics = fast_losses_and_grads(algo, *args)
    else:
        algo.optimizer.zero_grad(set_to_none=True)
        _, metrics = algo._loss_call(*args, after=algo._backward, reset=algo._zero_grad)
    if algo.fast_path and algo.direct_adam_step:
        fused_adam_step(algo.optimizer)
    else:
        algo.optimizer.step()
    algo.updates += 1
    if algo.updates % cfg.target_update_every == 0:
        polyak_update(algo._target_params, algo._params, cfg.tau)
    return metrics


def ref_dsac_t(algo: Any, batch: Batch) -> dict[str, torch.Tensor]:
    cfg = algo.config
    obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
    actions = algo.scaler.to_unit(batch.actions)
    discount = batch.discount
    algo.updates += 1
    with_actor = algo.updates % cfg.delay_update == 0
    b = obs.shape[0]
    noise = torch.randn(2 * b, algo.act_dim, device=algo.device)
    q_noise = torch.randn(2, b, device=algo.device)
    algo.optimizer.zero_grad(set_to_none=True)
    _, metrics = algo._loss_call(
        obs, actions, batch.rewards, next_obs, batch.terminated, discount, noise, q_noise,
        with_actor, after=algo._backward, reset=algo._zero_grad,
    )  # fmt: skip
    fused_adam_step(algo.optimizer)
    algo.sigma_bar.copy_(metrics.pop("_sigma_bar"))
    if with_actor:
        polyak_update(algo._target_params, algo._params, cfg.tau)
    return metrics


def ref_wsrl(algo: Any, batch: Batch) -> dict[str, torch.Tensor]:
    def step(loss: torch.Tensor, target_update: bool = True) -> None:
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        algo.optimizer.step()
        algo.updates += 1
        if target_update:
            polyak_update(algo.critic_target.parameters(), algo.critic.parameters(), cfg.tau)

    cfg = algo.config
    obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
    actions = algo.scaler.to_unit(batch.actions)
    rewards, terminated = batch.rewards, batch.terminated
    if cfg.utd_ratio == 1:
        critic_loss, q_mean = algo._critic_loss(obs, actions, rewards, next_obs, terminated)
        actor_loss, alpha_loss, logp = algo._actor_losses(obs)
        alpha = algo.log_alpha.exp().detach()
        step(critic_loss + actor_loss + alpha_loss)
    else:
        m = obs.shape[0] // cfg.utd_ratio
        losses, qs = [], []
        for idx in (slice(i * m, (i + 1) * m) for i in range(cfg.utd_ratio)):
            c_loss, q_m = algo._critic_loss(
                obs[idx], actions[idx], rewards[idx], next_obs[idx], terminated[idx]
            )
            step(c_loss)
            losses.append(c_loss.detach())
            qs.append(q_m)
        critic_loss, q_mean = torch.stack(losses).mean(), torch.stack(qs).mean()
        actor_loss, alpha_loss, logp = algo._actor_losses(obs)
        alpha = algo.log_alpha.exp().detach()
        step(actor_loss + alpha_loss, target_update=False)
    return {
        "critic_loss": critic_loss.detach(),
        "actor_loss": actor_loss.detach(),
        "alpha": alpha,
        "entropy": -logp.mean(),
        "q_mean": q_mean,
    }


def ref_minibatches(algo: Any, batch: Batch) -> list[torch.Tensor]:
    n, k = len(batch), algo.config.critic_steps
    is_demo = batch.extras.get("is_demo")
    if is_demo is None:
        return list(torch.arange(n, device=algo.device).tensor_split(k))
    mask = is_demo.reshape(-1).bool().to(algo.device)
    demo = mask.nonzero().squeeze(-1).tensor_split(k)
    online = (~mask).nonzero().squeeze(-1).tensor_split(k)
    return [torch.cat([d, o]) for d, o in zip(demo, online)]


def ref_pixel(algo: Any, batch: Batch) -> dict[str, torch.Tensor]:
    cfg = algo.config
    obs = to_torch(batch.obs, algo.device)
    next_obs = to_torch(batch.next_obs, algo.device)
    images, next_images = algo.augment(obs, next_obs)
    actions = algo.scaler.to_unit(batch.actions.to(algo.device))
    ndd = batch.discount * (1.0 - batch.terminated)

    def rows(x: Any, idx: torch.Tensor) -> Any:
        if isinstance(x, Mapping):
            return {key: v[idx] for key, v in x.items()}
        return x[idx]

    critic_losses = []
    for idx in ref_minibatches(algo, batch):
        loss, feat, q = algo.critic_loss(
            rows(images, idx), rows(obs, idx), actions[idx], batch.rewards[idx],
            rows(next_images, idx), rows(next_obs, idx), ndd[idx],
        )  # fmt: skip
        algo.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        algo.critic_opt.step()
        polyak_update(algo.critic_target.parameters(), algo.critic.parameters(), cfg.tau)
        polyak_update(algo.encoder_target.parameters(), algo.encoder.parameters(), cfg.encoder_tau)
        critic_losses.append(loss.detach())
    actor_loss, logp = algo.actor_loss(feat)
    algo.actor_opt.zero_grad(set_to_none=True)
    actor_loss.backward()
    algo.actor_opt.step()
    metrics = {
        "critic_loss": torch.stack(critic_losses).mean(),
        "actor_loss": actor_loss.detach(),
        "entropy": -logp.detach().mean(),
        "q_mean": q.detach().mean(),
        "alpha": algo.log_alpha.detach().exp(),
    }
    if cfg.autotune_alpha:
        alpha_loss = -(algo.log_alpha.exp() * (logp.detach() + algo.target_entropy)).mean()
        algo.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        algo.alpha_opt.step()
    if "is_demo" in batch.extras:
        metrics["demo_fraction"] = batch.extras["is_demo"].float().mean()
    algo.updates += 1
    return metrics


# -- set-up ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def float64() -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build(algo: str, **kw: Any) -> Algorithm:
    """`algo` with its registered config (its preset for serl), small networks, seed 0."""
    pixels = algo == "serl"
    if algo == "wsrl":
        cls, config = WSRL, WSRLConfig(**{**SMALL, **kw})
    else:
        cfg = compose_dict(get_host(), [f"algo={algo}"], "train")["algo"]
        cls, config = resolve_algorithm(
            get_host(), {**cfg, **(PIXEL_SMALL if pixels else SMALL), **kw}
        )
    if pixels:
        obs_space: gym.Space = gym.spaces.Dict(
            {
                "front": gym.spaces.Box(0, 255, (PX, PX, 3), np.uint8),
                "side": gym.spaces.Box(0, 255, (PX, PX, 3), np.uint8),
                "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            }
        )
    else:
        obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    torch.manual_seed(0)
    return cls(obs_space, ACT, config)


def make_batch(seed: int, pixels: bool, demos: str = "none") -> Batch:
    """A hand-made batch; `demos` = "none", "last" (the loop's layout, `demo_rows` set) or
    "scattered" (a mask only)."""
    g = torch.Generator().manual_seed(seed)

    def obs() -> Any:
        if not pixels:
            return torch.randn(B, OBS_DIM, generator=g)
        img = {k: torch.randint(0, 256, (B, PX, PX, 3), generator=g, dtype=torch.uint8)
               for k in ("front", "side")}  # fmt: skip
        return {**img, "state": torch.rand(B, 3, generator=g) * 2 - 1}

    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 3.0])
    batch = Batch(
        obs=obs(),
        actions=low + (high - low) * torch.rand(B, ACT_DIM, generator=g),
        rewards=torch.randn(B, generator=g),
        next_obs=obs(),
        terminated=(torch.rand(B, generator=g) < 0.2).double(),
        discount=torch.full((B,), 0.96 if pixels else 0.99),  # the presets' algo.gamma
    )
    if demos == "last":
        batch.extras["is_demo"] = torch.arange(B) >= B // 2
        batch.demo_rows = B - B // 2
    elif demos == "scattered":
        batch.extras["is_demo"] = torch.rand(B, generator=g) < 0.5
    return batch


def tensors(x: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if torch.is_tensor(x):
        yield prefix, x
    elif isinstance(x, Mapping):
        for k, v in x.items():
            yield from tensors(v, f"{prefix}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from tensors(v, f"{prefix}/{i}")


def assert_same(a: Any, b: Any, what: str) -> None:
    ta, tb = dict(tensors(a)), dict(tensors(b))
    assert ta.keys() == tb.keys(), what
    for k in ta:
        torch.testing.assert_close(
            ta[k].double(), tb[k].double(), rtol=1e-6, atol=1e-6, msg=f"{what}: {k}"
        )


REFERENCE: dict[str, Callable[[Any, Batch], dict[str, torch.Tensor]]] = {
    "sac": ref_sac,
    "dsac_t": ref_dsac_t,
    "wsrl": ref_wsrl,
    "serl": ref_pixel,
}
CASES = [
    ("sac", {}, "none"),
    ("sac", {"fast_update": False}, "none"),
    ("dsac_t", {}, "none"),
    ("wsrl", {}, "none"),
    ("wsrl", {"utd_ratio": 1}, "none"),
    ("serl", {}, "last"),
    ("serl", {}, "scattered"),
    ("serl", {}, "none"),
]


@pytest.mark.parametrize(
    "algo,kw,demos", CASES, ids=[f"{a}-{'-'.join(k) or 'default'}-{d}" for a, k, d in CASES]
)
def test_static_update_equals_the_eager_update_it_replaced(
    algo: str, kw: dict[str, Any], demos: str
) -> None:
    torch.set_num_threads(1)
    pixels = algo == "serl"
    ref = build(algo, **kw)
    new = build(algo, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        captured = build(algo, capture=True, **kw)
    reasons = [str(w.message) for w in caught if "capture=true" in str(w.message)]
    assert len(reasons) == 1 and "CUDA device" in reasons[0]  # the one-line fallback reason
    assert next(iter(tensors(new.state_dict())))[1].dtype == torch.float64
    assert_same(ref.state_dict(), new.state_dict(), "initial weights")
    for step in range(3):
        batch = make_batch(step, pixels, demos)
        out = []
        for a, update in ((ref, REFERENCE[algo]), (new, new.update), (captured, captured.update)):
            torch.manual_seed(100 + step)
            out.append(update(a, batch) if a is ref else update(batch))
        for name, metrics, a in (("new", out[1], new), ("capture", out[2], captured)):
            assert_same(out[0], metrics, f"{name} losses after {step + 1} updates")
            assert_same(ref.state_dict(), a.state_dict(), f"{name} state after {step + 1}")
            assert a.updates == ref.updates
        assert all(torch.isfinite(v).all() for _, v in tensors(out[0]))
