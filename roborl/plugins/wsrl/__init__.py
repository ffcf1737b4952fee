"""WSRL plugin: offline-to-online fine-tuning without retaining offline data (Zhou et al., 2025)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.wsrl.wsrl import WSRL


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"wsrl": WSRL}


@hookimpl
def roborl_config_dirs() -> list[str]:
    """Presets next to the plugin: algo=wsrl_no_warmup, wsrl_rlpd, wsrl_scratch (baselines)."""
    return ["pkg://roborl.plugins.wsrl.configs"]
