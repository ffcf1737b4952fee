"""What a training checkpoint holds, and how an older checkpoint's counters are read back.

`roborl.core.checkpoint` writes and reads the file (atomically, `weights_only`); this module
is its content: the algorithm's state and spaces, the redacted config, and the `runner`
section (counters, RNG states, loop extras) with its `format`. A format-1 checkpoint (before
env steps and gradient updates were counted apart) resumes as before: an offline one with
its steps read as updates, a WSRL one refused with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.config import config_to_dict
from roborl.core.errors import CheckpointError
from roborl.core.interfaces import Algorithm
from roborl.core.run_dir import versions
from roborl.core.secrets import redact
from roborl.core.spaces import space_to_dict

if TYPE_CHECKING:
    from roborl.core.periodic_eval import Evaluations

CHECKPOINT_FORMAT = 2
"""2: `runner.step` counts env steps only and `runner.updates` gradient updates (format 1,
before issue 18, counted offline updates and WSRL pre-training updates as steps)."""


def checkpoint_payload(
    algo_name: str,
    algo_config: Any,
    algo: Algorithm,
    cfg: Mapping[str, Any],
    buffer: ReplayBuffer | None,
    demos: ReplayBuffer | None,
    state: RunState,
    evals: Evaluations,
    elapsed_s: float,
    env_rng: list[Any],
) -> dict[str, Any]:
    """The whole checkpoint: the algorithm, the config, the `runner` section, `buffer` and
    `demo_buffer` (the demos with the interventions a person added) if given."""
    payload = {
        "algo": algo_name,
        "algo_config": redact(config_to_dict(algo_config)),
        "observation_space": space_to_dict(algo.observation_space),
        "action_space": space_to_dict(algo.action_space),
        "state": algo.state_dict(),
        "config": redact(cfg),
        "runner": runner_section(state, evals, elapsed_s, env_rng),
        "versions": versions(),
    }
    if buffer is not None:
        payload["buffer"] = buffer.state_dict()
    if demos is not None:
        payload["demo_buffer"] = demos.state_dict()
    return payload


@dataclass
class RunState:
    """What a resumed run continues from besides the weights: counters, RNGs, loop extras."""

    seed: int
    step: int = 0
    updates: int = 0
    episodes: int = 0
    eval_episodes: int = 0
    elapsed_before: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    np_rng: np.random.Generator = field(init=False)
    torch_gen: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.np_rng = np.random.default_rng(self.seed)
        self.torch_gen = torch.Generator().manual_seed(self.seed)


def runner_section(
    state: RunState, evals: Evaluations, elapsed_s: float, env_rng: list[Any]
) -> dict[str, Any]:
    """The checkpoint's `runner` section: `state`, the evaluation records, env RNG states."""
    last = None if evals.last is None else evals.last["return_mean"]
    return {
        "format": CHECKPOINT_FORMAT,
        "step": state.step,
        "updates": state.updates,
        "episodes": state.episodes,
        "eval_episodes": state.eval_episodes,
        "elapsed_s": elapsed_s,
        "best_eval_return": evals.best_return,
        "last_eval_return": last,
        "torch_rng": torch.get_rng_state(),
        "torch_gen": state.torch_gen.get_state(),
        "np_rng": state.np_rng.bit_generator.state,
        "env_rng": env_rng,
        "extra": state.extra,
    }


def restore_runner(
    state: RunState,
    evals: Evaluations,
    runner: Mapping[str, Any],
    loop: str,
    accepts_pretrained: bool,
) -> None:
    """Put a checkpoint's `runner` section back into `state`, `evals` and torch's global RNG."""
    state.step, state.updates = resumed_counts(runner, loop, accepts_pretrained)
    state.episodes = int(runner["episodes"])
    state.eval_episodes = int(runner.get("eval_episodes", 0))
    state.elapsed_before = float(runner.get("elapsed_s", 0.0))
    evals.best_return = runner.get("best_eval_return")
    last = runner.get("last_eval_return")
    evals.last = None if last is None else {"return_mean": last}
    torch.set_rng_state(runner["torch_rng"])
    state.torch_gen.set_state(runner["torch_gen"])
    state.np_rng.bit_generator.state = runner["np_rng"]
    state.extra = dict(runner.get("extra") or {})


def resumed_counts(
    runner: Mapping[str, Any], loop: str, accepts_pretrained: bool
) -> tuple[int, int]:
    """(env steps, updates) of a checkpoint's `runner` section, format 1 migrated."""
    step, updates = int(runner["step"]), int(runner["updates"])
    if int(runner.get("format", 1)) < CHECKPOINT_FORMAT and loop == "offline":
        step = 0  # format 1 counted offline updates as steps; they are updates
    elif int(runner.get("format", 1)) < CHECKPOINT_FORMAT and accepts_pretrained:
        raise CheckpointError(
            "this checkpoint was written before roborl split env steps from updates "
            "(its step counts pre-training updates too), so its run cannot be resumed "
            "exactly; start a new run from its weights with pretrained=PATH instead."
        )
    return step, updates
