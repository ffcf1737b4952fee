"""The plugin module named by the `roborl.plugins` entry point: hook implementations only."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl

# Refuse to load (with a clear report) under a roborl whose hookspecs changed incompatibly.
ROBORL_HOOKSPEC_VERSION = "2"


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    from roborl_example.td3 import TD3

    return {"example_td3": TD3}


@hookimpl
def roborl_envs() -> dict:
    from roborl_example.point_reach import PointReachEnv

    return {"ExamplePointReach-v0": PointReachEnv}


@hookimpl
def roborl_collectors() -> dict:
    from roborl_example.collector import EpisodeCollector

    return {"example_episodes": EpisodeCollector}


@hookimpl
def roborl_loggers() -> dict:
    from roborl_example.csv_logger import CsvLogger

    return {"example_csv": CsvLogger}


@hookimpl
def roborl_config_dirs() -> list[str]:
    return ["pkg://roborl_example.configs"]
