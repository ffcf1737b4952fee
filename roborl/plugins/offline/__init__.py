"""Offline RL plugin: IQL (Kostrikov et al., 2021) and RIQL (Yang et al., ICLR 2024)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.offline.iql import IQL, RIQL


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"iql": IQL, "riql": RIQL}
