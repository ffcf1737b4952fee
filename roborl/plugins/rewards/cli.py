"""`roborl reward train|relabel data=PATH out=DIR [key=value ...]` (Hydra's override grammar)."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from roborl.core.errors import ConfigError

USAGE = """usage:
  roborl reward train data=PATH out=DIR|FILE.pt [key=value ...]
  roborl reward relabel data=PATH fired=RUN_DIR/reward_fired out=DIR [model=OLD] [key=value ...]

  data=         dataset(s) with camera frames: `roborl demos record` output (success frames
                = positives, others = negatives), any roborl dataset (.npz/.hdf5/Minari), or
                a labelled-frames NPZ (frames or frames/<camera> uint8 + labels 0/1);
                a list data=[a.npz,b.npz] concatenates
  out=          model folder (model.safetensors + config.json + README.md) or one .pt file
  keys=         camera keys to classify (default: every uint8 camera entry)
  steps=        gradient steps (default 300)
  batch_size=   frames per step, half success, half not (default 64)
  lr=           Adam learning rate (default 3e-4)
  val_fraction= share of each class held out for the accuracy report (default 0.2)
  augment=      DrQ random shift of 4 pixels (default true)
  hidden=       width of the head (default 256)
  conv_strides= strides of the 3x3 convolutions, e.g. [2,1,1,1] (default [2,2,2,1] for
                frames of 64 px and more, [2,1,1,1] under 64 px)
  seed=         seed of the split, the sampling and the network (default 0)
  threshold=    p(success) at which the held-out TPR/TNR are reported: the reward.threshold
                the runs will use (default 0.5)

  relabel: retrain with the frames a run's classifier fired on as extra negatives (SERL's
  hard negatives); same keys as train, plus
  fired=        a run's reward_fired/ folder (written by every run with reward=)
  fired_labels= env: negatives are the fired frames where the env reported no success (sim);
                negative: all fired frames (a person judged those episodes failed)
  model=        the classifier that fired, to report its false-positive rate on them

Then: roborl train ... reward=classifier reward.path=OUT [reward.threshold=0.5]
      [reward.consecutive=k]  (success only after k frames in a row)
"""


def main(argv: list[str]) -> int:
    """train a learned reward (success classifier): roborl reward train data=PATH out=DIR"""
    if not argv or any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in ("train", "relabel"):
        raise ConfigError(
            f"unknown `roborl reward` command {cmd!r}; accepted: train, relabel.\n{USAGE}"
        )
    from roborl.core.compose import override_key, override_value, parse_overrides
    from roborl.plugins.rewards.hard_negatives import retrain_with_hard_negatives
    from roborl.plugins.rewards.train import train_classifier

    args: dict[str, Any] = {}
    for ov in parse_overrides(rest, f"reward {cmd}"):
        if ov.is_sweep_override() or ov.is_delete():
            raise ConfigError(f"`roborl reward {cmd}`: {ov.input_line!r} needs one value.")
        args[override_key(ov)] = override_value(ov)
    known = set(inspect.signature(train_classifier).parameters) - {"log"}
    required = ["data", "out"]
    if cmd == "relabel":
        known |= {"fired", "fired_labels", "model"}
        required.append("fired")
    bad = sorted(set(args) - known)
    if bad:
        raise ConfigError(f"unknown `roborl reward {cmd}` key(s) {bad}; accepted: {sorted(known)}.")
    for key in required:
        if not args.get(key):
            raise ConfigError(f"`roborl reward {cmd}` needs {key}=.\n{USAGE}")
    th = args.get("threshold", 0.5)
    if isinstance(th, bool) or not isinstance(th, (int, float)) or not 0 <= th <= 1:
        raise ConfigError(f"threshold={th!r} must be a number in [0, 1].")
    for key in ("steps", "batch_size", "hidden", "seed"):
        if key in args and (isinstance(args[key], bool) or not isinstance(args[key], int)):
            raise ConfigError(f"{key}={args[key]!r} must be an integer.")
        if key in ("steps", "batch_size", "hidden") and key in args and args[key] < 1:
            raise ConfigError(f"{key}={args[key]} must be at least 1.")
    strides = args.get("conv_strides")
    if strides is not None and (
        not isinstance(strides, list)
        or not strides
        or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in strides)
    ):
        raise ConfigError(
            f"conv_strides={strides!r} must be a list of whole numbers >= 1, e.g. [2,1,1,1]."
        )
    vf = args.get("val_fraction", 0.2)
    if isinstance(vf, bool) or not isinstance(vf, (int, float)) or not 0 <= vf < 1:
        raise ConfigError(f"val_fraction={vf!r} must be a number in [0, 1).")
    args["out"] = str(args["out"])
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if cmd == "relabel":
        config = retrain_with_hard_negatives(**args, log=log)
        print(f"hard negatives: {json.dumps(config['hard_negatives'])}")
    else:
        config = train_classifier(**args, log=log)
    m = config["metrics"]
    held = (
        f"held-out accuracy {m['val_accuracy']:.3f} at threshold {config['threshold']} "
        f"(success {m['val_tpr']:.3f}, other {m['val_tnr']:.3f})"
        if "val_accuracy" in m
        else "no held-out frames"
    )
    print(f"wrote {args['out']}: {held}; {json.dumps({k: m[k] for k in sorted(m)})}")
    return 0
