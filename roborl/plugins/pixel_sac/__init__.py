"""Pixel SAC plugin: DrQ and RLPD on camera images, as SERL runs them (see `drq.py`), and
behaviour cloning on the same encoder (`bc.py`, HIL-SERL's BC baseline)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.pixel_sac.bc import PixelBC
from roborl.plugins.pixel_sac.drq import RLPD, DrQ


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    return {"drq": DrQ, "rlpd": RLPD, "pixel_bc": PixelBC}


@hookimpl
def roborl_config_dirs() -> list[str]:
    """Presets next to the plugin: algo=serl (RLPD with SERL's launcher values)."""
    return ["pkg://roborl.plugins.pixel_sac.configs"]
