"""roborl: plugin-based reinforcement learning for robotics and control."""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# Headless Linux (servers, CI, robots' onboard computers) has no display for MuJoCo's default
# GLFW backend; EGL renders offscreen. MuJoCo reads this when first imported, so set it here.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

# roborl's own envs in Gymnasium's registry as `roborl/<Name>-v0`, so that
# `gymnasium.make("roborl:roborl/Tabletop-v0")` (which imports roborl) works without roborl's
# runner. Gymnasium 1.x loads no plugin entry points: importing roborl is what registers them
# (roborl/sim/registration.py). Cheap: Gymnasium only; the envs' modules load on first make.
from roborl.sim.registration import register_envs as _register_envs

_register_envs()

# The scripted experts by name (roborl/hil/experts.py), beside the envs they drive. Cheap:
# nothing beyond the registry loads until an expert is used.
from roborl.sim.registration import register_experts as _register_experts  # noqa: E402

_register_experts()
