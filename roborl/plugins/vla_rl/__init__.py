"""VLA-RL plugin: PPO on an auto-regressive vision-language-action policy (Lu et al., 2025)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.vla_rl.algorithm import VLARL


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"vla_rl": VLARL}
