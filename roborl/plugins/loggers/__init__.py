"""Logger plugins: Weights & Biases (metrics.jsonl is always written by the runner)."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.loggers.wandb_logger import WandbLogger


@hookimpl
def roborl_loggers() -> dict[str, type]:
    return {"wandb": WandbLogger}
