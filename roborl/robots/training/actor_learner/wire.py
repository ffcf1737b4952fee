"""What travels between actor and learner, and the checks every message passes.

Every message is data, never code: transitions and weights are safetensors buffers (a header of
names, dtypes and shapes, then raw bytes; nothing is unpickled), status messages are JSON. A
message that does not match what the receiver expects raises `FrameError` (a `RobotError`)
naming the field and the reason it is dropped: `malformed` (unparsable bytes, unknown kind or
array, bad metadata), `shape` (shapes, dtypes or spaces that disagree with the receiver's
spaces, which come from its own config, never from the peer) or `nonfinite` (NaN/inf in
observations, actions, rewards or episode returns: one such transition poisons every target
computed from the replay buffer). The learner drops and counts such frames and keeps running;
a version skew between the two ends shows as a growing counter and a logged reason.

Messages on the actor -> learner socket are two frames, `[kind, payload]`:

- `status` (JSON): the actor's observation/action spaces, pid, target rate and its metrics
  since the last status (sent about once a second, and first right after it starts, so a
  learner that starts or restarts later learns the spaces from the next one);
- `chunk` (safetensors): consecutive transitions, arrays `obs` (or `obs/<key>` for Dict
  observations), `actions`, `rewards`, `next_obs` (or `next_obs/<key>`), `terminated` and
  `extras/<name>` (e.g. `extras/intervened`); its metadata holds the weights version the
  actor acted with and the episodes that ended in the chunk (return, length).

The learner -> actor socket carries two frames per message, `[kind, payload]`: `weights` (the
policy's tensors, safetensors, metadata `version` = the learner's update count) or `heartbeat`
(JSON, sent every `actor_learner.heartbeat_s` by a thread of the learner, so an actor can tell
a learner that is busy training from one that is gone, and hold the robot after
`actor_learner.learner_timeout_s` of silence).
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
from roborl.core.loops.collectors import STEP_INFO_EXTRAS, Chunk
from roborl.core.obs import Obs

STATUS, CHUNK = b"status", b"chunk"
KINDS = (STATUS, CHUNK)
WEIGHTS, HEARTBEAT = b"weights", b"heartbeat"
LEARNER_KINDS = (WEIGHTS, HEARTBEAT)
SEP = "/"
DROP_REASONS = ("malformed", "shape", "nonfinite", "oversized")
MAX_STATUS_METRICS = 64


class FrameError(RobotError):
    """A received message that must be dropped; `reason` is one of `DROP_REASONS` (the
    counter it goes to)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_guard(fn: Any, what: str, payload: bytes) -> Any:
    """`fn(payload)`, with any failure of the parser turned into a `malformed` FrameError:
    the bytes come from the network, so a parser's panic (pyo3 raises those as
    BaseException), a RecursionError of deeply nested JSON or a MemoryError must never take
    the receiving process down."""
    try:
        return fn(payload)
    except (KeyboardInterrupt, SystemExit):
        raise
    except FrameError:
        raise
    except BaseException as exc:
        why = f"{what}: not parsable ({type(exc).__name__}: {exc})."
        raise FrameError("malformed", why) from None


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
        raise FrameError(
            "malformed", f"actor chunk: array {key!r} is missing (it has {sorted(arrays)[:8]})."
        )
    value = arrays[key]
    if tuple(value.shape) != tuple(shape):
        raise FrameError(
            "shape",
            f"actor chunk: {key!r} has shape {tuple(value.shape)}, expected {tuple(shape)} "
            "(do actor and learner use the same robot config?).",
        )
    if dtype is not None and value.dtype != np.dtype(dtype):
        raise FrameError(
            "shape", f"actor chunk: {key!r} has dtype {value.dtype}, expected {dtype}."
        )
    return value


def _finite(name: str, value: Obs) -> None:
    """Raise a `nonfinite` FrameError if a floating array (or Dict entry) holds NaN/inf."""
    items = value.items() if isinstance(value, dict) else [("", value)]
    for key, array in items:
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            where = f"{name}{SEP}{key}" if key else name
            raise FrameError("nonfinite", f"actor chunk: {where!r} holds NaN or inf.")


def decode_chunk(payload: bytes, obs_space: gym.Space, act_space: gym.Space) -> tuple[Chunk, int]:
    """(chunk, weights version it was collected with), checked against the learner's spaces
    (shapes and dtypes) and for NaN/inf; anything else raises `FrameError`."""

    def parse(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        try:
            return np_load(data), _safetensors_metadata(data)
        except (SafetensorError, ValueError) as exc:
            raise FrameError(
                "malformed", f"actor chunk: not a safetensors buffer ({exc})."
            ) from exc

    arrays, meta = parse_guard(parse, "actor chunk", payload)
    rewards = arrays.get("rewards")
    if rewards is None or rewards.ndim != 1 or rewards.dtype.kind not in "fiub":
        raise FrameError("malformed", "actor chunk: 'rewards' is missing or not a numeric vector.")
    n = len(arrays["rewards"])
    if n == 0:
        raise FrameError("malformed", "actor chunk: no transitions.")
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
    for name in STEP_INFO_EXTRAS:  # only the extras the loop knows (a bool per transition)
        key = f"extras{SEP}{name}"
        if key in arrays:
            chunk.extras[name] = _checked(arrays, key, (n,), np.bool_)
            known.add(key)
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise FrameError("malformed", f"actor chunk: unexpected arrays {unknown[:8]}.")
    try:
        version = int(meta.get("weights_version", "-1"))
        episodes = json.loads(meta.get("episodes", "[]"))
        chunk.episodes = [(float(r), int(length), {}) for r, length in episodes]
    except (ValueError, TypeError, RecursionError) as exc:
        raise FrameError("malformed", f"actor chunk: bad metadata ({exc}).") from exc
    for name in ("obs", "next_obs", "actions", "rewards"):
        _finite(name, getattr(chunk, name))
    if not np.isin(chunk.terminated, (0.0, 1.0)).all():
        raise FrameError("nonfinite", "actor chunk: 'terminated' holds values other than 0/1.")
    if not all(np.isfinite(r) for r, _, _ in chunk.episodes):
        raise FrameError("nonfinite", "actor chunk: an episode return is NaN or inf.")
    return chunk, version


def _safetensors_metadata(payload: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors buffer (the 8-byte little-endian header length,
    then the JSON header)."""
    if len(payload) < 8:
        raise ValueError("buffer shorter than its header")
    size = int.from_bytes(payload[:8], "little")
    if size > len(payload) - 8:
        raise ValueError("header longer than the buffer")
    header = json.loads(payload[8 : 8 + size])
    if not isinstance(header, dict):
        raise ValueError("header is not a mapping")
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError("__metadata__ is not a mapping")
    return {str(k): str(v) for k, v in meta.items()}


# -- status ----------------------------------------------------------------------------------------


def encode_status(status: Mapping[str, Any]) -> bytes:
    return json.dumps(status).encode()


def spaces_record(obs_space: gym.Space, act_space: gym.Space) -> dict[str, Any]:
    """The spaces as a status message carries them (JSON-normalised, so two records compare
    with `==`: no space is ever rebuilt from a peer's description, whose shape could be huge)."""
    from roborl.core.spaces import space_to_dict

    spaces = {"observation": space_to_dict(obs_space), "action": space_to_dict(act_space)}
    return json.loads(json.dumps(spaces))


def decode_status(payload: bytes, spaces: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A status message; with `spaces` (from `spaces_record`), one whose spaces differ raises
    a `shape` FrameError. Metrics keep only finite numbers under short names."""
    status = parse_guard(json.loads, "actor status", payload)
    if not isinstance(status, dict) or not isinstance(status.get("spaces"), dict):
        raise FrameError("malformed", "actor status: expected a JSON object with 'spaces'.")
    if spaces is not None and status["spaces"] != spaces:
        raise FrameError(
            "shape",
            "actor status: the actor's spaces differ from the learner's (another robot "
            f"config?): {str(status['spaces'])[:300]} != {str(dict(spaces))[:300]}.",
        )
    metrics = status.get("metrics")
    clean: dict[str, float] = {}
    if isinstance(metrics, dict):
        for key, value in list(metrics.items())[:MAX_STATUS_METRICS]:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(key, str) and len(key) <= 64 and number and np.isfinite(value):
                clean[key] = float(value)
    status["metrics"] = clean
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
    def parse(data: bytes) -> tuple[dict[str, torch.Tensor], int]:
        try:
            return torch_load(data), int(_safetensors_metadata(data).get("version", ""))
        except (SafetensorError, ValueError) as exc:
            raise FrameError(
                "malformed", f"learner weights: not a versioned safetensors buffer ({exc})."
            ) from exc

    return parse_guard(parse, "learner weights", payload)


def nonfinite_tensors(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of floating tensors holding NaN or inf: weights an actor must not act with (a
    NaN policy output is held by the safety layer at best, and every action after it too)."""
    return [
        k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]


def encode_heartbeat(updates: int) -> bytes:
    return json.dumps({"updates": int(updates)}).encode()


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
