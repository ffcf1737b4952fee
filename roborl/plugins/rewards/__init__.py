"""Learned rewards: a success classifier on camera images (`reward=classifier`) and
`roborl reward train` to fit it from labelled frames (see `classifier.py`, `train.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roborl.core.hookspecs import hookimpl


def _classifier(**options: Any) -> Any:
    from roborl.plugins.rewards.classifier import classifier_reward

    return classifier_reward(**options)


def _cmd_reward(argv: list[str]) -> int:
    """train a learned reward (success classifier): roborl reward train data=PATH out=DIR"""
    from roborl.plugins.rewards.cli import main

    return main(argv)


@hookimpl
def roborl_rewards() -> dict[str, Callable[..., Any]]:
    return {"classifier": _classifier}


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"reward": _cmd_reward}


@hookimpl
def roborl_config_dirs() -> list[str]:
    return ["pkg://roborl.plugins.rewards.configs"]
