"""D4RL-style transition arrays checked before they become an `OfflineDataset`.

Why apart from the container: every source (NPZ, HDF5, Minari, LeRobotDataset, a recording)
hands over raw arrays that may be missing fields, hold wrong shapes or dtypes, or NaNs; the
checks, the conversions (float32, bool flags, dict observations) and the two derivations real
D4RL files need (`next_observations` from the next row, `timeouts` from continuity) are one
job, done the same way for all of them, with errors that name the source and the field.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from roborl.core.errors import DatasetError
from roborl.core.obs import Obs, index_obs

REQUIRED_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "next_observations",
    "terminals",
    "timeouts",
)
OPTIONAL_FIELDS = ("costs",)
ALL_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
OBS_FIELDS = ("observations", "next_observations")
# roborl's metadata beside the fields in an NPZ file (never a field itself)
META_KEY = "__metadata__"

log = logging.getLogger("roborl.datasets")


def validate_arrays(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`data` (D4RL field names) checked, converted and completed; see
    `OfflineDataset.from_arrays` for what may be missing. `source` names it in errors."""
    data = _group_obs_fields({k: v for k, v in data.items() if v is not None}, source)
    derive_next = "next_observations" not in data and "timeouts" in data
    infer_timeouts = "timeouts" not in data and "next_observations" in data
    if "timeouts" not in data and "next_observations" not in data and "terminals" in data:
        raise DatasetError(
            f"{source}: has neither 'next_observations' nor 'timeouts'; next observations "
            "can be derived from the next row only when timeouts mark where episodes were "
            "cut (as D4RL's qlearning_dataset does). Add one of the two fields."
        )
    if infer_timeouts and "terminals" in data:
        data["timeouts"] = np.zeros(np.shape(data["terminals"]), dtype=bool)
    if derive_next and "observations" in data:
        data["next_observations"] = data["observations"]  # placeholder, derived below
    for name in REQUIRED_FIELDS:
        if name not in data:
            raise DatasetError(
                f"{source}: missing field {name!r}. A D4RL-style dataset needs "
                f"{', '.join(REQUIRED_FIELDS)} (and optionally costs); found "
                f"{', '.join(sorted(k for k in data if k != META_KEY)) or 'nothing'}."
            )
    arrays: dict[str, Any] = {}
    for name in ALL_FIELDS:
        if data.get(name) is None:
            continue
        if name in OBS_FIELDS and isinstance(data[name], Mapping):
            arrays[name] = {k: _as_array(f"{name}/{k}", v, source) for k, v in data[name].items()}
        else:
            arrays[name] = _as_array(name, data[name], source)
    # dict observations are measured against the rewards, so the bad key is the one named
    ref = "rewards" if isinstance(arrays["observations"], Mapping) else "observations"
    first = _first_array(arrays[ref])
    n = first.shape[0] if first.ndim else 0
    if n == 0:
        raise DatasetError(f"{source}: field {ref!r} is empty; need >= 1 transition.")
    for name, arr in named_arrays(arrays):
        if arr.ndim == 0 or arr.shape[0] != n:
            got = arr.shape[0] if arr.ndim else "a scalar"
            raise DatasetError(
                f"{source}: field {name!r} has length {got} but {ref!r} has {n}; "
                "every field needs one entry per transition."
            )
    # shapes
    for name in ("rewards", "terminals", "timeouts", "costs"):
        if name in arrays:
            arr = arrays[name]
            if arr.ndim == 2 and arr.shape[1] == 1:
                arr = arrays[name] = arr[:, 0]
            if arr.ndim != 1:
                raise DatasetError(
                    f"{source}: field {name!r} has shape {arr.shape}; expected ({n},)."
                )
    _check_obs_pair(arrays["observations"], arrays["next_observations"], source)
    act = arrays["actions"]
    if act.ndim == 1:
        act = arrays["actions"] = act[:, None]
    if act.ndim != 2:
        raise DatasetError(
            f"{source}: field 'actions' has shape {act.shape}; expected (N, action_dim)."
        )
    # dtypes and finiteness
    for name in ("observations", "actions", "rewards", "next_observations", "costs"):
        if name not in arrays:
            continue
        if isinstance(arrays[name], Mapping):
            arrays[name] = {
                k: _numeric(f"{name}/{k}", v, n, source, keep_uint8=True)
                for k, v in arrays[name].items()
            }
        else:
            arrays[name] = _numeric(name, arrays[name], n, source)
    for name in ("terminals", "timeouts"):
        arr = arrays[name]
        if arr.dtype != bool:
            if not np.issubdtype(arr.dtype, np.number) or not np.isin(arr, (0, 1)).all():
                raise DatasetError(
                    f"{source}: field {name!r} must hold only 0/1 or booleans; "
                    f"found values such as {np.unique(arr)[:5].tolist()}."
                )
            arrays[name] = arr.astype(bool)
    if infer_timeouts:
        arrays["timeouts"] = _timeouts_from_continuity(arrays, source)
    if derive_next:
        arrays = _derive_next_observations(arrays, source)
    return arrays


def _timeouts_from_continuity(arrays: dict[str, np.ndarray], source: str) -> np.ndarray:
    """Timeouts of a file that has none: a non-terminal row whose next observation differs
    from the next row's observation was cut by a time limit (the last row ends the data)."""
    obs, nxt, term = arrays["observations"], arrays["next_observations"], arrays["terminals"]
    n = len(term)
    timeouts = np.zeros(n, dtype=bool)
    if n > 1:
        gap = rows_differ(index_obs(nxt, slice(0, -1)), index_obs(obs, slice(1, None)))
        timeouts[:-1] = gap & ~term[:-1]
    if timeouts.any():
        log.warning(
            "%s: no 'timeouts' field; %d episode ends inferred where a next observation is "
            "not the next row's observation.",
            source,
            int(timeouts.sum()),
        )
    return timeouts


def _derive_next_observations(arrays: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Next observations from the next row, exactly as D4RL's `qlearning_dataset`.

    Row i gets observations[i + 1] as its next observation. Rows flagged `timeouts` (the last
    step of a time-limited episode, whose true next observation was never recorded) are
    dropped, and so is the file's last row. A terminal row is kept with the next row's
    observation: the value is never bootstrapped from (terminal), as in D4RL. Where a dropped
    timeout row followed, the kept row before it becomes its episode's end and is flagged a
    timeout, so episode boundaries survive the drop.
    """
    term, tout = arrays["terminals"], arrays["timeouts"]
    n = len(term)
    if n < 2:
        raise DatasetError(
            f"{source}: no 'next_observations' and only {n} row; deriving them from the next "
            "row needs >= 2 rows."
        )
    keep = ~tout
    keep[-1] = False
    if not keep.any():
        raise DatasetError(
            f"{source}: no 'next_observations', and every row is a timeout or the last row; "
            "no transition is left once they are derived."
        )
    new_tout = np.zeros(n, dtype=bool)
    new_tout[:-1] = tout[1:] & ~term[:-1]
    out = {k: index_obs(v, keep) for k, v in arrays.items() if k != "next_observations"}
    out["next_observations"] = index_obs(
        index_obs(arrays["observations"], slice(1, None)), keep[:-1]
    )
    out["timeouts"] = new_tout[keep]
    log.warning(
        "%s: no 'next_observations' field; derived from the next row as D4RL's "
        "qlearning_dataset does, dropping the last step of each timed-out episode and the "
        "file's last row (%d of %d rows kept).",
        source,
        int(keep.sum()),
        n,
    )
    return out


def _group_obs_fields(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Flat ``observations/<key>`` entries (NPZ) gathered into dicts per field."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        field_name, sep, key = name.partition("/")
        if sep and field_name in OBS_FIELDS:
            group = out.setdefault(field_name, {})
            if not isinstance(group, dict):
                raise DatasetError(
                    f"{source}: has both a {field_name!r} array and {name!r}; a field is one "
                    "array or a group of per-key arrays, not both."
                )
            group[key] = value
        elif name in out and isinstance(out[name], dict):
            raise DatasetError(
                f"{source}: has both a {name!r} array and {name}/<key> entries; a field is "
                "one array or a group of per-key arrays, not both."
            )
        else:
            out[name] = value
    for name in OBS_FIELDS:
        if isinstance(out.get(name), Mapping) and not out[name]:
            raise DatasetError(f"{source}: field {name!r} is an empty group of observations.")
    return out


def _as_array(name: str, value: Any, source: str) -> np.ndarray:
    if isinstance(value, Mapping):
        raise DatasetError(
            f"{source}: field {name!r} is a dict; only observations and next_observations "
            "may be dicts (one level, arrays inside)."
        )
    try:
        return np.asarray(value)
    except Exception as exc:
        raise DatasetError(f"{source}: field {name!r} is not an array ({exc}).") from exc


def _first_array(obs: Any) -> np.ndarray:
    return next(iter(obs.values())) if isinstance(obs, Mapping) else obs


def named_arrays(arrays: Mapping[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    for name, value in arrays.items():
        if isinstance(value, Mapping):
            for key, arr in value.items():
                yield f"{name}/{key}", arr
        else:
            yield name, value


def _check_obs_pair(obs: Any, nxt: Any, source: str) -> None:
    """observations and next_observations: both arrays or both dicts, same keys and shapes."""
    if isinstance(obs, Mapping) != isinstance(nxt, Mapping):
        kinds = {True: "a dict of arrays", False: "one array"}
        raise DatasetError(
            f"{source}: 'observations' is {kinds[isinstance(obs, Mapping)]} but "
            f"'next_observations' is {kinds[isinstance(nxt, Mapping)]}; they must match."
        )
    if isinstance(obs, Mapping):
        if set(obs) != set(nxt):
            raise DatasetError(
                f"{source}: 'observations' has keys {sorted(obs)} but 'next_observations' "
                f"has {sorted(nxt)}; they must match."
            )
        pairs = [(f"/{k}", obs[k], nxt[k]) for k in obs]
    else:
        pairs = [("", obs, nxt)]
    for suffix, o, x in pairs:
        if o.ndim < 2:
            raise DatasetError(
                f"{source}: field 'observations{suffix}' has shape {o.shape}; expected "
                "(N, obs_dim) or (N, H, W, C)."
            )
        if x.shape != o.shape:
            raise DatasetError(
                f"{source}: field 'next_observations{suffix}' has shape {x.shape} but "
                f"'observations{suffix}' has {o.shape}; they must match."
            )


def _numeric(
    name: str, arr: np.ndarray, n: int, source: str, keep_uint8: bool = False
) -> np.ndarray:
    """Real numbers, finite; float32 except uint8 images of dict observations."""
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise DatasetError(
            f"{source}: field {name!r} has dtype {arr.dtype}; expected real numbers."
        )
    if keep_uint8 and arr.dtype == np.uint8:
        return arr
    arr = arr.astype(np.float32, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = int(np.argwhere(bad.reshape(n, -1).any(axis=1))[0, 0])
        raise DatasetError(
            f"{source}: field {name!r} has {int(bad.sum())} non-finite values "
            f"(NaN/inf), first at transition {idx}; clean or drop those transitions."
        )
    return arr


def rows_differ(a: Obs, b: Obs) -> np.ndarray:
    """Per row: does observation batch `a` differ from `b` (any key, any element)?"""
    if isinstance(a, Mapping):
        out = np.zeros(len(next(iter(a.values()))), dtype=bool)
        for k in a:
            out |= rows_differ(a[k], b[k])
        return out
    n = len(a)
    return np.any(np.asarray(a).reshape(n, -1) != np.asarray(b).reshape(n, -1), axis=1)
