"""DSRL's normalised metrics (Liu et al., 2023, "Datasets and Benchmarks for Offline Safe RL").

normalised return  = (R - R_min) / (R_max - R_min)      (R_min/R_max: dataset references)
normalised cost    = (C + eps) / (kappa + eps)           (kappa: the cost threshold)
A policy is safe when its normalised cost is <= 1. eps = 0.1 as in DSRL's `get_normalized_score`
(which uses kappa = cost limit; with kappa = 0 the eps keeps the ratio finite).
"""

from __future__ import annotations

import numpy as np


def dsrl_normalized(
    returns: np.ndarray,
    costs: np.ndarray,
    r_min: float,
    r_max: float,
    kappa: float,
    eps: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """(normalised returns, normalised costs) for per-episode returns and costs."""
    spread = max(r_max - r_min, 1e-8)
    nr = (np.asarray(returns, float) - r_min) / spread
    nc = (np.asarray(costs, float) + eps) / (kappa + eps)
    return nr, nc
