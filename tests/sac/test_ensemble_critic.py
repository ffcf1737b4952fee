"""The batched ensemble critic computes exactly what E separate nn.Linear MLPs compute."""

from __future__ import annotations

import torch
from torch import nn

from roborl.core.nn import EnsembleMLP


def test_ensemble_equals_separate_critics_forward_and_grad() -> None:
    torch.manual_seed(0)
    E, B, d_in, hidden = 3, 8, 5, [16, 16]
    ens = EnsembleMLP(E, d_in, hidden, 1, act="relu")
    separate = []
    for e in range(E):
        layers: list[nn.Module] = []
        for lin in [*ens.linears, ens.head]:
            m = nn.Linear(lin.weight.shape[1], lin.weight.shape[2])
            with torch.no_grad():
                m.weight.copy_(lin.weight[e].T)
                m.bias.copy_(lin.bias[e, 0])
            layers += [m, nn.ReLU()]
        separate.append(nn.Sequential(*layers[:-1]))
    x = torch.randn(B, d_in)
    out = ens(x)  # (E, B, 1)
    ref = torch.stack([net(x) for net in separate])
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    torch.stack([net(x) for net in separate]).sum().backward()
    for e in range(E):
        torch.testing.assert_close(ens.linears[0].weight.grad[e], separate[e][0].weight.grad.T)
        torch.testing.assert_close(ens.head.bias.grad[e, 0], separate[e][-1].bias.grad)
    # detach=True keeps gradients to the input but none to the weights
    ens.zero_grad()
    xi = x.clone().requires_grad_(True)
    ens(xi, detach=True).sum().backward()
    assert xi.grad is not None and ens.linears[0].weight.grad is None
