"""stable-baselines3 plugin: SB3's PPO, A2C, SAC, TD3, DDPG and DQN as `algo=sb3/<name>`."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    from roborl.plugins.sb3.algorithms import SB3_ALGORITHMS

    return dict(SB3_ALGORITHMS)
