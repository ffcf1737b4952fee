"""Check a ROS parameter's value against the type of roborl's default for it.

ROS 2 types parameters by their value (`-p rate_hz:=200` is an integer), so the rclpy
transport declares them with dynamic typing and converts each value here: ints are accepted
for floats, lists are checked item by item, any other mismatch is a `ConfigError` naming the
parameter.
"""

from __future__ import annotations

from typing import Any

from roborl.core.errors import ConfigError


def check_type(node: str, name: str, value: Any, default: Any) -> Any:
    """A parameter's value in the default's type (ints allowed for floats, lists by item)."""

    def bad(expected: str) -> ConfigError:
        return ConfigError(
            f"parameter {name}:={value!r} of {node} has the wrong type: expected {expected}."
        )

    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        if isinstance(default, float):
            return float(value)
        if value != int(value):
            raise bad("an integer")
        return int(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if isinstance(default, (list, tuple)):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise bad("a list")
        items = list(value)
        kinds = {type(v) for v in default}
        if kinds and kinds <= {int, float}:
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
                raise bad("a list of numbers")
            return [float(v) for v in items]
        if kinds == {str} and not all(isinstance(v, str) for v in items):
            raise bad("a list of strings")
        return items
    return value
