"""Network building blocks shared by algorithm plugins.

`EnsembleMLP` stacks the weights of E critics into (E, in, out) tensors so all critics run in
one batched matmul forward and backward: twin Q (E=2), REDQ/Cal-QL ensembles (E=10) and
distributional critics all use it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}


def activation(name: str) -> type[nn.Module]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}"
        ) from None


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    act: str = "relu",
    layer_norm: bool = False,
) -> nn.Sequential:
    last = hidden[-1] if hidden else in_dim
    return nn.Sequential(*hidden_layers(in_dim, hidden, act, layer_norm), nn.Linear(last, out_dim))


def hidden_layers(
    in_dim: int, hidden: Sequence[int], act: str = "relu", layer_norm: bool = False
) -> list[nn.Module]:
    """Linear (+ LayerNorm) + activation per hidden width: the trunk of every MLP here."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers.append(nn.Linear(last, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(activation(act)())
        last = width
    return layers


class EnsembleLinear(nn.Module):
    """E independent linear layers applied with one `baddbmm`: x (E, B, in) -> (E, B, out).

    A one-output layer (a Q head) reads its (E, in, 1) weight as the transpose of an
    (E, 1, in) view (the same memory): on CPU, MKL's batched GEMM runs that layout several
    times faster, forward and backward, than the N=1 one (`transposed_head`; the same values
    to float rounding; benchmarks/update_efficiency.py measures it).
    """

    transposed_head = True

    def __init__(self, ensemble: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # same init as nn.Linear, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        if self.transposed_head and w.shape[-1] == 1:
            w = w.view(w.shape[0], 1, w.shape[1]).mT
        return torch.baddbmm(b, x, w)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm with separate affine parameters per ensemble member."""

    def __init__(self, ensemble: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        return nn.functional.layer_norm(x, x.shape[-1:]) * w + b


class EnsembleMLP(nn.Module):
    """E MLPs evaluated together; input (B, in) is shared or (E, B, in) per member.

    `detach=True` evaluates with detached weights: gradients reach the input (the actor's
    action) but not the critics, so actor and critic losses can share one backward pass.
    """

    def __init__(
        self,
        ensemble: int,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int,
        act: str = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.ensemble = ensemble
        self.out_dim = out_dim
        dims = [in_dim, *hidden]
        self.linears = nn.ModuleList(
            EnsembleLinear(ensemble, a, b) for a, b in itertools.pairwise(dims)
        )
        self.norms = nn.ModuleList(
            EnsembleLayerNorm(ensemble, d) if layer_norm else nn.Identity() for d in hidden
        )
        self.act = activation(act)()
        self.head = EnsembleLinear(ensemble, dims[-1], out_dim)

    def forward(self, x: torch.Tensor, detach: bool = False) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.ensemble, *x.shape)
        for linear, norm in zip(self.linears, self.norms):
            x = linear(x, detach)
            if not isinstance(norm, nn.Identity):
                x = norm(x, detach)
            x = self.act(x)
        return self.head(x, detach)


class TanhGaussianActor(nn.Module):
    """SAC's tanh-squashed Gaussian actor (Haarnoja et al. 2018, Appendix C): an MLP gives the
    mean and log-std of a Gaussian (log-std clamped to `log_std_bounds`, [-20, 2] as in the
    SAC reference code), and actions are tanh of a reparameterised sample, in [-1, 1]. Shared
    by SAC, DSAC-T, SAC-Lagrangian and WSRL, so their checkpoints keep one layout (`net`,
    `head`). `layer_norm` puts a LayerNorm after each hidden Linear (WSRL's actor); it shifts
    the `net.*` indices, so such a checkpoint only loads into an actor built the same way."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        act: str = "relu",
        log_std_bounds: tuple[float, float] = (-20.0, 2.0),
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(*hidden_layers(obs_dim, hidden, act, layer_norm))
        self.head = nn.Linear(hidden[-1] if hidden else obs_dim, 2 * act_dim)
        self.log_std_min, self.log_std_max = log_std_bounds

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(self.net(obs)).chunk(2, dim=-1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    @staticmethod
    def _log_prob(
        noise: torch.Tensor, pre_tanh: torch.Tensor, log_std: torch.Tensor
    ) -> torch.Tensor:
        # log N(pre_tanh; mean, std) - sum log(1 - tanh^2), the latter in a stable form.
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return log_prob - (
            2 * (math.log(2) - pre_tanh - nn.functional.softplus(-2 * pre_tanh))
        ).sum(-1)

    def sample(
        self, obs: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample in [-1, 1] and its log-likelihood; `noise` (standard
        normal, shaped like the mean) may be given so a compiled caller stays comparable."""
        mean, log_std = self(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        pre_tanh = mean + log_std.exp() * noise
        return torch.tanh(pre_tanh), self._log_prob(noise, pre_tanh, log_std)

    def log_prob(self, obs: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """Log-likelihood of given actions in [-1, 1] (clipped just inside for atanh)."""
        mean, log_std = self(obs)
        pre_tanh = torch.atanh(unit_action.clamp(-1 + 1e-5, 1 - 1e-5))
        return self._log_prob((pre_tanh - mean) / log_std.exp(), pre_tanh, log_std)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


def fused_adam(
    params: Iterable[torch.Tensor], lr: float, capturable: bool = False
) -> torch.optim.Adam:
    """Adam with PyTorch's fused kernel: the same update, one kernel over every tensor instead
    of a Python loop of small ops per tensor (a 10-critic ensemble's step: 0.9 ms instead of
    7.8 ms on CPU here). `capturable` (CUDA only) lets a CUDA graph record the step."""
    if capturable:
        return torch.optim.Adam(params, lr=lr, fused=True, capturable=True)
    return torch.optim.Adam(params, lr=lr, fused=True)


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """`optimizer.load_state_dict(state)`, keeping the kernel the optimiser was built with: the
    saved param groups' `fused`/`foreach` flags (e.g. an older checkpoint's unfused Adam) would
    replace it (and `capturable`, which a CUDA-graph run needs). Step counters move to their
    parameter's device, as the fused kernel needs."""
    kernels = [
        {k: group.get(k) for k in ("fused", "foreach", "capturable")}
        for group in optimizer.param_groups
    ]
    optimizer.load_state_dict(state)
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)
        for param in group["params"]:
            saved = optimizer.state.get(param, {})
            if torch.is_tensor(saved.get("step")):
                saved["step"] = saved["step"].to(param.device, torch.float32)


@torch.no_grad()
def polyak_update(
    target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float
) -> None:
    """target <- (1 - tau) target + tau source, fused over all tensors (none: a no-op, e.g.
    the encoder of a state-only observation)."""
    targets = list(target)
    if targets:
        torch._foreach_lerp_(targets, list(source), tau)


class ActionScaler:
    """Maps between a Box action space and the [-1, 1] range tanh policies produce."""

    def __init__(self, space: gym.spaces.Box, device: torch.device | str = "cpu") -> None:
        low = np.asarray(space.low, dtype=np.float32)
        high = np.asarray(space.high, dtype=np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError("tanh-squashed policies need a bounded action space")
        self.low_np, self.high_np = low, high
        self.scale_np = (high - low) / 2.0
        self.center_np = (high + low) / 2.0
        self.scale = torch.as_tensor(self.scale_np, device=device)
        self.center = torch.as_tensor(self.center_np, device=device)

    def to_env(self, a: np.ndarray) -> np.ndarray:
        return np.clip(a * self.scale_np + self.center_np, self.low_np, self.high_np)

    def to_unit(self, a: torch.Tensor) -> torch.Tensor:
        return ((a - self.center) / self.scale).clamp(-1.0, 1.0)


def obs_tensor(obs: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=device)
