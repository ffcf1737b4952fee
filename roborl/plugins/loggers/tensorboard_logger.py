"""TensorBoard logger: every numeric metric as a scalar, in `<run_dir>/tensorboard/`.

Writer: tensorboardX's `SummaryWriter`. It writes the same event files as
`torch.utils.tensorboard`, but needs only numpy, protobuf and packaging, while torch's writer
imports the whole `tensorboard` package (its web server, grpcio, werkzeug, markdown) just to
write files. Install `tensorboard` only where you want to look at them:
``tensorboard --logdir runs``.

`metrics.jsonl` stays the source of truth: this logger gets the same records at the same steps
and drops only what TensorBoard cannot plot as a scalar (strings, None, lists).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Logger

LOG_SUBDIR = "tensorboard"


class TensorBoardLogger(Logger):
    """Scalars to TensorBoard event files under `<run_dir>/<subdir>`."""

    def __init__(
        self,
        run_dir: str,
        config: Mapping[str, Any],
        subdir: str = LOG_SUBDIR,
        flush_secs: float = 30.0,
    ) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ConfigError(
                'logger=tensorboard needs tensorboardX: pip install "roborl[tensorboard]" '
                "(and tensorboard to view the logs)."
            ) from None
        if flush_secs <= 0:
            raise ConfigError(f"logger.tensorboard.flush_secs={flush_secs!r} must be > 0.")
        self.log_dir = Path(run_dir) / subdir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(logdir=str(self.log_dir), flush_secs=int(max(1, flush_secs)))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            value = float(value)
            if math.isnan(value):
                continue
            self._writer.add_scalar(key, value, global_step=int(step))

    def close(self) -> None:
        self._writer.close()
