"""`--help` text from config dataclasses: each key with its default and meaning.

The meaning is the field's ``metadata["help"]`` (plus its range or choices), so the text a user
reads is written once, next to the default it describes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

WIDTH = 34


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and value == "":
        return "''"
    return str(value)


def _constraint(meta: Mapping[str, Any]) -> str:
    if "choices" in meta:
        return "one of " + "|".join(map(str, meta["choices"]))
    if "range" in meta:
        lo, hi = meta["range"]
        if lo is not None and hi is not None:
            return f"{lo}..{hi}"
        if lo is not None:
            return f">= {lo}"
        if hi is not None:
            return f"<= {hi}"
    return ""


def key_line(key: str, default: Any, text: str = "") -> str:
    left = f"  {key}={_fmt(default)}"
    if not text:
        return left
    if len(left) >= WIDTH:
        return f"{left}\n{' ' * WIDTH}{text}"
    return f"{left:<{WIDTH}}{text}"


def field_lines(cls: type, prefix: str = "", values: Mapping[str, Any] | None = None) -> list[str]:
    """One line per field of dataclass `cls`: `prefix.key=default  help [constraint]`.

    `values` replaces the dataclass defaults shown (a preset's or the root config's values).
    """
    from roborl.core.compose import field_defaults

    defaults = {**field_defaults(cls), **dict(values or {})}
    lines = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = f.metadata or {}
        text = str(meta.get("help", ""))
        constraint = _constraint(meta)
        if constraint:
            text = f"{text} [{constraint}]" if text else f"[{constraint}]"
        lines.append(key_line(f"{prefix}{f.name}", defaults.get(f.name), text))
    return lines


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""


def summary_of(fn: Callable[..., Any]) -> str:
    """A plugin command's one-line summary: its `summary` attribute, else its docstring's first
    line, else the first line of its module's docstring."""
    import sys

    text = getattr(fn, "summary", None) or first_line(getattr(fn, "__doc__", None))
    if not text:
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        text = first_line(getattr(module, "__doc__", None))
    return text or "(no summary: give the command a docstring)"


def section(title: str, lines: Iterable[str]) -> str:
    body = "\n".join(lines)
    return f"{title}:\n{body}\n" if body else ""
