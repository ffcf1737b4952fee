"""`roborl reward train|relabel data=PATH out=DIR [key=value ...]` (Hydra's override grammar)."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field

from roborl.core.config import rng
from roborl.core.errors import ConfigError


@dataclass
class TrainOptions:
    """`roborl reward train` keys (the arguments of `train_classifier`, with its defaults)."""

    data: str | list[str] | None = field(
        default=None,
        metadata={
            "help": "dataset(s) with camera frames: `roborl demos record` output (success "
            "frames = positives, others = negatives), any roborl dataset (.npz/.hdf5/Minari), "
            "or a labelled-frames NPZ (frames or frames/<camera> uint8 + labels 0/1); a list "
            "data=[a.npz,b.npz] concatenates (required)"
        },
    )
    out: str | None = field(
        default=None,
        metadata={
            "help": "model folder (model.safetensors + config.json + README.md) or one .pt "
            "file (required)"
        },
    )
    keys: list[str] | None = field(
        default=None,
        metadata={"help": "camera keys to classify (null: every uint8 camera entry)"},
    )
    steps: int = field(default=300, metadata=rng(1, None, "gradient steps"))
    batch_size: int = field(
        default=64, metadata=rng(1, None, "frames per step, half success, half not")
    )
    lr: float = field(default=3e-4, metadata=rng(0.0, None, "Adam learning rate"))
    val_fraction: float = field(
        default=0.2,
        metadata=rng(0.0, None, "share of each class held out for the accuracy report, < 1"),
    )
    augment: bool = field(default=True, metadata={"help": "DrQ random shift of 4 pixels"})
    hidden: int = field(default=256, metadata=rng(1, None, "width of the head"))
    seed: int = field(default=0, metadata={"help": "seed of the split, sampling and network"})
    threshold: float = field(
        default=0.5,
        metadata=rng(
            0.0,
            1.0,
            "p(success) at which the held-out TPR/TNR are reported: the "
            "reward.threshold the runs will use",
        ),
    )
    conv_strides: list[int] | None = field(
        default=None,
        metadata={
            "help": "strides of the 3x3 convolutions, e.g. [2,1,1,1] (null: [2,2,2,1] for "
            "frames of 64 px and more, [2,1,1,1] under 64 px)"
        },
    )


@dataclass
class RelabelOptions(TrainOptions):
    """`roborl reward relabel` keys: train's, plus the run whose classifier fired."""

    fired: str | None = field(
        default=None,
        metadata={"help": "a run's reward_fired/ folder (written by every run with reward=)"},
    )
    fired_labels: str = field(
        default="env",
        metadata={
            "choices": ["env", "negative"],
            "help": "env: negatives are the fired frames where the env reported no success "
            "(sim); negative: all fired frames (a person judged those episodes failed)",
        },
    )
    model: str | None = field(
        default=None,
        metadata={"help": "the classifier that fired, to report its false-positive rate"},
    )


OPTIONS = {"train": TrainOptions, "relabel": RelabelOptions}


def usage() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    relabel_only = [
        line
        for line in field_lines(RelabelOptions)
        if line.split("=", 1)[0].strip() in ("fired", "fired_labels", "model")
    ]
    return (
        "usage:\n"
        "  roborl reward train data=PATH out=DIR|FILE.pt [key=value ...]\n"
        "  roborl reward relabel data=PATH fired=RUN_DIR/reward_fired out=DIR [model=OLD] "
        "[key=value ...]\n\n"
        + section("train keys", field_lines(TrainOptions))
        + "\nrelabel: retrain with the frames a run's classifier fired on as extra negatives\n"
        "(SERL's hard negatives); train's keys, plus\n"
        + section("relabel keys", relabel_only)
        + "\nThen: roborl train ... reward=classifier reward.path=OUT [reward.threshold=0.5]\n"
        "      [reward.consecutive=k]  (success only after k frames in a row)\n"
        "      [reward.relabel_every=N]  (this relabel inside the run, every N env steps)\n"
        + logs.HELP
    )


def main(argv: list[str]) -> int:
    """train a learned reward (success classifier): roborl reward train data=PATH out=DIR"""
    from roborl.core.cli import command_options

    if not argv or any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in OPTIONS:
        raise ConfigError(
            f"unknown `roborl reward` command {cmd!r}; accepted: train, relabel "
            "(roborl reward --help)."
        )
    from roborl.plugins.rewards.hard_negatives import retrain_with_hard_negatives
    from roborl.plugins.rewards.train import train_classifier

    opts, _ = command_options(OPTIONS[cmd], rest, f"reward {cmd}")
    for key in ("data", "out", *(("fired",) if cmd == "relabel" else ())):
        if not getattr(opts, key):
            raise ConfigError(
                f"roborl reward {cmd}: {key}= is required (roborl reward --help lists the keys)."
            )
    if opts.conv_strides is not None and (
        not opts.conv_strides or any(x < 1 for x in opts.conv_strides)
    ):
        raise ConfigError(
            f"conv_strides={opts.conv_strides!r} must be a list of whole numbers >= 1, "
            "e.g. [2,1,1,1]."
        )
    if opts.val_fraction >= 1:
        raise ConfigError(f"val_fraction={opts.val_fraction!r} must be a number in [0, 1).")
    args = dataclasses.asdict(opts)
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
