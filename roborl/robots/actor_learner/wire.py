"""What travels between actor and learner, and the checks every message passes.

Every message is data, never code: transitions and weights are safetensors buffers (a header of
names, dtypes and shapes, then raw bytes; nothing is unpickled), status messages are JSON. A
message that does not match what the receiver expects (unknown kind, missing array, wrong
shape or dtype, unparsable bytes) raises `RobotError` naming the field, so a version skew
between the two ends or a stray peer on the port fails loudly instead of corrupting the buffer.

Messages on the actor -> learner socket are two frames, `[kind, payload]`:

- `status` (JSON): the actor's observation/action spaces, pid, target rate and its metrics
  since the last status (sent about once a second, and first right after it starts, so a
  learner that starts or restarts later learns the spaces from the next one);
- `chunk` (safetensors): consecutive transitions, arrays `obs` (or `obs/<key>` for Dict
  observations), `actions`, `rewards`, `next_obs` (or `next_obs/<key>`), `terminated` and
  `extras/<name>` (e.g. `extras/intervened`); its metadata holds the weights version the
  actor acted with and the episodes that ended in the chunk (return, length).

The learner -> actor socket carries one frame per message: the policy weights (safetensors,
metadata `version` = the learner's update count).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save

from roborl.core.errors import RobotError
from roborl.core.loops.collectors import Chunk
from roborl.core.obs import Obs

STATUS, CHUNK = b"status", b"chunk"
KINDS = (STATUS, CHUNK)
SEP = "/"


# -- transitions ---------------------------------------------------------------------------------


def _put_obs(out: dict[str, np.ndarray], name: str, obs: Obs) -> None:
    if isinstance(obs, dict):
        for key, value in obs.items():
            out[f"{name}{SEP}{key}"] = np.ascontiguousarray(value)
    else:
        out[name] = np.ascontiguousarray(obs)


def encode_chunk(chunk: Chunk, weights_version: int) -> bytes:
    """A chunk of transitions as one safetensors buffer."""
    arrays: dict[str, np.ndarray] = {}
    _put_obs(arrays, "obs", chunk.obs)
    _put_obs(arrays, "next_obs", chunk.next_obs)
    arrays["actions"] = np.ascontiguousarray(chunk.actions)
    arrays["rewards"] = np.ascontiguousarray(chunk.rewards, np.float32)
    arrays["terminated"] = np.ascontiguousarray(chunk.terminated, np.float32)
    for key, value in chunk.extras.items():
        arrays[f"extras{SEP}{key}"] = np.ascontiguousarray(value)
    episodes = [[float(r), int(n)] for r, n, _ in chunk.episodes]
    meta = {"weights_version": str(int(weights_version)), "episodes": json.dumps(episodes)}
    return np_save(arrays, metadata=meta)


def _get_obs(arrays: dict[str, np.ndarray], name: str, space: gym.Space, n: int) -> Obs:
    if isinstance(space, gym.spaces.Dict):
        out = {}
        for key, sub in space.spaces.items():
            out[key] = _checked(arrays, f"{name}{SEP}{key}", (n, *sub.shape), sub.dtype)
        return out
    return _checked(arrays, name, (n, *space.shape), space.dtype)


def _checked(arrays: dict[str, np.ndarray], key: str, shape: tuple, dtype: Any) -> np.ndarray:
    if key not in arrays:
        raise RobotError(f"actor chunk: array {key!r} is missing (it has {sorted(arrays)}).")
    value = arrays[key]
    if tuple(value.shape) != tuple(shape):
        raise RobotError(
            f"actor chunk: {key!r} has shape {tuple(value.shape)}, expected {tuple(shape)} "
            "(do actor and learner use the same robot config?)."
        )
    if dtype is not None and value.dtype != np.dtype(dtype):
        raise RobotError(f"actor chunk: {key!r} has dtype {value.dtype}, expected {dtype}.")
    return value


def decode_chunk(payload: bytes, obs_space: gym.Space, act_space: gym.Space) -> tuple[Chunk, int]:
    """(chunk, weights version it was collected with), checked against the learner's spaces."""
    try:
        arrays = np_load(payload)
        meta = _safetensors_metadata(payload)
    except (SafetensorError, ValueError) as exc:
        raise RobotError(f"actor chunk: not a safetensors buffer ({exc}).") from exc
    if "rewards" not in arrays or arrays["rewards"].ndim != 1:
        raise RobotError("actor chunk: 'rewards' is missing or not a vector.")
    n = len(arrays["rewards"])
    known = {"rewards"}
    chunk = Chunk(
        _get_obs(arrays, "obs", obs_space, n),
        _checked(arrays, "actions", (n, *act_space.shape), act_space.dtype),
        arrays["rewards"].astype(np.float32, copy=False),
        _get_obs(arrays, "next_obs", obs_space, n),
        _checked(arrays, "terminated", (n,), np.float32),
    )
    known |= {"actions", "terminated"}
    known |= {k for k in arrays if k.split(SEP)[0] in ("obs", "next_obs")}
    for key in arrays:
        if key.startswith(f"extras{SEP}"):
            chunk.extras[key.split(SEP, 1)[1]] = _checked(arrays, key, (n,), None)
            known.add(key)
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise RobotError(f"actor chunk: unexpected arrays {unknown}.")
    try:
        version = int(meta.get("weights_version", "-1"))
        episodes = json.loads(meta.get("episodes", "[]"))
        chunk.episodes = [(float(r), int(length), {}) for r, length in episodes]
    except (ValueError, TypeError) as exc:
        raise RobotError(f"actor chunk: bad metadata {meta!r} ({exc}).") from exc
    return chunk, version


def _safetensors_metadata(payload: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors buffer (the 8-byte little-endian header length,
    then the JSON header)."""
    if len(payload) < 8:
        raise ValueError("buffer shorter than its header")
    size = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8 : 8 + size])
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not a mapping")
    return {str(k): str(v) for k, v in meta.items()}


# -- status ----------------------------------------------------------------------------------------


def encode_status(status: Mapping[str, Any]) -> bytes:
    return json.dumps(status).encode()


def decode_status(payload: bytes) -> dict[str, Any]:
    try:
        status = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RobotError(f"actor status: not JSON ({exc}).") from exc
    if not isinstance(status, dict) or not isinstance(status.get("spaces"), dict):
        raise RobotError("actor status: expected a JSON object with 'spaces'.")
    return status


# -- weights ---------------------------------------------------------------------------------------


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, Mapping) and "param_groups" in value and "state" in value


def policy_tensors(state: Mapping[str, Any], prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of an algorithm's `state_dict()` except optimiser states, by path
    (`actor/net.0.weight`): what the actor needs to act, a third of a SAC checkpoint."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        path = f"{prefix}{key}"
        if torch.is_tensor(value):
            out[path] = value
        elif isinstance(value, Mapping) and not _is_optimizer_state(value):
            out.update(policy_tensors(value, f"{path}{SEP}"))
    return out


def encode_weights(state: Mapping[str, Any], version: int) -> bytes:
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in policy_tensors(state).items()}
    return torch_save(tensors, metadata={"version": str(int(version))})


def decode_weights(payload: bytes) -> tuple[dict[str, torch.Tensor], int]:
    try:
        tensors = torch_load(payload)
        version = int(_safetensors_metadata(payload).get("version", ""))
    except (SafetensorError, ValueError) as exc:
        raise RobotError(f"learner weights: not a versioned safetensors buffer ({exc}).") from exc
    return tensors, version


def merged_state(template: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> dict:
    """`template` (the actor's own state dict) with its policy tensors replaced by `tensors`,
    after checking that names, shapes and dtypes match one to one."""
    expected = policy_tensors(template)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise RobotError(
            f"learner weights do not fit the actor's algorithm: missing {missing[:5]}, "
            f"unexpected {extra[:5]} (same algo config on both ends?)."
        )
    for key, value in expected.items():
        got = tensors[key]
        if got.shape != value.shape or got.dtype != value.dtype:
            raise RobotError(
                f"learner weights: {key!r} is {got.dtype}{tuple(got.shape)}, the actor's is "
                f"{value.dtype}{tuple(value.shape)}."
            )

    def merge(state: Mapping[str, Any], prefix: str) -> dict:
        out = {}
        for key, value in state.items():
            path = f"{prefix}{key}"
            if torch.is_tensor(value):
                out[key] = tensors[path]
            elif isinstance(value, Mapping) and not _is_optimizer_state(value):
                out[key] = merge(value, f"{path}{SEP}")
            else:
                out[key] = value
        return out

    return merge(template, "")
