"""Observations that are an array or a dict of arrays (state vectors beside camera images).

A `gym.spaces.Dict` observation (e.g. ``{"image": uint8 (H, W, 3), "state": float32 (n,)}``)
reaches roborl as a dict of arrays, with a leading batch/env axis once vectorised. These
helpers do what every collector, buffer, algorithm and policy needs on such values, so nobody
writes it twice:

- `is_image_space` / `image_keys`: which entries are camera frames (uint8 Box of rank 3
  ``(H, W, C)``, or rank 4 ``(k, H, W, C)`` when frame-stacked);
- `to_torch`: an observation to tensors on a device, image entries kept uint8 (the algorithm
  scales and augments them; four times less host-to-device traffic than float32);
- `index_obs`, `concat_obs`, `stack_obs`, `obs_len`, `copy_obs`: array operations applied per key;
- `flatten_dict_space` / `flatten_dict_obs`: a nested Dict (gym-hil's ``{"pixels": {"front":
  ...}, "agent_pos": ...}``) as the flat Dict everything else handles, keys joined with
  `KEY_SEP` (``"pixels/front"``); `roborl.core.envs.FlattenDictObservation` applies them to
  every env roborl builds;
- `check_obs_space`: the Dict spaces roborl supports (Box entries only, flat), and
  `require_box_obs`: the one place where an algorithm that takes flat vectors refuses a Dict.

Every function takes a plain array as well and then behaves like the NumPy/torch call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import gymnasium as gym
import numpy as np
import torch

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm

Obs: TypeAlias = "np.ndarray | dict[str, np.ndarray]"
"""One observation or a batch: an array, or a dict of arrays with a common leading axis."""
TensorObs: TypeAlias = "torch.Tensor | dict[str, torch.Tensor]"

PIXEL_ALGORITHMS = (
    "a pixel algorithm of the pixel_sac plugin (`roborl plugins` lists its algo names)"
)
"""Where `require_box_obs` points users with Dict observations."""


def is_image_space(space: gym.Space) -> bool:
    """True for a camera-frame entry: a uint8 Box of shape (H, W, C) or stacked (k, H, W, C)."""
    return (
        isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (3, 4)
    )


def image_keys(space: gym.Space) -> list[str]:
    """The keys of a Dict space whose entries are images (empty for any other space)."""
    if not isinstance(space, gym.spaces.Dict):
        return []
    return [k for k, sub in space.spaces.items() if is_image_space(sub)]


def is_dict_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict)


KEY_SEP = "/"
"""Joins the keys of a nested Dict: ``{"pixels": {"front": ...}}`` -> ``"pixels/front"``.

A slash, not a dot: torch module names cannot contain dots (the pixel encoder keeps one conv
net per image key in an `nn.ModuleDict`), and dm_control already names its observations this
way (``"jaco_arm/joints_pos"``)."""


def is_nested_dict_space(space: gym.Space) -> bool:
    """True for a Dict space with a Dict among its entries."""
    return isinstance(space, gym.spaces.Dict) and any(
        isinstance(sub, gym.spaces.Dict) for sub in space.spaces.values()
    )


def flatten_dict_space(space: gym.spaces.Dict, prefix: str = "") -> gym.spaces.Dict:
    """A nested Dict space as a flat one: inner keys joined to their parents' with `KEY_SEP`,
    in the nested space's (depth-first) order. Leaves are kept as they are (a non-Box leaf is
    still refused later, by `check_obs_space`, with its flat key in the message)."""
    flat: dict[str, gym.Space] = {}
    for key, sub in space.spaces.items():
        name = f"{prefix}{key}"
        inner = (
            flatten_dict_space(sub, name + KEY_SEP).spaces
            if isinstance(sub, gym.spaces.Dict)
            else {name: sub}
        )
        for leaf, leaf_space in inner.items():
            if leaf in flat:  # {"a/b": ..., "a": {"b": ...}}
                raise ConfigError(f"observation key {leaf!r} appears twice once flattened")
            flat[leaf] = leaf_space
    # An explicit order: gymnasium would sort a plain dict's keys, the nesting order is kept.
    return gym.spaces.Dict(list(flat.items()))


def flatten_dict_obs(obs: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict observation with the keys of `flatten_dict_space`."""
    flat: dict[str, Any] = {}
    for key, value in obs.items():
        if isinstance(value, Mapping):
            flat.update(flatten_dict_obs(value, f"{prefix}{key}{KEY_SEP}"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_obs_space(space: gym.Space, what: str = "observation space") -> None:
    """Refuse Dict spaces roborl cannot store: nested dicts, non-Box entries, no entries."""
    if not isinstance(space, gym.spaces.Dict):
        return
    if not space.spaces:
        raise ConfigError(f"the {what} is an empty Dict; it needs at least one Box entry")
    if is_nested_dict_space(space):
        raise ConfigError(
            f"the {what} is a nested Dict ({', '.join(space.spaces)}); roborl stores flat Dicts. "
            "Envs built from config (env=, env.id=) are flattened for you; wrap an env you "
            "build yourself in roborl.core.envs.FlattenDictObservation (keys become "
            f"'outer{KEY_SEP}inner')"
        )
    for key, sub in space.spaces.items():
        if not isinstance(sub, gym.spaces.Box):
            raise ConfigError(
                f"the {what} entry {key!r} is a {type(sub).__name__}; roborl stores Dict "
                "observations whose entries are Box spaces (state vectors, uint8 images) only; "
                "drop or convert that entry (RoborlTabletop: env.kwargs.obs_mode=pixels or "
                "pixels_state)"
            )


def require_box_obs(space: gym.Space, algo_name: str) -> None:
    """The one refusal of Dict observations by an algorithm built for flat vectors.

    Called by the host when it builds an algorithm that does not declare
    `Algorithm.accepts_dict_obs`, so SAC, DSAC-T, IQL... fail with this message instead of a
    shape error deep inside a network.
    """
    if isinstance(space, gym.spaces.Dict):
        keys = ", ".join(f"{k} {tuple(s.shape)} {s.dtype}" for k, s in space.spaces.items())
        if image_keys(space):
            fix = (
                f"Use a pixel algorithm that encodes images and states, {PIXEL_ALGORITHMS}, "
                "or an env config with vector observations."
            )
        else:  # state vectors only (Fetch's goals, dm_control's named readings): concatenate
            fix = (
                "Its entries are all vectors: pass +env.concat_obs=true to concatenate them "
                "into one vector (the benchmark presets, e.g. env=fetch_reach, do this)."
            )
        raise ConfigError(
            f"algo={algo_name} takes flat vector observations, but this env's observations "
            f"are a Dict ({keys}). {fix}"
        )


def check_algorithm_obs(algo_cls: type[Algorithm], space: gym.Space) -> None:
    """Refuse a Dict `space` for an algorithm class that does not declare `accepts_dict_obs`
    (an algorithm that does declare it checks the entries it needs itself)."""
    if not algo_cls.accepts_dict_obs:
        require_box_obs(space, algo_cls.name)


def obs_len(obs: Obs) -> int:
    """The leading (batch) length."""
    if isinstance(obs, Mapping):
        return len(next(iter(obs.values())))
    return len(obs)


def index_obs(obs: Obs, idx: Any) -> Obs:
    """`obs[idx]` per key (idx: int, slice, mask or index array)."""
    if isinstance(obs, Mapping):
        return {k: v[idx] for k, v in obs.items()}
    return obs[idx]


def copy_obs(obs: Obs) -> Obs:
    if isinstance(obs, Mapping):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    return np.array(obs, copy=True)


def concat_obs(parts: Sequence[Obs], axis: int = 0) -> Obs:
    """Concatenate batches along `axis` (per key for dicts)."""
    first = parts[0]
    if isinstance(first, Mapping):
        return {k: np.concatenate([p[k] for p in parts], axis=axis) for k in first}
    return np.concatenate([np.asarray(p) for p in parts], axis=axis)


def stack_obs(items: Sequence[Obs], axis: int = 0) -> Obs:
    """Stack single observations into a batch (per key for dicts)."""
    first = items[0]
    if isinstance(first, Mapping):
        return {k: np.stack([np.asarray(it[k]) for it in items], axis=axis) for k in first}
    return np.stack([np.asarray(it) for it in items], axis=axis)


def as_numpy_obs(obs: Any, space: gym.Space) -> Obs:
    """An observation as arrays of the space's dtypes (images stay uint8)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            raise TypeError(f"expected a dict observation with keys {list(space.spaces)}")
        return {k: np.asarray(obs[k], dtype=sub.dtype) for k, sub in space.spaces.items()}
    return np.asarray(obs, dtype=np.float32)


def is_single(obs: Obs, space: gym.Space) -> bool:
    """True when `obs` is one observation of `space` (no batch axis)."""
    if isinstance(space, gym.spaces.Dict):
        key, sub = next(iter(space.spaces.items()))
        return np.ndim(obs[key]) == len(sub.shape)
    return np.ndim(obs) == len(space.shape)


def add_batch_axis(obs: Obs) -> Obs:
    if isinstance(obs, Mapping):
        return {k: np.asarray(v)[None] for k, v in obs.items()}
    return np.asarray(obs)[None]


def to_torch(
    obs: Obs | TensorObs,
    device: str | torch.device,
    float_dtype: torch.dtype = torch.float32,
) -> TensorObs:
    """Tensors on `device`: uint8 entries (images) stay uint8, everything else `float_dtype`.

    Keeping frames uint8 moves a quarter of the bytes; the algorithm converts (and augments)
    on the device.
    """
    if isinstance(obs, Mapping):
        return {k: _tensor(v, device, float_dtype) for k, v in obs.items()}
    return _tensor(obs, device, float_dtype)


def _tensor(x: Any, device: str | torch.device, float_dtype: torch.dtype) -> torch.Tensor:
    if torch.is_tensor(x):
        dtype = torch.uint8 if x.dtype == torch.uint8 else float_dtype
        return x.to(device=device, dtype=dtype)
    arr = np.asarray(x)
    dtype = torch.uint8 if arr.dtype == np.uint8 else float_dtype
    return torch.as_tensor(arr, device=device).to(dtype)


def obs_nbytes(obs: Obs | TensorObs) -> int:
    """Bytes held by an observation batch (memory reports)."""
    if isinstance(obs, Mapping):
        return sum(obs_nbytes(v) for v in obs.values())
    if torch.is_tensor(obs):
        return obs.numel() * obs.element_size()
    return int(np.asarray(obs).nbytes)
