"""Hard negatives: retrain the success classifier with the frames it wrongly fired on.

During a run with `reward=`, every frame the classifier fired on is saved under the run's
`reward_fired/` (`roborl.core.fired_frames`). SERL's remedy for a policy that learns to exploit
the classifier's false positives (Luo et al., 2024, Sec. IV-B) is to add those frames as
negatives and retrain. Which fired frames were false: the env's own success where it reported
one (a sim; `fired_labels=env`), or all of them when a person has judged that none of the saved
episodes succeeded (`fired_labels=negative`, e.g. a real robot's failed run).
`reward.relabel_every=N` runs the same retraining inside a run (`SuccessClassifier.
retrain_with_fired`, `roborl.core.reward_rounds`), leaving out the frames with no env success.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import DatasetError
from roborl.core.fired_frames import save_npz_atomic


def load_fired(directory: str | Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(frames per camera, env_success (N,) int8: 1, 0, or -1 unknown) from `reward_fired/`."""
    parts = sorted(Path(directory).glob("fired-*.npz"))
    if not parts:
        raise DatasetError(
            f"fired={directory}: no fired-*.npz parts; a run with reward= writes them to "
            "<run_dir>/reward_fired/ (reward.save_fired)."
        )
    frames: dict[str, list[np.ndarray]] = {}
    success: list[np.ndarray] = []
    for part in parts:
        with np.load(part, allow_pickle=False) as z:
            keys = sorted(k[len("frames/") :] for k in z.files if k.startswith("frames/"))
            if "env_success" not in z.files or not keys:
                raise DatasetError(
                    f"{part}: not a fired-frames part (frames/<camera>, env_success)."
                )
            if frames and set(keys) != set(frames):
                raise DatasetError(f"{part}: cameras {keys}, earlier parts {sorted(frames)}.")
            for k in keys:
                frames.setdefault(k, []).append(z[f"frames/{k}"])
            success.append(np.asarray(z["env_success"], np.int8))
    return {k: np.concatenate(v) for k, v in frames.items()}, np.concatenate(success)


def hard_negatives(
    directory: str | Path, fired_labels: str = "env", skip_unknown: bool = False
) -> tuple[dict[str, np.ndarray], int]:
    """The fired frames to add as negatives, and how many fired frames were true successes.
    `skip_unknown`: leave out the frames without an env success instead of refusing them (an
    automatic round in a run, where no person has judged them)."""
    frames, success = load_fired(directory)
    if fired_labels == "negative":
        return frames, 0
    if fired_labels != "env":
        raise DatasetError(f"fired_labels={fired_labels!r}: accepted are 'env' and 'negative'.")
    unknown = int((success < 0).sum())
    if unknown and not skip_unknown:
        raise DatasetError(
            f"fired={directory}: {unknown} of {len(success)} fired frames have no env success "
            "(a real robot reports none); after checking that those episodes failed, pass "
            "fired_labels=negative, or label the frames in a labelled-frames NPZ (frames, labels)."
        )
    false = success == 0
    return {k: v[false] for k, v in frames.items()}, int((success == 1).sum())


def write_labelled(frames: dict[str, np.ndarray], path: Path) -> Path:
    """Frames as a labelled-frames NPZ of negatives (what `roborl reward train data=` reads)."""
    n = len(next(iter(frames.values())))
    arrays: dict[str, Any] = {f"frames/{k}": v for k, v in frames.items()}
    arrays["labels"] = np.zeros(n, np.uint8)
    return save_npz_atomic(path, arrays)


def false_positive_rate(
    model_path: str | Path, frames: dict[str, np.ndarray], threshold: float = 0.5
) -> float:
    """Share of `frames` (all negatives) that the classifier at `model_path` calls success at
    `threshold` (the `reward.threshold` the run uses)."""
    from roborl.plugins.rewards.classifier import load

    clf = load(model_path, threshold=threshold)
    return float(np.asarray(clf(frames)[1]).mean())


def retrain_with_hard_negatives(
    data: str | Sequence[str],
    fired: str,
    out: str,
    fired_labels: str = "env",
    model: str | None = None,
    log: Callable[[str], None] = print,
    skip_unknown: bool = False,
    **train_options: Any,
) -> dict[str, Any]:
    """Retrain on `data` plus the hard negatives from `fired`; returns the new model's config
    with `hard_negatives` (count, true successes among the fired, false-positive rate on them
    before (with `model=`) and after). The saved config keeps `data` as `base_data`, so a
    later round retrains on the same data plus all fired frames, not on this round's file."""
    from roborl.plugins.rewards.train import train_classifier

    negatives, true_fired = hard_negatives(fired, fired_labels, skip_unknown)
    n = len(next(iter(negatives.values())))
    if n == 0:
        raise DatasetError(
            f"fired={fired}: all {true_fired} fired frames were true successes; no hard negative "
            "to add."
        )
    extra = write_labelled(negatives, Path(out).with_name(Path(out).name + "_hard_negatives.npz"))
    paths = [data] if isinstance(data, str) else list(data)
    config = train_classifier(
        [*paths, str(extra)], out, log=log, extra_config={"base_data": paths}, **train_options
    )
    report = {"count": n, "true_successes_fired": true_fired, "file": str(extra)}
    threshold = float(config["threshold"])  # the one the new model was evaluated at
    report["threshold"] = threshold
    if model is not None:
        report["fp_rate_before"] = false_positive_rate(model, negatives, threshold)
    report["fp_rate_after"] = false_positive_rate(out, negatives, threshold)
    config["hard_negatives"] = report
    side = Path(out).with_name(Path(out).name + "_hard_negatives.json")
    tmp = side.with_name(side.name + ".tmp")  # renamed whole: never a half-written report
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, side)
    return config
