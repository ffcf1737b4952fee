"""Config schema and validation: typed dataclasses checked before anything runs.

Each algorithm declares a `Config` dataclass; the runner has `RunConfig`. Fields may carry
``metadata={"range": (lo, hi), "choices": [...], "help": "..."}``, and ``"torch_device": True``
for a torch device this machine must have. `build_config` turns a Hydra/OmegaConf mapping into
an instance and fails with a message that names the key, the bad value and what would be
accepted.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints

from roborl.core.errors import ConfigError, did_you_mean

T = TypeVar("T")


def rng(lo: float | None, hi: float | None, help: str = "", **kw: Any) -> dict[str, Any]:
    """Field metadata for an inclusive numeric range (None = unbounded)."""
    return {"range": (lo, hi), "help": help, **kw}


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check `value` against the annotation `tp`; allow int -> float, reject bool -> number."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:  # `X | None`: X's own message (e.g. "nan is not allowed")
            return _coerce(key, value, others[0])
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            f"{key}={value!r} has the wrong type: expected "
            f"{' or '.join(_describe(a) for a in args)}."
        )
    if origin in (list, tuple):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ConfigError(f"{key}={value!r} has the wrong type: expected a list.")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(f"{key}[{i}]", v, item_tp) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}={value!r} has the wrong type: expected a mapping.")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r} has the wrong type: expected true or false.")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}={value!r} has the wrong type: expected an integer.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}={value!r} has the wrong type: expected a number.")
        value = float(value)
        if math.isnan(value):
            raise ConfigError(f"{key}=nan is not allowed: expected a finite number.")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}={value!r} has the wrong type: expected a string.")
        return value
    return value


def device_choices() -> list[str]:
    """The torch devices this machine can run on: cpu, and cuda / cuda:N / mps when present."""
    import torch

    out = ["cpu"]
    if torch.cuda.is_available():
        out += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def check_device(key: str, value: str) -> None:
    """Raise ConfigError unless `value` names a torch device this machine has.

    Why here: `device=gpu` otherwise ends in torch's RuntimeError and `device=cuda` on a
    CPU-only machine in an AssertionError, both deep inside the first network built.
    """
    import torch

    accepted = device_choices()
    listed = ", ".join(accepted)
    try:
        dev = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        hint = " (torch calls a GPU 'cuda')" if value.lower().startswith("gpu") else ""
        close = "" if hint else did_you_mean(value, accepted)
        raise ConfigError(
            f"{key}={value!r} is not a torch device{hint}.{close} Accepted here: {listed}."
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch build has no CUDA support"
                if torch.version.cuda is None
                else "no CUDA GPU is visible here"
            )
            raise ConfigError(
                f"{key}={value!r} is not available: {why} "
                f"(torch.cuda.is_available() is False). Accepted here: {listed}; give "
                f"{key}=cpu to run on the CPU."
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(
                f"{key}={value!r} is not available: this machine has {count} CUDA device(s) "
                f"(cuda:0 to cuda:{count - 1}). Accepted here: {listed}."
            )
    elif dev.type == "mps":
        if "mps" not in accepted:
            raise ConfigError(
                f"{key}={value!r} is not available: torch.backends.mps.is_available() is "
                f"False. Accepted here: {listed}."
            )
    elif dev.type != "cpu":
        raise ConfigError(
            f"{key}={value!r} is not a device roborl trains on. Accepted here: {listed}."
        )


def _check_range(key: str, value: Any, meta: Mapping[str, Any]) -> None:
    if value is None:
        return
    if meta.get("torch_device") and isinstance(value, str):
        check_device(key, value)
    if "choices" in meta and value not in meta["choices"]:
        choices = ", ".join(map(str, meta["choices"]))
        raise ConfigError(f"{key}={value!r} is not accepted: expected one of {choices}.")
    if "range" not in meta:
        return
    lo, hi = meta["range"]
    lo_s, hi_s = ("-inf" if lo is None else lo), ("inf" if hi is None else hi)
    if isinstance(value, (list, tuple)):  # a list field's range holds for each entry
        bad = [v for v in value if isinstance(v, (int, float)) and not _within(v, lo, hi)]
        if bad:
            raise ConfigError(
                f"{key}={list(value)!r} is out of range: expected {lo_s} <= each entry <= "
                f"{hi_s}, got {bad[0]!r}."
            )
    elif isinstance(value, (int, float)) and not _within(value, lo, hi):
        raise ConfigError(f"{key}={value!r} is out of range: expected {lo_s} <= {key} <= {hi_s}.")


def _within(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def build_config(cls: type[T], values: Mapping[str, Any] | None, prefix: str = "") -> T:
    """Validate `values` against dataclass `cls` and return an instance.

    Unknown keys are errors (with a did-you-mean), so a typo never silently falls back to a
    default.
    """
    values = dict(values or {})
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        full = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(
                f"unknown config key {full!r}.{did_you_mean(key, fields)} "
                f"Accepted keys: {', '.join(sorted(fields))}."
            )
        f = fields[key]
        coerced = _coerce(full, value, hints[key])
        _check_range(full, coerced, f.metadata)
        kwargs[key] = coerced
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {prefix.rstrip('.') or cls.__name__} config: {exc}") from None


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


@dataclass(frozen=True)
class RunConfig:
    """Settings of the runner shared by every algorithm (top level of the Hydra config).

    Frozen: loops and algorithms read it through `TrainContext.run` and never change it.
    Budgets: `total_steps` counts env steps (every loop that steps an env), `total_updates`
    counts gradient updates of the offline loop; an offline-to-online method (WSRL) takes its
    pre-training length in updates from its own config and its online budget from
    `total_steps`.
    """

    seed: int = field(default=0, metadata=rng(0, None, "seeds envs, networks and sampling"))
    total_steps: int = field(default=15_000, metadata=rng(1, None, "env steps in total"))
    total_updates: int = field(
        default=10_000,
        metadata=rng(1, None, "gradient updates in total (offline loop: algo=iql, bc, ...)"),
    )
    num_envs: int = field(default=1, metadata=rng(1, 1024, "parallel envs of the vector env"))
    vector_mode: str = field(
        default="sync",
        metadata={"choices": ["sync", "async"], "help": "async: one process per env"},
    )
    learning_starts: int = field(default=1_000, metadata=rng(0, None, "random-action steps"))
    utd_ratio: float = field(default=1.0, metadata=rng(0.0, 1024.0, "updates per env step"))
    eval_every: int = field(
        default=2_500,
        metadata=rng(
            0, None, "env steps (offline: updates) between evaluations; 0 = no evaluations"
        ),
    )
    eval_episodes: int = field(default=5, metadata=rng(1, 10_000, "episodes per evaluation"))
    checkpoint_every: int = field(
        default=5_000, metadata=rng(1, None, "env steps (offline: updates) between checkpoints")
    )
    log_every: int = field(
        default=1_000, metadata=rng(1, None, "env steps (offline: updates) between train logs")
    )
    device: str = field(
        default="cpu",
        metadata={"torch_device": True, "help": "torch device: cpu, cuda, cuda:1, mps"},
    )
    torch_threads: int = field(default=1, metadata=rng(0, 1024, "0 = torch default"))
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    video_every: int = field(
        default=0,
        metadata=rng(
            0,
            None,
            "record an MP4 of the first evaluation episode at or after every this many env "
            "steps (offline: updates) to <run_dir>/videos; 0 = no videos",
        ),
    )
    dataset: str | None = field(
        default=None, metadata={"help": "offline data: .npz/.hdf5 path or a Minari dataset id"}
    )
    pretrained: str | None = field(
        default=None,
        metadata={"help": "checkpoint to start from; only algorithms with accepts_pretrained"},
    )
    buffer_device: str | None = field(
        default=None,
        metadata={"torch_device": True, "help": "replay buffer device (null: the training device)"},
    )
    collector: str = field(
        default="vector",
        metadata={
            "help": "where the off-policy loop's experience comes from: vector (in-process "
            "vector env), ray (Ray rollout workers), or a plugin's (roborl_collectors)"
        },
    )
    distributed: str | None = field(
        default=None, metadata={"help": "alias of collector=, kept for distributed=ray"}
    )
    demos: str | None = field(
        default=None,
        metadata={
            "help": "demonstrations (.npz/.hdf5 path or Minari id, e.g. from `roborl demos "
            "record`) sampled beside online data by the off-policy loop (RLPD)"
        },
    )
    demo_fraction: float = field(
        default=0.5,
        metadata=rng(0.0, 1.0, "share of each batch drawn from demos= (round(batch*fraction))"),
    )
    demo_pretrain_updates: int = field(
        default=0,
        metadata=rng(
            0, None, "updates on batches of demos= alone before the first env step (offline "
            "pretraining; 0: none, as RLPD); with it, lower learning_starts so the pretrained "
            "policy acts instead of random actions",
        ),
    )  # fmt: skip
    reward: str | dict[str, Any] | None = field(
        default=None,
        metadata={
            "help": "a learned reward model (roborl_rewards), e.g. reward=classifier "
            "reward.path=DIR reward.threshold=0.5 reward.terminate_on_success=true"
        },
    )
    her: str | dict[str, Any] | None = field(
        default=None,
        metadata={
            "help": "Hindsight Experience Replay for goal envs (off-policy loop), e.g. "
            "her=future her.n_sampled_goal=4; strategies future, final, episode "
            "(roborl.core.buffer_her)"
        },
    )

    def __post_init__(self) -> None:
        if self.distributed and self.collector not in ("vector", self.distributed):
            raise ConfigError(
                f"distributed={self.distributed} and collector={self.collector} disagree; "
                "give collector= only (distributed= is its older spelling)."
            )

    @property
    def collector_name(self) -> str:
        """`collector`, or the older spelling `distributed=ray` when that is given."""
        return self.distributed or self.collector


@dataclass
class OffPolicyConfig:
    """What the off-policy loop needs from any replay-based algorithm's config.

    Algorithms that learn from a replay buffer (SAC, DSAC-T, SAC-Lagrangian, WSRL online, ...)
    subclass this instead of re-declaring the fields, so the loop reads them as typed
    attributes rather than probing with silent defaults.
    """

    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0, "discount factor"))
    batch_size: int = field(default=256, metadata=rng(1, None, "transitions per gradient update"))
    buffer_size: int = field(
        default=1_000_000, metadata=rng(1, None, "replay capacity (capped at total_steps)")
    )
    n_step: int = field(default=1, metadata=rng(1, 100, "n-step return horizon"))
    n_step_stops_at_person: bool = field(
        default=False,
        metadata={
            "help": "an n-step return stops before a step a person took over (the "
            "`intervened` rows): their rewards came from the person's actions, not the policy's"
        },
    )
