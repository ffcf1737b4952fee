"""Dataset sources and writers (D4RL-style NPZ/HDF5, Minari, LeRobotDataset v3) and the
`roborl dataset` command (whose `convert` also reads rosbag2 recordings: `rosbag/`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roborl.core.dataset_files import load_hdf5_source, load_npz_source
from roborl.core.hookspecs import hookimpl
from roborl.plugins.datasets.lerobot import load_lerobot_source, save_lerobot
from roborl.plugins.datasets.sources import load_minari_source, save_minari


def _cmd_dataset(argv: list[str]) -> int:
    """build, inspect, convert and corrupt datasets: roborl dataset collect|info|convert|corrupt"""
    from roborl.plugins.datasets.cli import main

    return main(argv)


@hookimpl
def roborl_dataset_sources() -> dict[str, Any]:
    return {
        "npz": load_npz_source,
        "hdf5": load_hdf5_source,
        "minari": load_minari_source,
        "lerobot": load_lerobot_source,
    }


@hookimpl
def roborl_dataset_writers() -> dict[str, Callable[..., Any]]:
    return {"minari": save_minari, "lerobot": save_lerobot}


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"dataset": _cmd_dataset}
