"""A binary success classifier on camera frames, the learned reward of SERL/HIL-SERL.

SERL (Luo et al., 2024, "SERL: A Software Suite for Sample-Efficient Robotic Reinforcement
Learning", Sec. IV-B) trains a binary classifier on the robot's camera frames (positives: frames
where the task is done; negatives: the rest) and uses ``1[p >= 0.5]`` as the sparse reward that
also ends the episode. Deviations: SERL's classifier uses a pretrained ResNet-10 encoder; no
pretrained weights can be downloaded here, so the encoder is a small convolutional net trained
from scratch (DrQ-v2's encoder shape: 3x3 convolutions with 32 channels; Yarats et al., 2021;
fewer stride-2 layers on frames under 64 px, see `default_strides`),
with DrQ's random-shift augmentation (pad 4, Yarats et al., 2021, Sec. 3.1) against
overfitting to few positives. Several cameras of the same size are stacked on the channel axis;
a frame stack (k, H, W, C) contributes its newest frame.

Files: a model folder (``model.safetensors`` + ``config.json`` + ``README.md`` model card), or a
single ``.pt`` file holding ``{"config": ..., "state_dict": ...}`` with plain tensors and JSON
types, loadable with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from roborl.core.errors import CheckpointError, ConfigError

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CARD = "README.md"
FORMAT = "roborl-success-classifier-1"


LARGE_FRAME_STRIDES = (2, 2, 2, 1)
"""Strides of the four convolutions for frames of 64 px and more (the original net)."""
SMALL_FRAME_STRIDES = (2, 1, 1, 1)
"""For frames under 64 px: three stride-2 layers would shrink a 32 px frame to 1x1 (32
features for the whole scene), too coarse to tell a block on the goal from one beside it."""


def default_strides(height: int, width: int) -> tuple[int, ...]:
    """The conv strides `roborl reward train` uses when `conv_strides` is not given."""
    return LARGE_FRAME_STRIDES if min(height, width) >= 64 else SMALL_FRAME_STRIDES


class SuccessNet(nn.Module):
    """uint8 frames (B, H, W, C*cameras) -> success logit (B,): 3x3 convolutions with 32
    channels and the given strides, then a LayerNorm MLP head."""

    def __init__(
        self,
        height: int,
        width: int,
        channels: int,
        hidden: int = 256,
        strides: Sequence[int] = LARGE_FRAME_STRIDES,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, stride in enumerate(strides):
            layers += [nn.Conv2d(channels if i == 0 else 32, 32, 3, stride=int(stride)), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        with torch.no_grad():
            n = self.conv(torch.zeros(1, channels, height, width)).numel()
        self.head = nn.Sequential(
            nn.Linear(n, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.head(self.conv(x).flatten(1)).squeeze(-1)


def random_shift(frames: torch.Tensor, pad: int, generator: torch.Generator | None) -> torch.Tensor:
    """DrQ's random shift: replicate-pad by `pad` pixels, crop back at a random integer offset
    per image (B, H, W, C uint8 in and out), one gather, no per-image loop."""
    b, h, w, _ = frames.shape
    x = F.pad(frames.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, None, :, None].expand(
        -1, x.shape[1], -1, w + 2 * pad
    )
    x = x.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None, :])[:, None, None, :].expand(-1, x.shape[1], h, -1)
    x = x.gather(3, cols)
    return x.permute(0, 2, 3, 1).to(torch.uint8)


def frames_of(obs: Any, keys: Sequence[str], stacked: bool = False) -> np.ndarray:
    """The classifier's input from observations (single or batched, array or dict): the
    newest frame of each camera key, stacked on the channel axis -> (B, H, W, C).
    `stacked`: the entries are frame stacks (k, H, W, C) (`env.frame_stack=k`)."""
    parts = [np.asarray(obs[k]) for k in keys] if isinstance(obs, Mapping) else [np.asarray(obs)]
    out = []
    for p in parts:
        if stacked:
            p = p[-1][None] if p.ndim == 4 else p[:, -1]
        elif p.ndim == 3:
            p = p[None]
        out.append(p)
    return np.concatenate(out, axis=-1)


class SuccessClassifier:
    """A trained `SuccessNet` plus what it was trained on; the `reward=classifier` model.

    ``__call__(obs) -> (reward, success)`` with success = p >= threshold and reward =
    float(success): the thresholded output is the reward, as in SERL.
    """

    def __init__(self, net: SuccessNet, config: Mapping[str, Any], threshold: float = 0.5) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"reward.threshold={threshold} must lie in [0, 1].")
        self.net = net.eval()
        self.config = dict(config)
        self.keys: list[str] = list(self.config["image_keys"])
        self.threshold = float(threshold)
        self.stacked = False  # set by `check_space` for frame-stacked envs
        self.path: Path | None = None  # where `load` read it from (a round's "before" model)

    def check_space(self, space: gym.Space) -> None:
        """Refuse an env whose cameras differ from the training frames, naming the key."""
        want = {k: tuple(v) for k, v in self.config["frame_shapes"].items()}
        if isinstance(space, gym.spaces.Dict):
            for key, shape in want.items():
                if key not in space.spaces:
                    raise ConfigError(
                        f"reward=classifier was trained on camera {key!r}, which this env does "
                        f"not observe (its keys: {', '.join(space.spaces)})."
                    )
                got = tuple(space[key].shape)
                self.stacked = len(got) == 4
                if got[-3:] != shape:
                    raise ConfigError(
                        f"reward=classifier was trained on {key!r} frames of shape {shape}; "
                        f"this env's {key!r} is {got}."
                    )
            return
        self.stacked = len(space.shape) == 4
        if want and tuple(space.shape)[-3:] != next(iter(want.values())):
            raise ConfigError(
                f"reward=classifier was trained on frames of shape {next(iter(want.values()))}; "
                f"this env observes {tuple(space.shape)}."
            )

    @torch.no_grad()
    def probability(self, obs: Any) -> np.ndarray:
        """p(success) per observation (a batch axis is added to a single one)."""
        frames = torch.as_tensor(frames_of(obs, self.keys, self.stacked))
        return torch.sigmoid(self.net(frames)).numpy()

    def __call__(self, obs: Any) -> tuple[Any, Any]:
        p = self.probability(obs)
        success = p >= self.threshold
        reward = success.astype(np.float32)
        if p.shape == (1,):
            return float(reward[0]), bool(success[0])
        return reward, success

    # -- hard-negative rounds in a run (`reward.relabel_every`, roborl.core.reward_rounds) ----

    def retrain_with_fired(
        self, fired: str, out: str, log: Callable[[str], None] = print
    ) -> tuple[SuccessClassifier, dict[str, Any]] | None:
        """What `roborl reward relabel` does, with this model's own data and training options:
        retrain on the data it started from (`base_data`) plus the frames in `fired` the env
        said were no success; the new model (saved to `out`) and its `hard_negatives` report.
        None when there is nothing to add yet (no fired frame, or none of them false)."""
        from roborl.plugins.rewards.hard_negatives import (
            hard_negatives,
            retrain_with_hard_negatives,
        )

        if not any(Path(fired).glob("fired-*.npz")):
            return None
        negatives, _ = hard_negatives(fired, skip_unknown=True)
        if not negatives or not len(next(iter(negatives.values()))):
            return None
        c = self.config
        data = c.get("base_data", c.get("data"))
        if not data:
            raise ConfigError(
                f"reward.relabel_every: the classifier {str(self.path)!r} does not record the "
                "data it was trained on; retrain it with `roborl reward train` first."
            )
        options = {k: c[k] for k in ("steps", "batch_size", "lr", "augment", "hidden", "seed",
                                     "conv_strides") if k in c}  # fmt: skip
        config = retrain_with_hard_negatives(
            data, fired, out,
            model=None if self.path is None else str(self.path), log=log, skip_unknown=True,
            keys=self.keys or None, threshold=self.threshold, **options,
        )  # fmt: skip
        return self.load_round(out), config["hard_negatives"]

    def load_round(self, path: str | Path) -> SuccessClassifier:
        """A model a round wrote, at this one's threshold (a resumed run's current model)."""
        new = load(path, self.threshold, str(next(self.net.parameters()).device))
        new.stacked = self.stacked
        return new


# -- files ------------------------------------------------------------------------------------


def _atomic(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save(net: SuccessNet, config: Mapping[str, Any], out: str | Path) -> Path:
    """A model folder, or one `.pt` file when `out` ends with .pt; every file atomically."""
    out = Path(out)
    config = {"format": FORMAT, **config}
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    if out.suffix == ".pt":
        _atomic(out, lambda tmp: torch.save({"config": config, "state_dict": state}, tmp))
        return out
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    _atomic(out / WEIGHTS, lambda tmp: save_file(state, tmp))
    _atomic(out / CONFIG, lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2)))
    _atomic(out / CARD, lambda tmp: Path(tmp).write_text(model_card(config)))
    return out


def model_card(config: Mapping[str, Any]) -> str:
    m = config.get("metrics", {})
    return (
        "# Success classifier (roborl)\n\n"
        "A binary classifier of task success on camera frames, used as a learned reward with "
        "`roborl train reward=classifier reward.path=<this folder>` "
        "(reward = 1[p >= reward.threshold], success ends the episode).\n\n"
        f"- cameras: {', '.join(config['image_keys'])}, frames {config['frame_shapes']}\n"
        f"- trained on: {config.get('data')}\n"
        f"- frames: {m.get('train_positives')} positive / {m.get('train_negatives')} negative "
        f"for training, {m.get('val_positives')} / {m.get('val_negatives')} held out\n"
        f"- held-out accuracy {m.get('val_accuracy')}, on positives {m.get('val_tpr')}, "
        f"on negatives {m.get('val_tnr')} (threshold 0.5)\n"
        f"- steps {config.get('steps')}, batch {config.get('batch_size')}, seed "
        f"{config.get('seed')}\n\n"
        "Files: `model.safetensors` (weights), `config.json` (architecture, data, metrics).\n"
    )


def load(path: str | Path, threshold: float = 0.5, device: str = "cpu") -> SuccessClassifier:
    """A saved classifier (folder or .pt); nothing is unpickled."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(
            f"reward.path={str(path)!r} does not exist; train one with `roborl reward train "
            "data=DEMOS out=DIR`."
        )
    try:
        if path.is_dir():
            from safetensors.torch import load_file

            config = json.loads((path / CONFIG).read_text())
            state = load_file(str(path / WEIGHTS), device=device)
        else:
            blob = torch.load(path, map_location=device, weights_only=True)
            config, state = blob["config"], blob["state_dict"]
    except (OSError, KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"reward.path={str(path)!r} is not a success classifier written by `roborl reward "
            f"train`: {type(exc).__name__}: {exc}"
        ) from None
    if config.get("format") != FORMAT:
        raise CheckpointError(
            f"reward.path={str(path)!r} has format {config.get('format')!r}, expected {FORMAT!r}."
        )
    strides = config.get("conv_strides", LARGE_FRAME_STRIDES)  # models saved before the key
    net = SuccessNet(
        config["height"], config["width"], config["channels"], config["hidden"], strides
    )
    net.load_state_dict(state)
    clf = SuccessClassifier(net.to(device), config, threshold)
    clf.path = path
    return clf


def classifier_reward(
    path: str | None = None, threshold: float = 0.5, device: str = "cpu"
) -> SuccessClassifier:
    """`reward=classifier` factory: ``reward.path=DIR|FILE.pt``, ``reward.threshold=0.5``."""
    if not path:
        raise ConfigError(
            "reward=classifier needs reward.path=DIR (a folder or .pt written by `roborl reward "
            "train data=DEMOS out=DIR`)."
        )
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ConfigError(f"reward.threshold={threshold!r} must be a number in [0, 1].")
    return load(path, float(threshold), device)
