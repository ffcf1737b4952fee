"""The interfaces every plugin implements: Algorithm, Policy, RobotDriver, Logger.

One protocol serves online, offline and offline-to-online methods (DESIGN.md, "Algorithm"):
an algorithm is built from the env's spaces and its validated config, acts, updates from a
batch, saves and loads its state, and hands out a deployable `Policy`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

if TYPE_CHECKING:
    from roborl.core.actor_graph import ActorGraph
    from roborl.core.context import TrainContext


@dataclass
class Batch:
    """A minibatch of transitions as tensors on the training device.

    `terminated` is 1.0 only for true terminal states (not time-limit truncations), so
    bootstrapping stays correct. `discount` is the factor on the bootstrapped value, gamma**m for
    the m steps an n-step sample used (gamma for one-step rows); the off-policy loop's sampler
    sets it on every batch from the algorithm's `gamma`/`n_step`, read once
    (`roborl.core.buffer.Returns`), and replay-based updates take it from here, never from
    their config (`require_discount`). Offline datasets and algorithms that run their own loop
    (IQL, WSRL) leave it None and discount with their own `gamma`.
    With Dict observations `obs`/`next_obs` are dicts of tensors (image entries stay uint8,
    the algorithm scales and augments them). `extras` holds per-transition fields the buffer
    was told to keep (e.g. "intervened", "is_demo").
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    terminated: torch.Tensor
    costs: torch.Tensor | None = None
    discount: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    demo_rows: int | None = None
    """When the sampler knows it (`roborl.core.demos.sample_mixed` does): the number of
    trailing rows that are demo rows, exactly those `extras["is_demo"]` marks, so an algorithm
    can split the batch by fixed slices without reading the mask back from the device."""

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def require_discount(self, algo: str) -> torch.Tensor:
        """`discount`, or an error naming `algo`: an update that bootstraps with the batch's
        discount has no second copy of gamma to fall back on."""
        if self.discount is None:
            raise ValueError(
                f"algo={algo} bootstraps with Batch.discount (gamma**n, set by the off-policy "
                "loop's sampler: ReplayBuffer.sample_nstep, roborl.core.demos.sample_mixed "
                "with returns=), but this batch has none; set discount= when building it."
            )
        return self.discount


class Policy(abc.ABC):
    """A deployable policy: observation in, action out, no optimiser or training state."""

    observation_space: gym.Space
    action_space: gym.Space

    @abc.abstractmethod
    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic action(s) for one observation or a batch (leading axis)."""

    def reset(self) -> None:  # noqa: B027 - optional hook, stateless by default
        """Forget any per-episode state (history-conditioned policies override this)."""


class Algorithm(abc.ABC):
    """Base class of every learning algorithm.

    Subclasses set `name`, `Config` (a dataclass whose fields are validated against the Hydra
    config) and `loop`, the name of a training loop registered through the `roborl_loops`
    hook. The built-in loops (`roborl.core.loops`) are:

    - ``"offpolicy"``: a collector (in-process vector env by default, Ray workers with
      ``collector=ray``) fills a replay buffer and the loop calls `update(batch)` `utd_ratio`
      times per env step (SAC, DSAC-T). The config must subclass
      `roborl.core.config.OffPolicyConfig` (the loop reads batch_size, buffer_size, gamma and
      n_step from it).
    - ``"offline"``: batches from `dataset=` for `total_updates` gradient updates, evaluated
      online; `prepare(dataset)` is called once before the first update.
    - ``"own"`` (alias ``"custom"``): the algorithm drives its own loop in `train(ctx)`
      (PPO-style methods, offline-to-online pipelines, wrappers around other libraries).

    Optional capabilities are declared here with their defaults, so neither the runner nor
    the CLI ever probes an algorithm with `getattr`: an algorithm that has the capability
    overrides the attribute or method.
    """

    name: ClassVar[str]
    Config: ClassVar[type]
    loop: ClassVar[str] = "offpolicy"
    checkpoint_free: ClassVar[bool] = False
    """True when the algorithm acts well without training (an LLM policy): `roborl eval` and
    `roborl deploy` may then build it from config alone, without checkpoint=PATH."""
    accepts_pretrained: ClassVar[bool] = False
    """True when the algorithm starts from the run-level `pretrained=CHECKPOINT` (WSRL)."""
    accepts_dict_obs: ClassVar[bool] = False
    """True when the algorithm takes `gym.spaces.Dict` observations (images beside states);
    the host refuses Dict observations for the others (`roborl.core.obs.require_box_obs`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device = "cpu",
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.device = torch.device(device)

    @abc.abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Actions for a batch of observations (leading axis = env index)."""

    def update(self, batch: Batch) -> dict[str, float]:
        """One gradient update; returns scalar metrics named without the `train/` prefix.

        Called by the `offpolicy` and `offline` loops, so every algorithm on those loops
        overrides it; one that brings its own loop (`train(ctx)`) need not."""
        raise NotImplementedError(
            f"algorithm {self.name!r} trains with its own loop (loop={self.loop!r}); it has no "
            "update(batch)"
        )

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: networks, optimisers, temperature."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of `state_dict`."""

    @abc.abstractmethod
    def policy(self) -> Policy:
        """A deployable deterministic policy sharing this algorithm's current weights."""

    def train(self, ctx: TrainContext) -> None:
        """Own training loop, for `loop = "own"` algorithms."""
        raise NotImplementedError(f"algorithm {self.name!r} has loop={self.loop!r}, not own")

    def set_total_updates(self, total_updates: int) -> None:  # noqa: B027 - optional hook
        """Called by the offline loop before `prepare` with the run's `total_updates`, so a
        schedule that spans the run (IQL's cosine learning-rate decay) ends where it does."""

    def prepare(self, dataset: Any) -> Any:
        """Called by the offline loop once, before the first update (and on resume).

        Dataset statistics go here (IQL's reward scale). Return None to train on `dataset`
        as given, or a dataset to train on instead (BC-safe returns its safe subset).
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the algorithm holds outside Python (an inference server, a GPU
        engine); called when a run, `roborl eval` or `roborl deploy` is done with it."""

    def actor_graph(self) -> ActorGraph:
        """The deterministic policy as one torch module of tensor ops, for `roborl export
        format=onnx` (`roborl.core.actor_graph`). An algorithm whose policy is such a function
        overrides this; the default refuses with the reason, so export never guesses."""
        from roborl.core.errors import ConfigError

        raise ConfigError(
            f"algo={self.name} does not describe its policy as a tensor graph "
            "(Algorithm.actor_graph), so it cannot be exported to ONNX; export it without "
            "format=onnx (safetensors) and run it with roborl's torch runtime."
        )


class RobotDriver(abc.ABC):
    """A robot as the runner sees it: connect, read the latest observation, command, stop.

    Drivers never decide safety; the safety layer between policy and driver does.
    """

    @abc.abstractmethod
    def connect(self, timeout_s: float) -> None:
        """Open the connection and wait until the first state arrives."""

    @abc.abstractmethod
    def observation(self) -> tuple[np.ndarray, float]:
        """The latest observation and its age in seconds."""

    @abc.abstractmethod
    def command(self, action: np.ndarray) -> None:
        """Send one command in the controller's joint order."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Command a hold/zero and stop commanding; safe to call repeatedly."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release transports; calls `stop()` first where a driver needs it."""


class Logger(abc.ABC):
    """A metrics sink (the JSONL file is always written by the runner; these are extra)."""

    @abc.abstractmethod
    def __init__(self, run_dir: str, config: Mapping[str, Any], **options: Any) -> None: ...

    @abc.abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_video(self, key: str, path: str, step: int) -> None:  # noqa: B027 - optional
        """An MP4 of evaluation episodes was written to `path` (`video_every=`); loggers
        that show videos (wandb) override this, the others ignore it."""

    def close(self) -> None:  # noqa: B027 - optional
        """Flush and release resources."""
