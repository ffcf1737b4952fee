"""Forward roborl's Python logging to /rosout while an rclpy node is open.

A ROS 2 engineer reads /rosout (`ros2 topic echo /rosout`, rqt_console), not roborl's stderr:
safety interventions, e-stops and rejected messages logged on `roborl.robots.*` go to the
newest open node's logger; after the last node closes, Python logging is as it was.
"""

from __future__ import annotations

import logging
from typing import Any

_LEVELS = (
    (logging.CRITICAL, "fatal"),
    (logging.ERROR, "error"),
    (logging.WARNING, "warning"),
    (logging.INFO, "info"),
    (logging.DEBUG, "debug"),
)


class _RosoutBridge(logging.Handler):
    """Forwards `roborl.robots.*` Python log records to the newest open node's logger, so
    safety interventions, e-stops and rejected messages reach /rosout."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.nodes: list[Any] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not self.nodes:
            return
        name = next(n for lvl, n in _LEVELS if record.levelno >= lvl or lvl == logging.DEBUG)
        try:
            getattr(self.nodes[-1].get_logger(), name)(self.format(record))
        except Exception:  # a node being torn down: logging must never raise
            pass


_BRIDGE = _RosoutBridge()
_ROBOT_LOGGER = logging.getLogger("roborl.robots")
_SAVED_LEVEL: list[int] = []


def bridge_attach(node: Any) -> None:
    """Route `roborl.robots.*` INFO and above to `node` (and so to /rosout) while it is open."""
    if not _BRIDGE.nodes:
        _SAVED_LEVEL[:] = [_ROBOT_LOGGER.level]
        _ROBOT_LOGGER.addHandler(_BRIDGE)
        if _ROBOT_LOGGER.level == logging.NOTSET or _ROBOT_LOGGER.level > logging.INFO:
            _ROBOT_LOGGER.setLevel(logging.INFO)
    _BRIDGE.nodes.append(node)


def bridge_detach(node: Any) -> None:
    """After the last node closes, Python logging is as it was before (stderr for warnings)."""
    if node in _BRIDGE.nodes:
        _BRIDGE.nodes.remove(node)
        if not _BRIDGE.nodes:
            _ROBOT_LOGGER.removeHandler(_BRIDGE)
            _ROBOT_LOGGER.setLevel(_SAVED_LEVEL[0] if _SAVED_LEVEL else logging.NOTSET)
