"""Feature statistics in LeRobot's `stats.json` form (min, max, mean, std, count, quantiles).

Why: LeRobot's policies normalise inputs and outputs with `meta/stats.json` (and its dataset
tools merge the per-episode copies in `meta/episodes`), so a dataset without them loads but
does not train there. Images are per channel, scaled to [0, 1], shaped (3, 1, 1), from at most
`IMAGE_SAMPLES` evenly spaced frames, as LeRobot samples them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
IMAGE_SAMPLES = 100


def feature_stats(values: np.ndarray, camera: bool = False) -> dict[str, list[Any]]:
    """Statistics of one feature over rows: per element for vectors (shape (1,) for scalars),
    per channel for (N, H, W, 3) camera frames."""
    if camera:
        idx = np.unique(np.linspace(0, len(values) - 1, min(len(values), IMAGE_SAMPLES)).round())
        rows = values[idx.astype(int)].reshape(-1, values.shape[-1]).astype(np.float64) / 255.0
        shape: tuple[int, ...] = (values.shape[-1], 1, 1)
        count = len(idx)
    else:
        rows = values.reshape(len(values), -1).astype(np.float64)
        shape = tuple(values.shape[1:]) or (1,)
        count = len(values)
    out: dict[str, list[Any]] = {
        "min": rows.min(axis=0).reshape(shape).tolist(),
        "max": rows.max(axis=0).reshape(shape).tolist(),
        "mean": rows.mean(axis=0).reshape(shape).tolist(),
        "std": rows.std(axis=0).reshape(shape).tolist(),
        "count": [int(count)],
    }
    qs = np.quantile(rows, list(QUANTILES.values()), axis=0)
    for name, q in zip(QUANTILES, qs):
        out[name] = q.reshape(shape).tolist()
    return out
