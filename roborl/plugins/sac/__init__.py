"""SAC family plugin: SAC (Haarnoja et al., 2018) and DSAC-T (Duan et al., 2025)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.sac.dsac_t import DSACT
from roborl.plugins.sac.sac import SAC


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"sac": SAC, "dsac_t": DSACT}
