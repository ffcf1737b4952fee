"""roborl: plugin-based reinforcement learning for robotics and control."""

from __future__ import annotations

__version__ = "0.1.0"
