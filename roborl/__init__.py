"""roborl: plugin-based reinforcement learning for robotics and control."""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# Headless Linux (servers, CI, robots' onboard computers) has no display for MuJoCo's default
# GLFW backend; EGL renders offscreen. MuJoCo reads this when first imported, so set it here.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")
