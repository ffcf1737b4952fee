"""SAC's three gradients derived by hand for ReLU MLPs: the same maths, fewer and larger GEMMs.

Why: at batch 256 with 256x256 networks on a CPU, autograd's SAC update reached 47% of its
sgemm bound (issue 23); the rest went to small ops, graph bookkeeping, twice as many GEMM
calls as needed and fresh megabyte-sized buffers. Writing the backward pass out lets the update

- run the actor once on [obs; next_obs] (2B rows: one GEMM per layer instead of two) and
  back-propagate only the first B rows (the next-state half feeds the target, which is never
  differentiated);
- run the current critics once on [(obs, a); (obs, pi(obs))] (2B rows) and back-propagate
  both halves together, taking weight gradients from the first B rows only (the actor loss
  sees the critics through detached weights) and the input gradient from the last B rows only
  (the actor's action), where autograd ran two forward and two backward passes;
- skip the gradients nobody uses (the critic's input gradient for replayed actions, the
  actor's input gradient) and keep the intermediates and gradients in buffers reused from one
  update to the next (`Workspace`).

The losses and gradients are exactly those of `SAC._losses` (Haarnoja et al. 2018, eqs. 3, 5,
7 and 18 with the twin-Q min; float rounding aside): tests/plugins/test_sac_update_maths.py pins
both against a float64 reference written from the equations. Used only where it applies
(`fast_path_reason`): ReLU networks without LayerNorm, one-output critics, not compiled;
`fast_update=false` keeps the autograd update. benchmarks/update_efficiency.py measures what
each step bought.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from roborl.core.nn import EnsembleMLP, TanhGaussianActor

if TYPE_CHECKING:
    from roborl.plugins.sac.sac import SAC

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)


def fast_path_reason(algo: SAC) -> str | None:
    """Why the hand-derived update does not apply to `algo` (None when it does)."""
    cfg = algo.config
    if not cfg.fast_update:
        return "fast_update=false"
    if cfg.compile or cfg.cudagraphs:
        return "compile/cudagraphs compile the autograd loss"
    if cfg.activation != "relu":
        return f"activation={cfg.activation} (the hand-derived backward is ReLU's)"
    actor, critic = algo.actor, algo.critic
    if not isinstance(actor, TanhGaussianActor) or not isinstance(critic, EnsembleMLP):
        return "custom networks"
    if any(not isinstance(m, (nn.Linear, nn.ReLU)) for m in actor.net):
        return "actor with layers other than Linear and ReLU"
    if any(not isinstance(m, nn.Identity) for m in critic.norms) or critic.out_dim != 1:
        return "critic with LayerNorm or more than one output"
    return None


class Workspace:
    """Buffers reused from one update to the next, so the update's megabyte-sized
    intermediates do not go back to the C allocator (and the OS) every step: on a busy CPU the
    page faults of fresh buffers cost as much as the element-wise work on them."""

    def __init__(self, reuse: bool = True) -> None:
        self.reuse = reuse  # False: fresh buffers every call (benchmarks/update_efficiency.py)
        self._bufs: dict[str, torch.Tensor] = {}

    def __call__(self, name: str, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        buf = self._bufs.get(name) if self.reuse else None
        if buf is None or buf.shape != tuple(shape) or buf.device != like.device:
            buf = self._bufs[name] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return buf


def _grad(p: torch.Tensor) -> torch.Tensor:
    """`p.grad`, allocated once: every update overwrites it in full."""
    if p.grad is None or p.grad.shape != p.shape:
        p.grad = torch.empty_like(p)
    return p.grad


def _relu_backward_(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """ReLU's backward from its output, in place: the op autograd itself uses."""
    return torch.ops.aten.threshold_backward.grad_input(grad, out, 0.0, grad_input=grad)


def _critic_forward(
    critic: EnsembleMLP, z: torch.Tensor, ws: Workspace, tag: str
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Hidden outputs (post-ReLU, (E, N, H) each) and values (E, N) of critics on shared z."""
    x = z.unsqueeze(0).expand(critic.ensemble, *z.shape)
    hs = []
    for i, lin in enumerate(critic.linears):
        out = ws(f"{tag}{i}", (critic.ensemble, z.shape[0], lin.weight.shape[-1]), z)
        x = torch.baddbmm(lin.bias, x, lin.weight, out=out).relu_()
        hs.append(x)
    return hs, critic.head(x).squeeze(-1)  # one-output head: EnsembleLinear's fast layout


def _actor_forward(
    linears: Sequence[nn.Linear], x: torch.Tensor, ws: Workspace
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Inputs of every actor layer ([x, h1, ..., hL]) and the head's output."""
    hs = [x]
    for i, lin in enumerate(linears[:-1]):
        out = ws(f"actor{i}", (x.shape[0], lin.weight.shape[0]), x)
        x = torch.addmm(lin.bias, x, lin.weight.t(), out=out).relu_()
        hs.append(x)
    head = linears[-1]
    return hs, torch.addmm(head.bias, x, head.weight.t())


@torch.no_grad()
def fast_losses_and_grads(
    algo: SAC,
    obs: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    discount: torch.Tensor,
    noise: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Set `.grad` of the actor, critic and log_alpha to the gradients of SAC's summed loss
    (as `SAC._losses` + backward would) and return the same metrics."""
    b = obs.shape[0]
    actor, critic, target_critic = algo.actor, algo.critic, algo.critic_target
    lo, hi = actor.log_std_min, actor.log_std_max
    a_lin = [m for m in actor.net if isinstance(m, nn.Linear)] + [actor.head]
    alpha = algo.log_alpha.exp()

    # Actor on [obs; next_obs]: one GEMM per layer; noise is laid out the same way.
    ws = algo.fast_workspace
    hs, out = _actor_forward(a_lin, torch.cat([obs, next_obs]), ws)
    mean, raw_log_std = out.chunk(2, dim=-1)
    log_std = raw_log_std.clamp(lo, hi)
    std = log_std.exp()
    pre_tanh = mean + std * noise
    act = torch.tanh(pre_tanh)
    logp_all = (-0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI).sum(-1) - (
        2 * (_LOG2 - pre_tanh - nn.functional.softplus(-2 * pre_tanh))
    ).sum(-1)
    pi_a, next_a = act[:b], act[b:]
    logp, next_logp = logp_all[:b], logp_all[b:]

    # Target (eq. 3 with the clipped double-Q min).
    _, q_next = _critic_forward(target_critic, torch.cat([next_obs, next_a], -1), ws, "target")
    target = rewards + discount * (1.0 - terminated) * (q_next.min(0).values - alpha * next_logp)

    # Current critics on [(obs, a); (obs, pi(obs))].
    z = torch.cat([torch.cat([obs, actions], -1), torch.cat([obs, pi_a], -1)])
    c_hs, q_all = _critic_forward(critic, z, ws, "critic")
    q, q_pi_all = q_all[:, :b], q_all[:, b:]
    q_pi, argmin = q_pi_all.min(0)
    td = q - target
    critic_loss = 0.5 * td.pow(2).mean(-1).sum()
    actor_loss = (alpha * logp - q_pi).mean()

    # d loss / d q: the critic loss on the first B columns, the actor loss (through the min)
    # on the last B.
    dq = torch.zeros_like(q_all)
    dq[:, :b] = td / b
    dq[:, b:].scatter_(0, argmin.unsqueeze(0), -1.0 / b)
    d_pi_a = _critic_backward(critic, z, c_hs, dq, b, algo.obs_dim, ws)

    # Actor: through tanh, the reparameterised sample, the clamp and the log-likelihood.
    g_logp = alpha / b
    # d tanh(u)/du = 1 - tanh^2; d log pi / d u = 2 tanh(u) (the squashing correction).
    a = pi_a
    d_pre = d_pi_a * (1 - a * a) + (2 * g_logp) * a
    d_log_std = d_pre * std[:b] * noise[:b] - g_logp
    raw = raw_log_std[:b]
    d_raw = d_log_std * ((raw >= lo) & (raw <= hi))
    g = torch.cat([d_pre, d_raw], -1)
    for k in range(len(a_lin) - 1, -1, -1):
        lin, x_in = a_lin[k], hs[k][:b]
        torch.mm(g.t(), x_in, out=_grad(lin.weight))
        torch.sum(g, 0, out=_grad(lin.bias))
        if k > 0:
            g = _relu_backward_(torch.mm(g, lin.weight, out=ws(f"actor_g{k}", x_in.shape, g)), x_in)

    if algo.log_alpha.requires_grad:
        # J(alpha) = -E[alpha (log pi + target_entropy)], d/d log(alpha) = alpha * d/d alpha.
        torch.mul((logp + algo.target_entropy).mean(), -alpha, out=_grad(algo.log_alpha))
    return {
        "critic_loss": critic_loss,
        "actor_loss": actor_loss,
        "alpha": alpha,
        "entropy": -logp.mean(),
        "q_mean": q.mean(),
    }


def _critic_backward(
    critic: EnsembleMLP,
    z: torch.Tensor,
    hs: list[torch.Tensor],
    dq: torch.Tensor,
    b: int,
    obs_dim: int,
    ws: Workspace,
) -> torch.Tensor:
    """Set the weight gradients from rows [:b] (the critic loss); return the action gradient
    from rows [b:] (the actor loss through detached weights, summed over members)."""
    e, h, _ = critic.head.weight.shape
    head = critic.head
    torch.bmm(dq[:, :b].unsqueeze(1), hs[-1][:, :b], out=_grad(head.weight).view(e, 1, h))
    torch.sum(dq[:, :b], 1, keepdim=True, out=_grad(head.bias).view(e, 1))
    g = torch.mul(dq.unsqueeze(-1), head.weight.view(e, 1, h), out=ws("critic_g", hs[-1].shape, dq))
    _relu_backward_(g, hs[-1])
    for k in range(len(critic.linears) - 1, 0, -1):
        lin = critic.linears[k]
        torch.bmm(hs[k - 1][:, :b].mT, g[:, :b], out=_grad(lin.weight))
        torch.sum(g[:, :b], 1, keepdim=True, out=_grad(lin.bias))
        g = torch.bmm(g, lin.weight.mT, out=ws(f"critic_g{k}", hs[k - 1].shape, g))
        _relu_backward_(g, hs[k - 1])
    first = critic.linears[0]
    z_t = z[:b].t()
    torch.bmm(z_t.expand(e, *z_t.shape), g[:, :b], out=_grad(first.weight))
    torch.sum(g[:, :b], 1, keepdim=True, out=_grad(first.bias))
    return torch.bmm(g[:, b:], first.weight[:, obs_dim:, :].mT).sum(0)
