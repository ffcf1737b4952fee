"""Shareable policy folders: safetensors weights and JSON, loaded without unpickling anything.

A checkpoint (`checkpoints/last.pt`) is a torch pickle: `weights_only=True` limits what it can
build, but it is still an unpickler run on someone else's file, and it carries optimiser state,
RNG states and the replay buffer. `roborl export` writes a folder meant to be shared instead:

- ``model.safetensors``: every tensor of the algorithm's state (safetensors is a JSON header plus
  raw buffers, so reading it runs no code);
- ``config.json``: the algorithm's name and config, the observation and action spaces, the
  run's config (env, seed, ...), where it came from, library versions, and the state's
  *layout*: the algorithm's nested `state_dict()` with each tensor replaced by its name in
  ``model.safetensors`` and plain values (counters, strings) kept as JSON;
- ``README.md``: the model card (written by the export plugin).

Training-only parts are left out: optimiser states (a mapping with ``state`` and
``param_groups``, as every `torch.optim` optimiser writes) are marked ``{"$fresh": ...}`` and
taken from the freshly built algorithm on load, so algorithms whose `load_state_dict` expects
them still load; replay buffers kept inside an algorithm's state (SB3's ``replay_buffer``) are
dropped. `algorithm_from_model_dir` is the one loader that `roborl eval model=DIR` and
`roborl deploy model=DIR` use.

A folder (or a checkpoint) is data, not configuration: `roborl.core.saved_data` decides which
of its values are used (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.saved_data import (
    LocalSettings,
    current_settings,
    local_algo_config,
    warn_robot_differences,
)

FORMAT = "roborl-model"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
DROPPED_KEYS = ("replay_buffer",)
"""State keys left out of an export: experience, not policy (SB3 keeps its buffer there)."""
log = logging.getLogger("roborl.model")


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError:
        raise ConfigError(
            "model folders need safetensors: pip install safetensors (roborl depends on it)."
        ) from None
    return safetensors


def is_model_dir(path: str | os.PathLike[str]) -> bool:
    """True for a folder written by `roborl export` (config.json + model.safetensors)."""
    path = Path(path)
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def _to_json(value: Any) -> Any:
    """Plain config data as strict JSON: non-finite floats (a Box's infinite bounds) become
    ``{"$float": "inf"}``, which `_from_json` turns back."""
    if isinstance(value, Mapping):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and "$float" in value:
            return float(value["$float"])
        return {k: _from_json(v) for k, v in value.items()}
    return value


PLAIN_KEYS = ("algo_config", "observation_space", "action_space", "config", "source")
"""config.json entries written with `_to_json` (the `state` layout has its own encoding)."""


def _is_optimizer_state(value: Mapping[Any, Any]) -> bool:
    return set(value.keys()) == {"state", "param_groups"}


def _plain_key(key: Any) -> bool:
    return isinstance(key, str) and not key.startswith("$")


class _Encoder:
    """Nested state -> (JSON layout, {name: tensor}); see the module docstring."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def _name(self, path: list[str]) -> str:
        base = "/".join(path) or "state"
        name, n = base, 1
        while name in self.tensors:
            n += 1
            name = f"{base}#{n}"
        return name

    def encode(self, value: Any, path: list[str]) -> Any:
        where = "/".join(path) or "(top level)"
        if isinstance(value, torch.Tensor):
            name = self._name(path)
            self.tensors[name] = value.detach().to("cpu").contiguous().clone()
            return {"$tensor": name}
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                raise CheckpointError(f"state entry {where!r} is an object array; cannot export.")
            name = self._name(path)
            self.tensors[name] = torch.from_numpy(np.ascontiguousarray(value).copy())
            return {"$ndarray": name}
        if isinstance(value, Mapping):
            if _is_optimizer_state(value):
                return {"$fresh": "optimizer state"}
            items = [(k, v) for k, v in value.items() if k not in DROPPED_KEYS]
            if all(_plain_key(k) for k, _ in items):
                return {k: self.encode(v, [*path, k]) for k, v in items}
            pairs = []
            for k, v in items:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise CheckpointError(
                        f"state entry {where!r} has a key of type {type(k).__name__}; only "
                        "string and integer keys can be exported."
                    )
                pairs.append([k, self.encode(v, [*path, str(k)])])
            return {"$dict": pairs}
        if isinstance(value, list):
            return [self.encode(v, [*path, str(i)]) for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {"$tuple": [self.encode(v, [*path, str(i)]) for i, v in enumerate(value)]}
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            return {"$float": repr(value)}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise CheckpointError(
            f"state entry {where!r} is a {type(value).__name__}, which an export cannot hold "
            "(tensors, arrays, numbers, strings, lists and mappings only)."
        )


def _decode(node: Any, tensors: Mapping[str, torch.Tensor], fresh: Any, where: str) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors, None, f"{where}/{i}") for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((tag, value),) = node.items()
        if tag in ("$tensor", "$ndarray"):
            if value not in tensors:
                raise CheckpointError(
                    f"{WEIGHTS_FILE} has no tensor {value!r} (config.json names it at {where!r}); "
                    "the two files do not belong together."
                )
            return tensors[value] if tag == "$tensor" else tensors[value].numpy()
        if tag == "$tuple":
            return tuple(_decode(v, tensors, None, f"{where}/{i}") for i, v in enumerate(value))
        if tag == "$float":
            return float(value)
        if tag == "$dict":
            return {
                k: _decode(
                    v, tensors, fresh.get(k) if isinstance(fresh, Mapping) else None, f"{where}/{k}"
                )
                for k, v in value
            }
        if tag == "$fresh":
            if fresh is None:
                raise CheckpointError(
                    f"config.json asks for a fresh {value} at {where!r}, but the algorithm "
                    "built from it has none there; was it exported by another roborl version?"
                )
            return fresh
    return {
        k: _decode(v, tensors, fresh.get(k) if isinstance(fresh, Mapping) else None, f"{where}/{k}")
        for k, v in node.items()
    }


def save_model_dir(
    out: str | os.PathLike[str],
    *,
    algo: str,
    algo_config: Mapping[str, Any],
    observation_space: Mapping[str, Any],
    action_space: Mapping[str, Any],
    state: Mapping[str, Any],
    config: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
    versions: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``model.safetensors`` and ``config.json`` into `out`; returns config.json's data.

    `observation_space`/`action_space` are `roborl.core.spaces.space_to_dict` dicts and
    `config` is the run's config (the env a policy was trained on). `extra` adds top-level
    JSON entries that describe other files of the folder (``onnx`` for policy.onnx).
    """
    save = _safetensors().torch.save
    encoder = _Encoder()
    layout = encoder.encode(dict(state), [])
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "algo": algo,
        "algo_config": _to_json(algo_config),
        "observation_space": _to_json(observation_space),
        "action_space": _to_json(action_space),
        "state": layout,
        "config": _to_json(config),
        "source": _to_json(source or {}),
        "versions": dict(versions or {}),
        **{k: _to_json(v) for k, v in (extra or {}).items()},
    }
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the run's config cannot be written as JSON: {exc}") from None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "algo": algo}
    atomic_write_bytes(out / WEIGHTS_FILE, save(encoder.tensors, metadata=header))
    atomic_write_json(out / CONFIG_FILE, meta)
    for name in (WEIGHTS_FILE, CONFIG_FILE):  # meant to be shared: readable by all
        (out / name).chmod(0o644)
    return meta


def read_model_config(path: str | os.PathLike[str], needs: str = WEIGHTS_FILE) -> dict[str, Any]:
    """config.json's data, checked, with ``path`` added; `needs` is the file beside it that
    the caller will load (model.safetensors for torch, policy.onnx for onnxruntime)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"model={str(path)!r} is not a folder; give the folder `roborl export` wrote "
            f"(with {CONFIG_FILE} and {needs})."
        )
    missing = [f for f in (CONFIG_FILE, needs) if not (path / f).is_file()]
    if missing:
        hint = (
            " It looks like a run directory: use checkpoint=PATH, or export it first with "
            "roborl export checkpoint=PATH out=DIR."
            if (path / "checkpoints").is_dir()
            else ""
        )
        raise CheckpointError(f"model folder {str(path)!r} has no {' or '.join(missing)}.{hint}")
    try:
        meta = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path / CONFIG_FILE} is not valid JSON ({exc}).") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path / CONFIG_FILE} is not a roborl model config.")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path / CONFIG_FILE} has format_version {meta.get('format_version')!r}; this "
            f"roborl reads version {FORMAT_VERSION}."
        )
    for key in ("algo", "algo_config", "observation_space", "action_space", "state"):
        if key not in meta:
            raise CheckpointError(f"{path / CONFIG_FILE} lacks {key!r}.")
    for key in PLAIN_KEYS:
        if key in meta:
            meta[key] = _from_json(meta[key])
    meta["path"] = str(path)
    return meta


def read_model_dir(path: str | os.PathLike[str], device: str = "cpu") -> dict[str, Any]:
    """config.json's data plus ``tensors`` (name -> tensor) from model.safetensors."""
    safetensors = _safetensors()
    meta = read_model_config(path)
    path = Path(path)
    try:
        meta["tensors"] = safetensors.torch.load_file(str(path / WEIGHTS_FILE), device=device)
    except (safetensors.SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path / WEIGHTS_FILE} could not be read ({exc}); it is truncated or not a "
            "safetensors file."
        ) from None
    return meta


def algorithm_from_model_dir(
    host: Any,
    path: str | os.PathLike[str],
    device: str = "cpu",
    settings: LocalSettings | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Rebuild the exported algorithm (safetensors + JSON only; nothing is unpickled).

    Local-only config fields come from `settings` (default: `current_settings()`), not from
    the folder (`local_algo_config`). Returns the algorithm and config.json's data shaped like
    a checkpoint for its callers (``config``, ``algo``, ``path``, ``runner.step``).
    """
    from roborl.core.algorithms import build_algorithm
    from roborl.core.spaces import space_from_dict

    settings = current_settings(settings)
    meta = read_model_dir(path, device)
    source = f"model folder {str(path)!r}"
    cls = host.registry.get("algorithms", meta["algo"])
    algo_config = local_algo_config(cls, meta["algo_config"], source, settings, path)
    algo_cfg = {"name": meta["algo"], **algo_config}
    obs_space = space_from_dict(meta["observation_space"])
    act_space = space_from_dict(meta["action_space"])
    algo = build_algorithm(host, algo_cfg, obs_space, act_space, device)
    state = _decode(meta["state"], meta.pop("tensors"), algo.state_dict(), "")
    try:
        algo.load_state_dict(state)
    except CheckpointError:
        raise
    except (KeyError, RuntimeError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"model folder {str(path)!r} does not fit algo={meta['algo']} as this roborl "
            f"builds it: {detail}"
        ) from None
    meta.setdefault("config", {})
    meta["runner"] = {"step": (meta.get("source") or {}).get("step")}
    if settings.robot is not None:
        warn_robot_differences((meta["config"] or {}).get("robot"), settings.robot, source)
    return algo, meta
