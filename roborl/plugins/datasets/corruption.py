"""Data corruption protocol of Yang et al., "Towards Robust Offline RL under Diverse Data
Corruption" (RIQL, ICLR 2024, Sec. 5 and App. D), checked against the official code
(github.com/YangRui2015/RIQL, `attack.py`).

A fraction `rate` (c, default 0.3) of transitions is chosen, then one field is corrupted with
scale `scale` (epsilon, default 1.0); std is the per-dimension std of that field over the
dataset:

- random observation: s <- s + lambda * std(s), lambda ~ U[-eps, eps]^d;
- random action: a <- a + lambda * std(a) (not clipped to the bounds: the official code does
  not clip, and the corrupted action may leave them);
- random reward: r <- u, u ~ U[-30 eps, 30 eps];
- random dynamics: s' <- s' + lambda * std(s');
- adversarial observation / action / dynamics: x <- x + delta * std(x) with delta in the box
  [-eps, eps]^d, found by 100 steps of Adam (a fresh optimiser each step, lr 0.01 eps, delta
  clamped to the box after each step) from a uniformly random start, minimising
  - obs: Q(s + delta std, a),
  - action: Q(s, a + delta std),
  - dynamics: Q(s' + delta std, pi(s' + delta std)), the value of the corrupted next state;
  the attacked rows are processed in 10 chunks, each minimising the chunk's mean Q (as the
  official `split_gradient_attack`; with Adam's normalised first step every row moves by
  about lr per step whatever the chunk size);
- adversarial reward: r <- -eps * r.

Remaining deviations from the official code, and why:
- the attack's Q and pi: the official code loads an EDAC agent (10 critics and its actor)
  pre-trained for 3000 epochs on the clean data. Here Q is a twin critic fitted by SARSA-style
  TD on the clean data (`attack_steps` updates; Q of the behaviour policy, target action =
  the dataset's next action) and pi a behaviour-cloning actor fitted on the same data, so
  this tool needs no other plugin and no hours of pre-training; the attack minimises the
  mean over the twin critics, as the official one does over its ensemble;
- the number of corrupted transitions is exactly round(rate * N), drawn without replacement;
  the official code corrupts each transition with probability `rate` (a binomial count), so
  its fraction is `rate` only in expectation. The exact count keeps runs comparable;
- the official random start is range * std * U(-1, 1) in units that its loss multiplies by
  std again (a start of std^2 scale, clamped into the box only after the first step); here
  the start is uniform in the box [-eps, eps]^d (in std units), the evident intent.

The record of what was done (kind, field, rate, scale, seed, count) goes into the dataset
metadata under `corruption`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError, DatasetError

FIELDS = {"obs": "observations", "action": "actions", "reward": "rewards", "dynamics": None}
KINDS = ("random", "adversarial")
ATTACK_CHUNKS = 10  # official split_gradient_attack


def _mlp(inp: int, out: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inp, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, out)
    )


class TwinQ(nn.Module):
    """Two Q networks; `forward` returns their Q-values stacked, shape (2, batch)."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.nets = nn.ModuleList([_mlp(obs_dim + act_dim, 1) for _ in range(2)])

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], -1)
        return torch.stack([net(x).squeeze(-1) for net in self.nets])


def fit_attack_models(
    ds: OfflineDataset, steps: int = 2000, seed: int = 0
) -> tuple[TwinQ, nn.Module]:
    """The attacker's twin Q (SARSA-style TD) and behaviour-cloning actor, on the clean data."""
    torch.manual_seed(seed)
    od, ad = ds.obs_dim, ds.action_dim
    q, actor = TwinQ(od, ad), _mlp(od, ad)
    tgt = copy.deepcopy(q).requires_grad_(False)
    q_opt = torch.optim.Adam(q.parameters(), lr=3e-4)
    pi_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
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
            y = rew[i] + 0.99 * (1 - done[i]) * tgt(nxt[i], nact[i]).min(0).values
        q_loss = (q(obs[i], act[i]) - y).pow(2).mean(1).sum()
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        torch._foreach_lerp_(list(tgt.parameters()), list(q.parameters()), 0.005)
        pi_loss = (actor(obs[i]) - act[i]).pow(2).mean()
        pi_opt.zero_grad()
        pi_loss.backward()
        pi_opt.step()
    return q.requires_grad_(False), actor.requires_grad_(False)


def adversarial_perturb(
    x: torch.Tensor,
    std: torch.Tensor,
    value: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scale: float,
    iters: int = 100,
    lr: float = 0.01,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """x + delta * std minimising `value(x + delta * std, rows)`, delta in [-scale, scale]^d
    (`rows` indexes the chunk's rows of `x`, for the other inputs of the value).

    The official attack loop: a uniformly random start in the box, then `iters` steps of a
    freshly built Adam (lr = lr * scale), each followed by a clamp back into the box; rows
    are attacked in `ATTACK_CHUNKS` chunks, each minimising its chunk's mean value.
    """
    out = torch.empty_like(x)
    for rows in torch.tensor_split(torch.arange(len(x)), min(ATTACK_CHUNKS, max(len(x), 1))):
        if len(rows) == 0:
            continue
        xc = x[rows]
        para = scale * (2.0 * torch.rand(xc.shape, generator=generator) - 1.0)
        for _ in range(iters):
            p = para.clone().requires_grad_(True)
            opt = torch.optim.Adam([p], lr=lr * scale)
            loss = value(xc + p * std, rows).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            para = p.detach().clamp(-scale, scale)
        out[rows] = xc + para * std
    return out


def corrupt(
    ds: OfflineDataset,
    field: str,
    kind: str = "random",
    rate: float = 0.3,
    scale: float = 1.0,
    seed: int = 0,
    attack_steps: int = 2000,
    attack_iters: int = 100,
) -> OfflineDataset:
    """A corrupted copy of `ds`; exactly round(rate * N) transitions of one field change."""
    if field not in FIELDS:
        raise ConfigError(
            f"unknown corruption field {field!r}; accepted: {', '.join(FIELDS)} "
            "(obs, action, reward, dynamics = next observations)."
        )
    if kind not in KINDS:
        raise ConfigError(f"unknown corruption kind {kind!r}; accepted: {', '.join(KINDS)}.")
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"corruption rate={rate} is outside [0, 1].")
    if scale < 0:
        raise ConfigError(f"corruption scale={scale} must be >= 0.")
    if attack_iters < 0 or attack_steps < 0:
        raise ConfigError("attack_steps and attack_iters must be >= 0.")
    if ds.dict_obs:
        raise DatasetError(
            f"corruption (RIQL's protocol) perturbs flat vectors; this dataset has dict "
            f"observations ({', '.join(ds.observations)}), which it does not define."
        )
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
    elif field == "reward":
        arrays[name][idx] = -scale * arrays[name][idx]
    elif count > 0:
        q, actor = fit_attack_models(ds, attack_steps, seed)
        obs = torch.as_tensor(arrays["observations"][idx]).flatten(1)
        act = torch.as_tensor(arrays["actions"][idx])
        x = arrays[name]
        std = torch.as_tensor(x.reshape(n, -1).std(0))
        value = _attack_value(field, q, actor, obs, act)
        gen = torch.Generator().manual_seed(seed)
        target = torch.as_tensor(x[idx]).flatten(1)
        out = adversarial_perturb(target, std, value, scale, attack_iters, generator=gen)
        x[idx] = out.numpy().reshape(x[idx].shape)
    record: dict[str, Any] = {
        "kind": kind,
        "field": field,
        "rate": rate,
        "scale": scale,
        "seed": seed,
        "corrupted": count,
        "protocol": "Yang et al. ICLR 2024 (RIQL), official attack.py",
    }
    if kind == "adversarial" and field != "reward":
        record["attack_critic_steps"] = attack_steps
        record["attack_iters"] = attack_iters
    history = list(ds.metadata.get("corruption_history", []))
    history.append(record)
    return ds.replace(
        **{name: arrays[name]}, metadata={"corruption": record, "corruption_history": history}
    )


def _attack_value(
    field: str, q: TwinQ, actor: nn.Module, obs: torch.Tensor, act: torch.Tensor
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """What the attack minimises for each field, per row (mean over the twin critics)."""
    if field == "obs":
        return lambda s, rows: q(s, act[rows]).mean(0)
    if field == "action":
        return lambda a, rows: q(obs[rows], a).mean(0)
    return lambda s2, rows: q(s2, actor(s2)).mean(0)  # dynamics: value of the next state
