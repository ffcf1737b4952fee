"""Float64 building blocks for the equation-level update tests (tests/*/test_*_update_maths.py).

An algorithm's networks are copied into float64 leaf tensors (`Snap`), evaluated by a plain
forward written here (Linear, LayerNorm, activations; ensembles as separate members), and
stepped by Adam written from Kingma & Ba 2015, Algorithm 1. Nothing here calls roborl: the
tests compare what an algorithm's `update` computes with what the paper's equations give on
these copies. `Snap` remembers where each copy came from, so the algorithm's gradients and
weights can be read back in the same layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double().clone().requires_grad_(True)


def ident(t: torch.Tensor) -> torch.Tensor:
    return t


class Snap:
    """Float64 copies of some parameters, and where each came from (parameter, view)."""

    def __init__(self) -> None:
        self.leaves: list[torch.Tensor] = []
        self.sources: list[tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]] = []

    def add(self, src: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor] = ident):
        t = leaf(view(src.detach()))
        self.leaves.append(t)
        self.sources.append((src, view))
        return t

    def grads(self) -> list[torch.Tensor | None]:
        """The algorithm's gradients, viewed as the copies."""
        return [None if s.grad is None else v(s.grad) for s, v in self.sources]

    def values(self) -> list[torch.Tensor]:
        """The algorithm's current weights, viewed as the copies."""
        return [v(s.detach()) for s, v in self.sources]


def seq_ops(snap: Snap, modules: Sequence[nn.Module]) -> list[tuple]:
    """nn.Linear / nn.LayerNorm / activation modules -> ops for `forward`."""
    ops: list[tuple] = []
    for m in modules:
        if isinstance(m, nn.Sequential):
            ops += seq_ops(snap, list(m))
        elif isinstance(m, nn.Linear):
            ops.append(("linear", snap.add(m.weight, lambda t: t.t()), snap.add(m.bias)))
        elif isinstance(m, nn.LayerNorm):
            ops.append(("ln", snap.add(m.weight), snap.add(m.bias), m.eps))
        elif isinstance(m, nn.ReLU):
            ops.append(("relu",))
        elif isinstance(m, nn.Tanh):
            ops.append(("tanh",))
        elif isinstance(m, nn.Mish):
            ops.append(("mish",))
        elif isinstance(m, nn.GELU):
            assert m.approximate == "none"
            ops.append(("gelu",))
        elif isinstance(m, nn.Conv2d):
            assert m.padding == (0, 0) and m.dilation == (1, 1) and m.groups == 1
            ops.append(("conv", snap.add(m.weight), snap.add(m.bias), m.stride))
        elif isinstance(m, nn.Flatten):
            ops.append(("flatten",))
        else:
            raise TypeError(f"no reference for {type(m).__name__}")
    return ops


def ensemble_ops(snap: Snap, net: nn.Module, act: str = "relu") -> list[list[tuple]]:
    """An EnsembleMLP (weights (E, in, out), biases (E, 1, out)) as E separate op lists."""
    members = []
    for i in range(net.ensemble):
        ops: list[tuple] = []
        for lin, norm in zip(net.linears, net.norms, strict=True):
            ops.append(("linear", snap.add(lin.weight, lambda t, i=i: t[i]),
                        snap.add(lin.bias, lambda t, i=i: t[i, 0])))  # fmt: skip
            if not isinstance(norm, nn.Identity):
                ops.append(("ln", snap.add(norm.weight, lambda t, i=i: t[i, 0]),
                            snap.add(norm.bias, lambda t, i=i: t[i, 0]), 1e-5))  # fmt: skip
            ops.append((act,))
        ops.append(("linear", snap.add(net.head.weight, lambda t, i=i: t[i]),
                    snap.add(net.head.bias, lambda t, i=i: t[i, 0])))  # fmt: skip
        members.append(ops)
    return members


def forward(x: torch.Tensor, ops: list[tuple], detach: bool = False) -> torch.Tensor:
    """Evaluate ops; `detach` uses the weights' values only (gradients reach x alone)."""

    def w(t: torch.Tensor) -> torch.Tensor:
        return t.detach() if detach else t

    for op in ops:
        kind = op[0]
        if kind == "linear":
            x = x @ w(op[1]) + w(op[2])
        elif kind == "ln":  # Ba et al. 2016: biased variance, eps inside the square root
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            x = (x - mu) / torch.sqrt(var + op[3]) * w(op[1]) + w(op[2])
        elif kind == "relu":
            x = torch.clamp(x, min=0.0)
        elif kind == "tanh":
            x = torch.tanh(x)
        elif kind == "mish":  # Misra 2019: x tanh(softplus(x))
            x = x * torch.tanh(torch.log1p(torch.exp(x)))
        elif kind == "gelu":  # Hendrycks & Gimpel 2016, exact form x Phi(x)
            x = 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))
        elif kind == "conv":
            x = nn.functional.conv2d(x, w(op[1]), w(op[2]), stride=op[3])
        elif kind == "flatten":
            x = x.flatten(1)
        else:
            raise ValueError(kind)
    return x


def ensemble_forward(x: torch.Tensor, members: list[list[tuple]], detach: bool = False):
    """(E, B) values of one-output members."""
    return torch.stack([forward(x, ops, detach).squeeze(-1) for ops in members])


def tanh_gaussian(mean, log_std, eps):
    """Reparameterised tanh-Gaussian sample and log-likelihood (SAC, Appendix C, eq. 21)."""
    u = mean + log_std.exp() * eps
    gauss = (-0.5 * eps**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    a = torch.tanh(u)
    return a, gauss - torch.log(1 - a**2).sum(-1)


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1; PyTorch's defaults), applied in place."""

    def __init__(self, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        self.betas, self.eps = betas, eps
        self.state: dict[int, dict] = {}

    @torch.no_grad()
    def step(self, params, grads, lr: float) -> None:
        b1, b2 = self.betas
        for p, g in zip(params, grads, strict=True):
            if g is None:
                continue
            st = self.state.setdefault(
                id(p), {"m": torch.zeros_like(p), "v": torch.zeros_like(p), "t": 0}
            )
            st["t"] += 1
            st["m"] = b1 * st["m"] + (1 - b1) * g
            st["v"] = b2 * st["v"] + (1 - b2) * g * g
            m_hat, v_hat = st["m"] / (1 - b1 ** st["t"]), st["v"] / (1 - b2 ** st["t"])
            p -= lr * m_hat / (v_hat.sqrt() + self.eps)


@torch.no_grad()
def polyak(target: Snap, source: Snap, tau: float) -> None:
    for t, s in zip(target.leaves, source.leaves, strict=True):
        t.copy_((1 - tau) * t + tau * s)


def assert_grads(got, want, rel: float = 1e-4, what: str = "") -> None:
    """Each gradient within `rel` of its largest entry (float32 algorithm vs float64); tiny
    tensors (a head's bias) are measured against a twentieth of the group's largest entry."""
    assert len(got) == len(want), what
    group = max((float(r.abs().max()) for r in want if r is not None), default=0.0)
    for i, (g, r) in enumerate(zip(got, want, strict=True)):
        if r is None:
            assert g is None or float(g.abs().max()) == 0.0, f"{what}[{i}]: unexpected grad"
            continue
        assert g is not None, f"{what}[{i}]: no gradient"
        scale = max(float(r.abs().max()), 0.05 * group) + 1e-12
        err = float((g.double() - r).abs().max())
        assert err <= rel * scale, f"{what}[{i}]: |grad - reference| = {err:.3g}, max {scale:.3g}"


def assert_values(got, want, atol: float = 5e-6, what: str = "") -> None:
    for i, (g, r) in enumerate(zip(got, want, strict=True)):
        err = float((g.double() - r.detach()).abs().max())
        assert err <= atol, f"{what}[{i}]: |weight - reference| = {err:.3g}"


def approx(x, rel: float = 1e-5, abs_: float = 1e-6):
    import pytest

    return pytest.approx(float(torch.as_tensor(x).detach()), rel=rel, abs=abs_)
