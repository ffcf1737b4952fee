"""Cal-QL's pieces that need no network: Monte-Carlo returns-to-go and the CQL gap.

Nakamoto et al., "Cal-QL", arXiv 2303.05479, and Kumar et al., "Conservative Q-Learning",
2020. Pure functions of tensors, apart from `WSRL` (`wsrl.py`) so they can be checked
against the equations on their own.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def mc_returns(rewards: np.ndarray, episode_ends: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return-to-go within each episode (Cal-QL's lower bound MC(s))."""
    out = np.zeros(len(rewards), dtype=np.float64)
    start = 0
    for end in episode_ends:
        acc = 0.0
        for i in range(int(end) - 1, start - 1, -1):
            acc = float(rewards[i]) + gamma * acc
            out[i] = acc
        start = int(end)
    return out.astype(np.float32)


def calql_regulariser(
    q_data: torch.Tensor,
    q_rand: torch.Tensor,
    q_cur: torch.Tensor,
    logp_cur: torch.Tensor,
    q_next: torch.Tensor,
    logp_next: torch.Tensor,
    mc: torch.Tensor | None,
    act_dim: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """CQL's importance-sampled gap, per critic and sample: (E, B).

    q_* are (E, B, n); logp_* (B, n). With `mc` (B,) given (Cal-QL), policy-action values are
    max(Q, MC) so the push-down stops at the dataset's Monte-Carlo return.
    """
    if mc is not None:
        bound = mc.view(1, -1, 1)
        q_cur = torch.maximum(q_cur, bound)
        q_next = torch.maximum(q_next, bound)
    rand_density = act_dim * math.log(0.5)  # uniform on [-1, 1]^d
    cat = torch.cat(
        [q_rand - rand_density, q_next - logp_next.unsqueeze(0), q_cur - logp_cur.unsqueeze(0)],
        dim=-1,
    )
    lse = temperature * torch.logsumexp(cat / temperature, dim=-1)
    return lse - q_data
