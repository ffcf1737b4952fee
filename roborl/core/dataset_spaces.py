"""A dataset's observation and action spaces: read from its metadata, and checked against an env.

Why apart from the container: the check runs once per offline run (and for demonstrations)
before any update, comparing what the data holds with what the env will feed the policy; its
errors are the ones a user meets when the dataset and env= do not belong together.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from roborl.core.errors import DatasetError
from roborl.core.spaces import space_from_dict

if TYPE_CHECKING:
    from roborl.core.datasets import OfflineDataset

# Slack for float32 round-off when comparing actions to the env's bounds.
ACTION_BOUND_TOL = 1e-5

log = logging.getLogger("roborl.datasets")


def _check_flat_obs_space(
    dataset: OfflineDataset, observation_space: gym.Space, env_name: str
) -> None:
    obs_shape = tuple(int(d) for d in dataset.observations.shape[1:])
    if isinstance(observation_space, gym.spaces.Box):
        want_obs = tuple(int(d) for d in observation_space.shape)
        ok = obs_shape == want_obs or (
            int(np.prod(obs_shape)) == int(np.prod(want_obs)) and len(want_obs) == 1
        )
    else:
        try:
            flat = int(gym.spaces.flatdim(observation_space))
        except Exception as exc:
            raise DatasetError(
                f"env {env_name!r} has observation space {observation_space}, which flat "
                "offline datasets cannot hold; use an env with a Box observation space."
            ) from exc
        want_obs, ok = (flat,), dataset.obs_dim == flat
    if not ok:
        raise DatasetError(
            f"dataset field 'observations' has per-step shape {obs_shape} but env "
            f"{env_name!r} observes shape {want_obs}; the dataset was recorded on another "
            "task (or observation wrapper). Pick the matching env= or dataset=."
        )


def _check_dict_obs_space(
    dataset: OfflineDataset, observation_space: gym.Space, env_name: str
) -> None:
    """Dict data for a Dict env: the same keys, each with the env's per-step shape."""
    if not dataset.dict_obs:
        raise DatasetError(
            f"dataset field 'observations' is one array of per-step shape "
            f"{dataset.obs_shape}, but env {env_name!r} observes a Dict "
            f"({', '.join(observation_space.spaces)}); record the dataset on this env."
        )
    if not isinstance(observation_space, gym.spaces.Dict):
        raise DatasetError(
            f"dataset field 'observations' is a dict ({', '.join(dataset.observations)}), but "
            f"env {env_name!r} observes one array of shape {observation_space.shape}; pick the "
            "env the dataset was recorded on."
        )
    have, want = set(dataset.observations), set(observation_space.spaces)
    if have != want:
        raise DatasetError(
            f"dataset field 'observations' has keys {sorted(have)} but env {env_name!r} "
            f"observes keys {sorted(want)} (missing {sorted(want - have)}, extra "
            f"{sorted(have - want)}); pick the matching env= or dataset=."
        )
    shapes = dataset.obs_shape
    assert isinstance(shapes, dict)
    for key, sub in observation_space.spaces.items():
        if shapes[key] != tuple(sub.shape):
            raise DatasetError(
                f"dataset field 'observations/{key}' has per-step shape {shapes[key]} but env "
                f"{env_name!r} observes {key!r} with shape {tuple(sub.shape)} (another image "
                "size or task?); pick the matching env= or dataset=."
            )


def check_dataset_spaces(
    dataset: OfflineDataset,
    observation_space: gym.Space,
    action_space: gym.Space,
    env_name: str,
) -> None:
    """Check a dataset against the env it will be evaluated on, before any update runs.

    Why: without it a dataset recorded on another task trains for the whole budget and then
    crashes at the first evaluation with a bare tensor-size error. A mismatch in the
    observation or action dimension raises `DatasetError` naming the field, both shapes and
    the env.

    Actions outside the env's Box bounds are accepted with one warning that gives the
    fraction of transitions out of bounds (and the largest excess). Why not refuse: RIQL's
    corruption protocol (and its official code) leaves corrupted actions unclipped, and many
    D4RL files hold actions a hair beyond +-1; the algorithms squash their own outputs into
    the bounds, so such data is usable, but a user who recorded in other units should know.
    """
    if dataset.dict_obs or isinstance(observation_space, gym.spaces.Dict):
        _check_dict_obs_space(dataset, observation_space, env_name)
    else:
        _check_flat_obs_space(dataset, observation_space, env_name)
    if isinstance(action_space, gym.spaces.Box):
        want_act = tuple(int(d) for d in action_space.shape)
        if dataset.action_dim != int(np.prod(want_act)):
            raise DatasetError(
                f"dataset field 'actions' has per-step shape ({dataset.action_dim},) but env "
                f"{env_name!r} takes actions of shape {want_act}; the dataset was recorded on "
                "another task. Pick the matching env= or dataset=."
            )
        low = np.asarray(action_space.low, np.float64).reshape(1, -1)
        high = np.asarray(action_space.high, np.float64).reshape(1, -1)
        act = dataset.actions.astype(np.float64)
        excess = np.maximum(act - high, low - act)
        outside = (excess > ACTION_BOUND_TOL).any(axis=1)
        if outside.any():
            log.warning(
                "dataset actions: %.2f%% of transitions (%d of %d) lie outside env %r's "
                "action bounds [%s, %s] (largest excess %.3g); training on them as they are "
                "(the policy's own actions stay within the bounds).",
                100.0 * outside.mean(),
                int(outside.sum()),
                len(dataset),
                env_name,
                np.array2string(low[0], precision=3),
                np.array2string(high[0], precision=3),
                float(excess.max()),
            )
    elif isinstance(action_space, gym.spaces.Discrete):
        raise DatasetError(
            f"env {env_name!r} has discrete actions ({action_space}); roborl's offline "
            "algorithms and datasets take continuous (Box) actions."
        )
    else:
        raise DatasetError(
            f"env {env_name!r} has action space {action_space}; offline datasets take Box "
            "actions only."
        )


def box_for(values: np.ndarray) -> gym.spaces.Box:
    """The space of one data column without recorded bounds: 0..255 for uint8 images,
    unbounded float32 otherwise."""
    shape = values.shape[1:]
    if values.dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape=shape, dtype=np.uint8)
    return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)


def space_from_metadata(spec: Any) -> gym.Space | None:
    """A space recorded in metadata: `space_to_dict` form, or older bare low/high lists."""
    if not isinstance(spec, Mapping):
        return None
    if "type" in spec:
        return _as_float32(space_from_dict(dict(spec)))
    if "low" in spec:
        return gym.spaces.Box(
            np.asarray(spec["low"], np.float32), np.asarray(spec["high"], np.float32)
        )
    return None


def _as_float32(space: gym.Space) -> gym.Space:
    """Float Box entries as float32 (the dtype the data is stored in); uint8 images kept."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: _as_float32(v) for k, v in space.spaces.items()})
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32
        )
    return space
