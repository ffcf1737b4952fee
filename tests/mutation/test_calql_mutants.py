"""Tests of Cal-QL's regulariser (roborl/plugins/wsrl/calql.py) written against the mutants
that `make mutants` found alive there (tests/mutants-report.md): the logsumexp temperature
(its default 1 and a temperature of 2) against a plain reference, with and without the
Monte-Carlo bound."""

from __future__ import annotations

import math

import pytest
import torch

from roborl.plugins.wsrl.calql import calql_regulariser

E, B, N, A = 2, 3, 4, 2


def inputs(seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return {
        "q_data": r(E, B), "q_rand": r(E, B, N), "q_cur": r(E, B, N), "logp_cur": r(B, N),
        "q_next": r(E, B, N), "logp_next": r(B, N), "mc": r(B),
    }  # fmt: skip


def reference(x: dict, temperature: float, with_mc: bool) -> torch.Tensor:
    q_cur, q_next = x["q_cur"], x["q_next"]
    if with_mc:
        q_cur = torch.maximum(q_cur, x["mc"][None, :, None])
        q_next = torch.maximum(q_next, x["mc"][None, :, None])
    rand = x["q_rand"] - A * math.log(0.5)
    parts = torch.cat([rand, q_next - x["logp_next"], q_cur - x["logp_cur"]], -1)
    return temperature * torch.log(torch.exp(parts / temperature).sum(-1)) - x["q_data"]


@pytest.mark.parametrize("with_mc", [False, True], ids=["cql", "calql"])
def test_regulariser_temperature(with_mc: bool) -> None:
    x = inputs(0)
    args = [x[k] for k in ("q_data", "q_rand", "q_cur", "logp_cur", "q_next", "logp_next")]
    mc = x["mc"] if with_mc else None
    torch.testing.assert_close(calql_regulariser(*args, mc, A), reference(x, 1.0, with_mc))
    got = calql_regulariser(*args, mc, A, temperature=2.0)
    torch.testing.assert_close(got, reference(x, 2.0, with_mc))
