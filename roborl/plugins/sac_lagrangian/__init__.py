"""SAC-Lagrangian plugin: SAC with a cost critic and a learned Lagrange multiplier."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.sac_lagrangian.sac_lagrangian import SACLagrangian, SACLagrangianConfig

__all__ = ["SACLagrangian", "SACLagrangianConfig"]


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"sac_lagrangian": SACLagrangian}
