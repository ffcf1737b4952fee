"""What travels between actor and learner, and the checks every message passes.

Every message is data, never code: transitions and weights are safetensors buffers (a header of
names, dtypes and shapes, then raw bytes; nothing is unpickled), status messages are JSON. A
message that does not match what the receiver expects raises `FrameError` (a `RobotError`)
naming the field and the reason it is dropped: `malformed` (unparsable bytes, unknown kind or
array, bad metadata), `shape` (shapes, dtypes or spaces that disagree with the receiver's
spaces, which come from its own config, never from the peer) or `nonfinite` (NaN/inf in
observations, actions, rewards or episode returns: one such transition poisons every target
computed from the replay buffer) or `oversized` (a message over the cap, counted over all its
frames, not per frame). The learner drops and counts such frames and keeps running; a version
skew between the two ends shows as a growing counter and a logged reason.

Numbers from the peer are bounded before anything computes with them: an episode return or a
status metric must be a JSON number that is finite as a float64 (an integer too large for a
float is refused, not converted: `float(10**400)` raises), counts and versions are integers
in `[0, MAX_COUNT]` (a weights version may be -1: random actions). Status metrics may not
use the names the learner stamps on each status record (`RESERVED_METRICS`): such a metric
is left out and the reason reported, never merged.

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

import itertools
import json
import re
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
from roborl.robots.training.actor_learner.wire_checks import (
    DROP_REASONS as DROP_REASONS,  # re-exported: callers import the protocol from `wire`
)
from roborl.robots.training.actor_learner.wire_checks import (
    FRAMES as FRAMES,
)
from roborl.robots.training.actor_learner.wire_checks import (
    MAX_COUNT,
    FrameError,
    bounded_count,
    finite_number,
    parse_guard,
)
from roborl.robots.training.actor_learner.wire_checks import (
    recv_message as recv_message,
)

STATUS, CHUNK = b"status", b"chunk"
KINDS = (STATUS, CHUNK)
WEIGHTS, HEARTBEAT = b"weights", b"heartbeat"
LEARNER_KINDS = (WEIGHTS, HEARTBEAT)
SEP = "/"
MAX_STATUS_METRICS = 64
MAX_DIGEST_CHARS = 64
# The fields a status carries besides its metrics, and the names the learner stamps on each
# status record beside them: a metric under one of these would overwrite or clash with them.
STATUS_FIELDS = ("pid", "rate_hz_target", "weights_version", "policy_digest")
RESERVED_METRICS = frozenset((*STATUS_FIELDS, "spaces", "metrics", "step", "updates", "time"))
# Why a status value was left out (see `decode_status`): a bad field, a metric's name, a
# reserved name, a number that is not finite, metrics past `MAX_STATUS_METRICS`.
IGNORED_KINDS = ("field", "name", "reserved", "number", "count")
_METRIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,63}")


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
    version = _chunk_version(meta.get("weights_version", "-1"))
    chunk.episodes = _chunk_episodes(meta.get("episodes", "[]"), n)
    for name in ("obs", "next_obs", "actions", "rewards"):
        _finite(name, getattr(chunk, name))
    if not np.isin(chunk.terminated, (0.0, 1.0)).all():
        raise FrameError("nonfinite", "actor chunk: 'terminated' holds values other than 0/1.")
    return chunk, version


def _chunk_version(text: str) -> int:
    """The weights version a chunk was collected with: -1 (random actions) or a count; a
    larger one would overflow the learner's float policy-lag sum."""
    try:
        version = int(text)
    except ValueError as exc:  # also a number past Python's int-parsing digit limit
        raise FrameError("malformed", f"actor chunk: bad weights_version ({exc}).") from None
    if bounded_count(version, low=-1) is None:
        raise FrameError(
            "malformed",
            f"actor chunk: weights_version {_show(version)} is outside [-1, {MAX_COUNT}].",
        )
    return version


def _chunk_episodes(text: str, n: int) -> list[tuple[float, int, dict]]:
    """The (return, length) of the episodes that ended in a chunk of `n` transitions: at
    most `n` of them, each return a finite float64, each length a count of at least 1."""
    episodes = parse_guard(json.loads, "actor chunk: episodes", text.encode())
    if not isinstance(episodes, list) or len(episodes) > n:
        raise FrameError(
            "malformed", f"actor chunk: 'episodes' is not a list of at most {n} [return, length]."
        )
    out = []
    for item in episodes:
        if not isinstance(item, list) or len(item) != 2:
            raise FrameError("malformed", f"actor chunk: episode {_show(item)} is not a pair.")
        ret, length = finite_number(item[0]), bounded_count(item[1], low=1)
        if ret is None:
            number = isinstance(item[0], (int, float)) and not isinstance(item[0], bool)
            raise FrameError(
                "nonfinite" if number else "malformed",
                f"actor chunk: episode return {_show(item[0])} is not a finite float64.",
            )
        if length is None:
            raise FrameError(
                "malformed",
                f"actor chunk: episode length {_show(item[1])} is not in [1, {MAX_COUNT}].",
            )
        out.append((ret, length, {}))
    return out


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


def decode_status(
    payload: bytes,
    spaces: Mapping[str, Any] | None = None,
    ignored: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A status message; with `spaces` (from `spaces_record`), one whose spaces differ raises
    a `shape` FrameError. Only the known fields come back, each bounded (`STATUS_FIELDS`,
    None when absent or unfit) and `metrics`: finite numbers under plain names that are not
    `RESERVED_METRICS`. Each value left out is appended to `ignored` as (kind, why), kind one
    of `IGNORED_KINDS`, so the receiver can count and log why a value it expected is missing."""
    status = parse_guard(json.loads, "actor status", payload)
    if not isinstance(status, dict) or not isinstance(status.get("spaces"), dict):
        raise FrameError("malformed", "actor status: expected a JSON object with 'spaces'.")
    if spaces is not None and status["spaces"] != spaces:
        raise FrameError(
            "shape",
            "actor status: the actor's spaces differ from the learner's (another robot "
            f"config?): {str(status['spaces'])[:300]} != {str(dict(spaces))[:300]}.",
        )
    notes: list[tuple[str, str]] = []
    clean: dict[str, Any] = {"spaces": status["spaces"]}
    for key, bounded, bounds in (
        ("pid", bounded_count(status.get("pid")), f"an integer in [0, {MAX_COUNT}]"),
        ("rate_hz_target", finite_number(status.get("rate_hz_target")), "a finite float64"),
        (
            "weights_version",
            bounded_count(status.get("weights_version"), low=-1),
            f"an integer in [-1, {MAX_COUNT}]",
        ),
        (
            "policy_digest",
            _short_text(status.get("policy_digest")),
            f"a string of at most {MAX_DIGEST_CHARS} characters",
        ),
    ):
        if bounded is None and status.get(key) is not None:
            notes.append(("field", f"field {key!r} is {_show(status[key])}, not {bounds}"))
        clean[key] = bounded
    metrics = status.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        notes.append(("field", f"field 'metrics' is {_show(metrics)}, not an object"))
    clean["metrics"] = _status_metrics(metrics if isinstance(metrics, dict) else {}, notes)
    if ignored is not None:
        ignored.extend((kind, f"actor status: {why}") for kind, why in notes)
    return clean


def _show(value: Any) -> str:
    """A peer's value, short, for a log line (a container by its type and length only)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'} of {len(value)}"
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return "an integer of more than 4300 digits"
    return text if len(text) <= 32 else f"{text[:24]}... ({len(text)} characters)"


def _short_text(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_DIGEST_CHARS else None


def _status_metrics(metrics: dict[str, Any], notes: list[tuple[str, str]]) -> dict[str, float]:
    """The first `MAX_STATUS_METRICS` metrics that are finite numbers under a plain name
    (letters, digits, `_ . - /`, up to 64 characters) that no record field uses: a metric
    named like a field would clash with it where the learner writes both in one record."""
    clean: dict[str, float] = {}
    if len(metrics) > MAX_STATUS_METRICS:
        extra = len(metrics) - MAX_STATUS_METRICS
        notes.append(("count", f"{extra} metrics past the first {MAX_STATUS_METRICS}"))
    for key, value in itertools.islice(metrics.items(), MAX_STATUS_METRICS):
        number = finite_number(value)
        if not _METRIC_NAME.fullmatch(key):
            notes.append(("name", f"metric {_show(key)} is not a plain name (64 characters)"))
        elif key in RESERVED_METRICS:
            notes.append(("reserved", f"metric {key!r} has a reserved name (a record field)"))
        elif number is None:
            notes.append(("number", f"metric {key!r} is {_show(value)}, not a finite float64"))
        else:
            clean[key] = number
    return clean


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
