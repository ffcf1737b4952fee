"""Data corruption protocol of Yang et al., "Towards Robust Offline RL under Diverse Data
Corruption" (RIQL, ICLR 2024, Sec. 5 and App. D).

A fraction `rate` (c, default 0.3) of transitions is chosen uniformly without replacement,
then one field is corrupted with scale `scale` (epsilon, default 1.0):

- random observation: s <- s + lambda * std(s), lambda ~ U[-eps, eps]^d (per-dimension std
  over the dataset);
- random action: a <- a + lambda * std(a), clipped to the action bounds;
- random reward: r <- u, u ~ U[-30 eps, 30 eps];
- random dynamics: s' <- s' + lambda * std(s');
- adversarial observation/action: projected gradient descent inside the same box
  (||delta / std||_inf <= eps) that minimises Q(s, a) of a critic fitted on the clean data;
- adversarial reward: r <- -eps * r.

Deviation: the paper attacks with an EDAC critic trained on the clean data; here the critic is
a small twin-Q network fitted by SARSA-style TD on the clean data (`attack_steps` updates),
which keeps this tool free of other plugins. The record of what was done (kind, field, rate,
scale, seed, indices' count) goes into the dataset metadata under `corruption`.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError

FIELDS = {"obs": "observations", "action": "actions", "reward": "rewards", "dynamics": None}
KINDS = ("random", "adversarial")


def _fit_critic(ds: OfflineDataset, steps: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    od, ad = ds.obs_dim, ds.action_dim
    q = nn.Sequential(
        nn.Linear(od + ad, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
    )
    tgt = copy.deepcopy(q).requires_grad_(False)
    opt = torch.optim.Adam(q.parameters(), lr=3e-4)
    obs = torch.as_tensor(ds.observations).flatten(1)
    nxt = torch.as_tensor(ds.next_observations).flatten(1)
    act = torch.as_tensor(ds.actions)
    rew = torch.as_tensor(ds.rewards)
    done = torch.as_tensor(ds.terminals.astype(np.float32))
    # SARSA next action: the dataset's next action within an episode (own action at ends).
    nact = act.clone()
    nact[:-1] = act[1:]
    ends = torch.as_tensor(ds.episode_ends() - 1)
    nact[ends] = act[ends]
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        i = torch.randint(len(ds), (256,), generator=g)
        with torch.no_grad():
            y = rew[i] + 0.99 * (1 - done[i]) * tgt(torch.cat([nxt[i], nact[i]], -1)).squeeze(-1)
        loss = (q(torch.cat([obs[i], act[i]], -1)).squeeze(-1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch._foreach_lerp_(list(tgt.parameters()), list(q.parameters()), 0.005)
    return q.requires_grad_(False)


def _pgd(
    q: nn.Module,
    obs: torch.Tensor,
    act: torch.Tensor,
    which: str,
    bound: torch.Tensor,
    iters: int = 20,
) -> torch.Tensor:
    """Minimise Q within |delta| <= bound (per dimension) by signed-gradient steps."""
    x = obs if which == "obs" else act
    delta = torch.zeros_like(x, requires_grad=True)
    step = bound * 2.5 / iters
    for _ in range(iters):
        xo = (obs + delta, act) if which == "obs" else (obs, act + delta)
        val = q(torch.cat(xo, -1)).sum()
        (grad,) = torch.autograd.grad(val, delta)
        with torch.no_grad():
            delta -= step * grad.sign()
            delta.copy_(torch.max(torch.min(delta, bound), -bound))
    return (x + delta).detach()


def corrupt(
    ds: OfflineDataset,
    field: str,
    kind: str = "random",
    rate: float = 0.3,
    scale: float = 1.0,
    seed: int = 0,
    attack_steps: int = 2000,
) -> OfflineDataset:
    """A corrupted copy of `ds`; exactly round(rate * N) transitions of one field change."""
    if field not in FIELDS:
        raise ConfigError(
            f"unknown corruption field {field!r}; accepted: {', '.join(FIELDS)} "
            "(obs, action, reward, dynamics = next observations)."
        )
    if kind not in KINDS:
        raise ConfigError(f"unknown corruption kind {kind!r}; accepted: {', '.join(KINDS)}.")
    if kind == "adversarial" and field == "dynamics":
        raise ConfigError(
            "adversarial corruption covers obs, action and reward (as in the RIQL paper); "
            "use kind=random for field=dynamics."
        )
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"corruption rate={rate} is outside [0, 1].")
    if scale < 0:
        raise ConfigError(f"corruption scale={scale} must be >= 0.")
    rng = np.random.default_rng(seed)
    n = len(ds)
    count = round(rate * n)
    idx = np.sort(rng.choice(n, size=count, replace=False))
    arrays = {k: v.copy() for k, v in ds.arrays().items()}
    name = FIELDS[field] or "next_observations"
    if kind == "random":
        if field == "reward":
            arrays[name][idx] = rng.uniform(-30 * scale, 30 * scale, size=count)
        else:
            x = arrays[name]
            std = x.reshape(n, -1).std(0).reshape(x.shape[1:])
            lam = rng.uniform(-scale, scale, size=(count, *x.shape[1:]))
            x[idx] = x[idx] + lam * std
            if field == "action":
                space = ds.action_space
                x[idx] = np.clip(x[idx], space.low, space.high)
    elif field == "reward":
        arrays[name][idx] = -scale * arrays[name][idx]
    else:
        q = _fit_critic(ds, attack_steps, seed)
        obs = torch.as_tensor(arrays["observations"][idx]).flatten(1)
        act = torch.as_tensor(arrays["actions"][idx])
        x = arrays[name]
        std = torch.as_tensor(x.reshape(n, -1).std(0)) * scale
        out = _pgd(q, obs, act, field, std).numpy()
        if field == "action":
            space = ds.action_space
            out = np.clip(out, space.low, space.high)
        x[idx] = out.reshape(x[idx].shape)
    record: dict[str, Any] = {
        "kind": kind,
        "field": field,
        "rate": rate,
        "scale": scale,
        "seed": seed,
        "corrupted": count,
        "protocol": "Yang et al. ICLR 2024 (RIQL)",
    }
    if kind == "adversarial" and field != "reward":
        record["attack_critic_steps"] = attack_steps
    history = list(ds.metadata.get("corruption_history", []))
    history.append(record)
    return ds.replace(
        **{name: arrays[name]}, metadata={"corruption": record, "corruption_history": history}
    )
