"""Training the success classifier from labelled frames (`roborl reward train`).

Where labels come from, as in SERL's classifier data (success frames vs the rest):
- a dataset in roborl's format (e.g. from `roborl demos record`): the frame after a step whose
  ``info["success"]`` was true (metadata ``success_rows``; datasets without it: rows that
  terminated with a positive reward) is a positive; the frames after the other steps and each
  episode's first frame are negatives;
- a labelled-frames NPZ: ``frames`` (N, H, W, C) uint8, or ``frames/<camera>`` per camera, and
  ``labels`` (N,) 0/1.

Positives are rare (one per episode when success ends it), so each batch draws half positives
and half negatives. A stratified share of frames (`val_fraction`) is held out and its accuracy
goes into the model's config and card.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from roborl.core.errors import DatasetError
from roborl.plugins.rewards.classifier import (
    SuccessNet,
    default_strides,
    frames_of,
    random_shift,
    save,
)


def load_frames(path: str, keys: Sequence[str] | None = None) -> tuple[Any, np.ndarray, list[str]]:
    """(frames: dict key -> (N, H, W, C) uint8 or one array, labels (N,) bool, camera keys)."""
    p = Path(path)
    if p.suffix == ".npz" and p.exists():
        with np.load(p, allow_pickle=False) as z:
            if "labels" in z.files:
                return _labelled_npz(dict(z.items()), str(p), keys)
    return _from_dataset(path, keys)


def _labelled_npz(
    z: dict[str, np.ndarray], source: str, keys: Sequence[str] | None
) -> tuple[Any, np.ndarray, list[str]]:
    labels = np.asarray(z["labels"])
    if labels.ndim != 1 or not np.isin(labels, (0, 1)).all():
        raise DatasetError(f"{source}: 'labels' must be a 1-D array of 0/1 values.")
    if "frames" in z:
        frames: Any = z["frames"]
        found: list[str] = []
    else:
        found = sorted(k[len("frames/") :] for k in z if k.startswith("frames/"))
        if not found:
            raise DatasetError(
                f"{source}: a labelled-frames file needs 'frames' (N, H, W, C) uint8 or "
                f"'frames/<camera>' arrays beside 'labels'; found {sorted(z)}."
            )
        frames = {k: z[f"frames/{k}"] for k in (keys or found)}
    for name, arr in frames.items() if isinstance(frames, dict) else [("frames", frames)]:
        if arr.dtype != np.uint8 or arr.ndim not in (4, 5) or len(arr) != len(labels):
            raise DatasetError(
                f"{source}: {name!r} must be uint8 frames (N, H, W, C) with N = len(labels) = "
                f"{len(labels)}; got {arr.dtype} {arr.shape}."
            )
    return frames, labels.astype(bool), list(keys or found)


def _load_dataset(path: str) -> Any:
    from roborl.core.plugins import get_host

    for loader in get_host().registry.dataset_sources.values():
        accepts = getattr(loader, "accepts", None)
        if accepts is not None and not accepts(path):
            continue
        return loader(path)
    raise DatasetError(f"no dataset source accepts data={path!r} (.npz/.hdf5 or a Minari id).")


def success_labels(ds: Any) -> np.ndarray:
    """Per-row success: the recorder's ``success_rows``, else terminal rows with reward > 0."""
    rows = ds.metadata.get("success_rows")
    out = np.zeros(len(ds), bool)
    if rows is not None:
        out[np.asarray(rows, int)] = True
        return out
    return np.asarray(ds.terminals, bool) & (np.asarray(ds.rewards) > 0)


def _from_dataset(path: str, keys: Sequence[str] | None) -> tuple[Any, np.ndarray, list[str]]:
    ds = _load_dataset(path)
    obs, nxt = ds.observations, ds.next_observations
    if isinstance(obs, Mapping):
        images = [k for k, v in obs.items() if v.dtype == np.uint8 and v.ndim in (4, 5)]
        chosen = list(keys or images)
        missing = [k for k in chosen if k not in images]
        if missing or not chosen:
            raise DatasetError(
                f"data={path}: no uint8 camera entry {missing or ''} in its observations "
                f"(camera entries: {images or 'none'}; all keys: {sorted(obs)})."
            )
    elif np.asarray(obs).dtype == np.uint8 and np.asarray(obs).ndim in (4, 5):
        chosen = []
    else:
        raise DatasetError(
            f"data={path}: observations are not camera frames (need uint8 (H, W, C) entries)."
        )
    success = success_labels(ds)
    ends = np.asarray(ds.terminals, bool) | np.asarray(ds.timeouts, bool)
    starts = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
    stacked = _stacked(obs, chosen)
    take_next = frames_of(nxt, chosen, stacked)
    take_first = frames_of(_index(obs, starts), chosen, stacked)
    frames = np.concatenate([take_next, take_first])
    labels = np.concatenate([success, np.zeros(len(starts), bool)])
    return frames, labels, chosen


def _index(obs: Any, rows: np.ndarray) -> Any:
    return {k: v[rows] for k, v in obs.items()} if isinstance(obs, Mapping) else obs[rows]


def _stacked(obs: Any, keys: Sequence[str]) -> bool:
    first = obs[keys[0]] if isinstance(obs, Mapping) else obs
    return np.asarray(first).ndim == 5


def train_classifier(
    data: str | Sequence[str],
    out: str,
    keys: Sequence[str] | None = None,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-4,
    val_fraction: float = 0.2,
    augment: bool = True,
    hidden: int = 256,
    seed: int = 0,
    threshold: float = 0.5,
    conv_strides: Sequence[int] | None = None,
    log: Callable[[str], None] = print,
    extra_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Train, evaluate on the held-out frames at `threshold` (the `reward.threshold` the run
    will use), save to `out`; returns the saved config. `conv_strides`: the four convolutions'
    strides (default: `default_strides` of the frame size). `extra_config`: JSON entries saved
    with the model (a hard-negative round records the data it started from)."""
    t0 = time.time()
    paths = [data] if isinstance(data, str) else list(data)
    parts = [load_frames(p, keys) for p in paths]
    cams = parts[0][2]
    frames = np.concatenate([_as_frames(f, cams) for f, _, _ in parts])
    labels = np.concatenate([lab for _, lab, _ in parts])
    pos, neg = np.flatnonzero(labels), np.flatnonzero(~labels)
    if len(pos) < 2 or len(neg) < 2:
        raise DatasetError(
            f"data={paths}: {len(pos)} success and {len(neg)} other frames; the classifier needs "
            "at least 2 of each (record successful demonstrations, e.g. `roborl demos record "
            "successes_only=true`)."
        )
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)

    def split(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.permutation(idx)
        n_val = round(len(idx) * val_fraction) if val_fraction > 0 else 0
        n_val = min(max(n_val, 1 if val_fraction > 0 else 0), len(idx) - 1)
        return idx[n_val:], idx[:n_val]

    (tr_pos, va_pos), (tr_neg, va_neg) = split(pos), split(neg)
    _, h, w, c = frames.shape
    strides = [int(x) for x in (conv_strides or default_strides(h, w))]
    net = SuccessNet(h, w, c, hidden, strides)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    x_all = torch.as_tensor(frames)
    half = max(batch_size // 2, 1)
    for step in range(1, steps + 1):
        i = np.concatenate([rng.choice(tr_pos, half), rng.choice(tr_neg, batch_size - half)])
        x = x_all[torch.as_tensor(i)]
        if augment:
            x = random_shift(x, 4, gen)
        y = torch.as_tensor(labels[i], dtype=torch.float32)
        loss = F.binary_cross_entropy_with_logits(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % max(steps // 5, 1) == 0 or step == steps:
            log(f"step {step}/{steps}: loss {loss.item():.4f}")
    net.eval()
    metrics = {
        "train_positives": len(tr_pos), "train_negatives": len(tr_neg),
        "val_positives": len(va_pos), "val_negatives": len(va_neg),
    }  # fmt: skip
    if len(va_pos) and len(va_neg):
        with torch.no_grad():
            p_pos = torch.sigmoid(net(x_all[torch.as_tensor(va_pos)])).numpy()
            p_neg = torch.sigmoid(net(x_all[torch.as_tensor(va_neg)])).numpy()
        tpr, tnr = float((p_pos >= threshold).mean()), float((p_neg < threshold).mean())
        right = (p_pos >= threshold).sum() + (p_neg < threshold).sum()
        acc = float(right / (len(p_pos) + len(p_neg)))
        metrics.update(val_accuracy=acc, val_tpr=tpr, val_tnr=tnr, val_balanced=(tpr + tnr) / 2)
    shapes = {k: [h, w, c // max(len(cams), 1)] for k in cams} if cams else {"obs": [h, w, c]}
    config = {
        "image_keys": cams, "frame_shapes": shapes, "height": h, "width": w, "channels": c,
        "hidden": hidden, "conv_strides": strides, "data": [str(p) for p in paths], "steps": steps,
        "batch_size": batch_size, "lr": lr, "augment": augment, "seed": seed,
        "threshold": threshold, "metrics": metrics, "train_wall_s": round(time.time() - t0, 1),
    }  # fmt: skip
    config.update(extra_config or {})
    save(net, config, out)
    return config


def _as_frames(frames: Any, cams: Sequence[str]) -> np.ndarray:
    if isinstance(frames, Mapping):
        return frames_of(frames, cams, np.asarray(frames[cams[0]]).ndim == 5)
    arr = np.asarray(frames)
    return arr[:, -1] if arr.ndim == 5 else arr
