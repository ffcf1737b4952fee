"""Logger plugins: Weights & Biases and TensorBoard (metrics.jsonl is always written by the
runner). `logger=[wandb,tensorboard]` runs several at once."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl
from roborl.plugins.loggers.tensorboard_logger import TensorBoardLogger
from roborl.plugins.loggers.wandb_logger import WandbLogger


@hookimpl
def roborl_loggers() -> dict[str, type]:
    return {"wandb": WandbLogger, "tensorboard": TensorBoardLogger}
