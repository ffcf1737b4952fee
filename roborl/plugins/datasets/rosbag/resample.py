"""Topic time series -> transitions at the control rate (the rule is in the package docstring).

Why anchored on the commands: a control step is "read the newest observation, send a
command", so the command stream carries the control instants. Ticks t_j = t_0 + j/rate_hz start
at the first command that has every observation topic before it; tick j takes the newest
command sent by t_j + T/2 (T = one period, so jitter of up to half a period either way keeps
each command on its own tick), and the newest state and camera frame received by that
command's send time: the observation it was computed from. A command outside the half-period
window (the commands came slower than rate_hz) is held, and the observation is then read at
t_j itself. Zero-order hold throughout: nothing is interpolated.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from roborl.core.errors import DatasetError
from roborl.plugins.datasets.rosbag.mapping import BagMapping
from roborl.plugins.datasets.rosbag.read import BagData, Series


@dataclass
class Episodes:
    """Transitions of one bag, with each episode's first tick time (bag ns)."""

    data: dict[str, Any]
    starts_ns: list[int]
    intervened: np.ndarray
    dropped_ticks: int


def _latest(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the newest message at or before each time in `at` (-1: none yet)."""
    return np.searchsorted(times, at, side="right") - 1


def _fresh(series: Series, at: np.ndarray, max_age_ns: int) -> tuple[np.ndarray, np.ndarray]:
    idx = _latest(series.times, at)
    ok = idx >= 0
    age = at - series.times[np.maximum(idx, 0)]
    return idx, ok & (age <= max_age_ns)


def resample(bag: BagData, mapping: BagMapping) -> Episodes:
    """The bag's transitions at `mapping.rate_hz`, split into episodes at reset requests and
    at gaps longer than `max_age_s`."""
    period = mapping.period_ns
    max_age = round(mapping.max_age_s * 1e9)
    cmd = bag.command
    lengths = {len(v) for v in cmd.values}
    if len(lengths) != 1:
        raise DatasetError(
            f"{bag.path!r}: commands on {mapping.command_topic!r} have {sorted(lengths)} "
            "values; an action has one fixed size."
        )
    obs_series = [*bag.state.values(), *bag.cameras.values()]
    ready = max(int(s.times[0]) for s in obs_series)
    bounds = np.r_[np.iinfo(np.int64).min, bag.resets, np.iinfo(np.int64).max]
    parts: list[dict[str, Any]] = []
    for lo, hi in itertools.pairwise(bounds):
        inside = np.flatnonzero((cmd.times >= max(lo, ready)) & (cmd.times < hi))
        if len(inside) < 2:
            continue
        first, last = int(cmd.times[inside[0]]), int(cmd.times[inside[-1]])
        n_ticks = int(np.floor((last - first) / period + 0.5)) + 1
        ticks = first + period * np.arange(n_ticks, dtype=np.int64)
        parts.append(_segment(bag, mapping, ticks, (int(inside[0]), int(inside[-1])), max_age))
    return _episodes(parts, mapping)


def _segment(
    bag: BagData, mapping: BagMapping, ticks: np.ndarray, cmds: tuple[int, int], max_age: int
) -> dict[str, Any]:
    """Every tick of one segment: its action, observation, intervention and validity."""
    period = mapping.period_ns
    cmd = bag.command
    ci = np.clip(_latest(cmd.times, ticks + period // 2), *cmds)  # this segment's commands
    sent = cmd.times[ci]
    valid = (ticks - sent) <= max_age
    at = np.where(sent >= ticks - period // 2, sent, ticks)  # when the observation was read
    state_parts = []
    for series in bag.state.values():
        idx, ok = _fresh(series, at, max_age)
        valid &= ok
        state_parts.append(np.stack([series.values[i] for i in np.maximum(idx, 0)]))
    # (ticks, joints, fields) -> field-major: every joint's position, then every velocity
    state = np.stack(state_parts, axis=1).transpose(0, 2, 1).reshape(len(ticks), -1)
    frames = {}
    for key, series in bag.cameras.items():
        idx, ok = _fresh(series, at, max_age)
        valid &= ok
        frames[key] = np.stack([series.values[i] for i in np.maximum(idx, 0)])
    actions = np.stack([cmd.values[i] for i in ci]).astype(np.float32)
    intervened = np.zeros(len(ticks), bool)
    if bag.joy is not None:
        intervened, joy_act = _joy(bag.joy, mapping, at)
        if mapping.joy_action:
            if joy_act.shape[1] != actions.shape[1]:
                raise DatasetError(
                    f"joy_axes={mapping.joy_axes} gives {joy_act.shape[1]} action values, "
                    f"the commands on {mapping.command_topic!r} have {actions.shape[1]}."
                )
            actions[intervened] = joy_act[intervened]
    return {
        "ticks": ticks,
        "valid": valid,
        "state": state.astype(np.float32),
        "frames": frames,
        "actions": actions,
        "intervened": intervened,
    }


def _joy(joy: Series, mapping: BagMapping, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per tick: is a person intervening (a fresh Joy with the dead-man button held, or a
    mapped axis past the deadzone without one), and the Joy's action (axes * scale)."""
    axes_idx = list(mapping.joy_axes or [])
    n_axes = min(len(a) for a, _ in joy.values)
    n_buttons = min(len(b) for _, b in joy.values)
    if axes_idx and max(axes_idx) >= n_axes:
        raise DatasetError(
            f"joy_axes={axes_idx}: the Joy messages on {mapping.joy_topic!r} have {n_axes} axes."
        )
    if mapping.joy_button is not None and mapping.joy_button >= n_buttons:
        raise DatasetError(
            f"joy_button={mapping.joy_button}: the Joy messages on {mapping.joy_topic!r} have "
            f"{n_buttons} buttons."
        )
    idx, fresh = _fresh(joy, at, round(mapping.joy_timeout_s * 1e9))
    axes = np.stack([joy.values[i][0][axes_idx] for i in np.maximum(idx, 0)]).reshape(
        len(at), len(axes_idx)
    )
    moved = np.abs(axes) > mapping.joy_deadzone
    if mapping.joy_button is not None:
        held = np.array([joy.values[i][1][mapping.joy_button] != 0 for i in np.maximum(idx, 0)])
    else:
        held = moved.any(axis=1)
    return fresh & held, (np.where(moved, axes, 0.0) * mapping.joy_scale).astype(np.float32)


def _episodes(parts: list[dict[str, Any]], mapping: BagMapping) -> Episodes:
    """Transitions (tick j -> j + 1, both valid) grouped into runs: one episode per run."""
    kept: list[tuple[dict[str, Any], np.ndarray]] = []
    acts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    kinds: list[np.ndarray] = []
    intervened: list[np.ndarray] = []
    starts: list[int] = []
    dropped = 0
    for seg in parts:
        valid = seg["valid"]
        ok = valid[:-1] & valid[1:]
        dropped += int((~valid).sum())
        rows = np.flatnonzero(ok)
        if rows.size == 0:
            continue
        kept.append((seg, rows))
        acts.append(seg["actions"][rows])
        intervened.append(seg["intervened"][rows])
        # a run ends where the next transition is missing; the segment's last run ends it
        end = np.r_[rows[1:] != rows[:-1] + 1, True]
        kind = np.zeros(rows.size, bool)
        kind[-1] = True  # the segment's own end (reset or end of bag), not a gap
        ends.append(end)
        kinds.append(kind)
        run_first = np.r_[True, end[:-1]]
        starts.extend(int(t) for t in seg["ticks"][rows[run_first]])
    if not acts:
        raise DatasetError(
            "no transitions: no two consecutive control ticks had a fresh state, command "
            f"and camera frame (max_age_s={mapping.max_age_s}, rate_hz={mapping.rate_hz}). "
            "Check rate_hz= and the topics, or raise max_age_s=."
        )
    end = np.concatenate(ends)
    segment_end = np.concatenate(kinds)
    terminal = end & segment_end & (mapping.episode_end == "terminal")
    data: dict[str, Any] = {
        "observations": _obs(kept, 0, mapping),
        "next_observations": _obs(kept, 1, mapping),
        "actions": np.concatenate(acts),
        "rewards": np.full(len(end), mapping.reward, np.float32),
        "terminals": terminal,
        "timeouts": end & ~terminal,
    }
    return Episodes(data, starts, np.concatenate(intervened), dropped)


def _obs(kept: list[tuple[dict[str, Any], np.ndarray]], shift: int, mapping: BagMapping) -> Any:
    """The observations of each kept transition's tick (`shift` 1: of the tick after it)."""
    state = np.concatenate([seg["state"][rows + shift] for seg, rows in kept])
    if not mapping.cameras:
        return state
    out = {mapping.state_key: state}
    for key in mapping.cameras:
        out[key] = np.concatenate([seg["frames"][key][rows + shift] for seg, rows in kept])
    return out
