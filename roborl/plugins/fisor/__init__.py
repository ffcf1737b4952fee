"""Safe offline RL plugin: FISOR (Zheng et al., ICLR 2024) and the BC-all / BC-safe baselines."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.fisor.baselines import BC, safe_subset
from roborl.plugins.fisor.fisor import FISOR
from roborl.plugins.fisor.metrics import dsrl_normalized

__all__ = ["BC", "FISOR", "dsrl_normalized", "safe_subset"]


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"fisor": FISOR, "bc": BC}
