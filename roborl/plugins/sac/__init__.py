"""SAC family plugin: SAC (Haarnoja et al., 2018)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.sac.sac import SAC


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"sac": SAC}
