"""Where the run's metrics go: metrics.jsonl, the configured loggers and the `roborl_metrics` hook.

One record is written once and fanned out from here, so metrics.jsonl (always written), wandb,
tensorboard and a plugin's hook all see the same values at the same step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Logger
from roborl.core.run_dir import MetricsWriter
from roborl.core.secrets import redact

if TYPE_CHECKING:
    from roborl.core.plugins import PluginHost


def logger_options(section: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The loggers a `logger` config section selects, as (name, options) pairs.

    `logger=[wandb,tensorboard]` composes each option under its own name
    (`{"wandb": {...}, "tensorboard": {...}}`); `logger=jsonl` composes to `{}` (metrics.jsonl
    only, which is always written). Configs saved before several loggers were possible hold
    one logger as `{"name": "wandb", ...options}` and still load.
    """
    section = dict(section or {})
    if "name" in section and not isinstance(section["name"], Mapping):
        name = section.pop("name")
        return [] if name in ("jsonl", "none", None) else [(str(name), section)]
    out = []
    for name, options in section.items():
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(
                f"logger.{name}={options!r}: each selected logger's options are a mapping "
                "(select loggers with logger=NAME or logger=[wandb,tensorboard])."
            )
        if name not in ("jsonl", "none"):
            out.append((str(name), dict(options or {})))
    return out


class RunLog:
    """metrics.jsonl plus the loggers `logger=` selects, opened when the run starts."""

    def __init__(self, host: PluginHost, run_dir: Path) -> None:
        self._host = host
        self._run_dir = run_dir
        self._metrics: MetricsWriter | None = None
        self._loggers: list[Logger] = []

    def open_metrics(self) -> None:
        self._metrics = MetricsWriter(self._run_dir)

    def open_loggers(self, cfg: Mapping[str, Any]) -> None:
        for name, options in logger_options(cfg.get("logger")):
            cls = self._host.registry.get("loggers", name)
            self._loggers.append(cls(str(self._run_dir), redact(cfg), **options))

    def write(self, step: int, updates: int, logger_step: int, metrics: Mapping[str, Any]) -> None:
        """One metrics.jsonl record at env step `step`; the loggers get it at `logger_step`
        (the schedule's clock), the `roborl_metrics` hook at `step`."""
        if self._metrics is None:
            raise RuntimeError("TrainContext.log before the run started")
        record = self._metrics.write(step, {"updates": updates, **metrics})
        record.pop("step")
        for logger in self._loggers:
            logger.log(record, logger_step)
        self._host.pm.hook.roborl_metrics(step=step, metrics=record)

    def video(self, key: str, path: str, step: int) -> None:
        """Hand a finished video to the loggers that show videos."""
        for logger in self._loggers:
            logger.log_video(key, path, step)

    def reopen_metrics(self) -> None:
        """metrics.jsonl was replaced (a resume truncated it): write to the new file."""
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = MetricsWriter(self._run_dir)

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        for logger in self._loggers:
            with contextlib.suppress(Exception):
                logger.close()
