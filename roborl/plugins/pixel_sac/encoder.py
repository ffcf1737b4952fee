"""Observation encoder and random-shift augmentation of the pixel SAC family.

`ObsEncoder` turns a Dict observation (uint8 camera images beside state vectors) into one
feature vector: each image key goes through its own conv net (DrQ-v2's, Yarats et al. 2021,
Sec. 3: four 3x3 conv layers of 32 channels, the first with stride 2, ReLU, no padding),
then a Linear -> LayerNorm -> tanh trunk (`feature_dim` = 50, DrQ-v2's default); state keys
are flattened and concatenated to the image features unchanged.

`RandomShift` is DrQ's image augmentation (Kostrikov et al. 2020, Sec. 3.1): pad each side
by 4 pixels replicating the border, then crop back to the original size at a random offset,
drawn per sample: the padded image's pixels at an integer offset, which is what DrQ's kornia
crop and DrQ-v2's `grid_sample` shift compute. It is one `gather` over the flattened padded
images (about 8x faster on CPU here than kornia's `RandomCrop`, whose affine resampling took
15% of a pixel RLPD run's time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from roborl.core.errors import ConfigError
from roborl.core.obs import image_keys


def image_channels_first(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, H, W, C) or frame-stacked (B, k, H, W, C) uint8 -> (B, k*C, H, W) float in [0, 255]
    (`dtype`: float32 unless the encoder was cast, e.g. to float64 in a test).

    Stacked frames become channels (DrQ/DrQ-v2 stack frames along channels), so one shift
    moves all frames of an observation together.
    """
    if x.dim() == 5:
        b, k, h, w, c = x.shape
        x = x.permute(0, 1, 4, 2, 3).reshape(b, k * c, h, w)
    elif x.dim() == 4:
        x = x.permute(0, 3, 1, 2)
    else:
        raise TypeError(f"image batch must be (B,H,W,C) or (B,k,H,W,C), got {tuple(x.shape)}")
    return x.to(dtype)


class RandomShift(nn.Module):
    """DrQ's random shift: replicate-pad by `pad`, random crop back, one offset per sample.

    Works on channels-first float images (B, C, H, W); all channels of a sample (its stacked
    frames) share one offset. `forward(x, y)` shifts two batches with the SAME per-sample
    offsets (the consistent variant), `forward(x)` draws fresh ones.
    """

    def __init__(self, pad: int = 4) -> None:
        super().__init__()
        self.pad = int(pad)

    def crop(self, x: torch.Tensor) -> torch.Tensor:
        """Replicate-pad (B, C, H, W) by `pad`, crop (H, W) back at a random offset per sample."""
        b, c, h, w = x.shape
        padded = nn.functional.pad(x, (self.pad,) * 4, mode="replicate").reshape(b, c, -1)
        dy, dx = torch.randint(0, 2 * self.pad + 1, (2, b, 1, 1), device=x.device)
        rows = dy + torch.arange(h, device=x.device)[:, None]
        cols = dx + torch.arange(w, device=x.device)[None, :]
        index = (rows * (w + 2 * self.pad) + cols).reshape(b, 1, h * w).expand(-1, c, -1)
        return padded.gather(2, index).reshape(b, c, h, w)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.pad <= 0:
            return x if y is None else (x, y)
        if y is None:
            return self.crop(x)
        c = x.shape[1]
        both = self.crop(torch.cat([x, y], dim=1))  # one offset per sample for both halves
        return both[:, :c], both[:, c:]


def conv_net(in_channels: int, channels: int, layers: int, strided: int = 1) -> nn.Sequential:
    """DrQ-v2's conv stack: 3x3 convs, stride 2 then 1, ReLU after each; `strided` > 1 gives
    that many leading layers stride 2 (a cheaper net: each one quarters the next layers' cost)."""
    mods: list[nn.Module] = []
    for i in range(layers):
        stride = 2 if i < strided else 1
        mods += [nn.Conv2d(in_channels if i == 0 else channels, channels, 3, stride)]
        mods += [nn.ReLU()]
    return nn.Sequential(*mods, nn.Flatten())


class ObsEncoder(nn.Module):
    """Dict observation -> features: per-camera conv + LayerNorm/tanh trunk, states appended.

    `image_keys` are encoded in the order of the space; the remaining (state) keys are
    flattened to float and appended in the space's order. Images are scaled to [-0.5, 0.5]
    (DrQ-v2's obs / 255 - 0.5).
    """

    def __init__(
        self,
        space: gym.spaces.Dict,
        feature_dim: int = 50,
        channels: int = 32,
        layers: int = 4,
        strided: int = 1,
    ) -> None:
        super().__init__()
        self.image_keys = image_keys(space)
        self.state_keys = [k for k in space.spaces if k not in self.image_keys]
        self.convs = nn.ModuleDict()
        self.trunks = nn.ModuleDict()
        for key in self.image_keys:
            shape = space[key].shape  # (H, W, C) or (k, H, W, C)
            h, w, c = shape[-3:]
            k = shape[0] if len(shape) == 4 else 1
            conv = conv_net(k * c, channels, layers, strided)
            try:
                with torch.no_grad():
                    n = conv(torch.zeros(1, k * c, h, w)).shape[1]
            except RuntimeError:
                raise ConfigError(
                    f"camera {key!r} is {h}x{w} px: too small for {layers} 3x3 conv layers of "
                    f"which {strided} have stride 2 (the image shrinks below the kernel); use a "
                    "larger env image size, or fewer algo.conv_layers / algo.conv_strided."
                ) from None
            self.convs[key] = conv
            self.trunks[key] = nn.Sequential(
                nn.Linear(n, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh()
            )
        self.state_dim = int(sum(np.prod(space[k].shape) for k in self.state_keys))
        self.out_dim = feature_dim * len(self.image_keys) + self.state_dim

        # Weights-free marker of the features' dtype when there is no camera (a state-only
        # Dict: `dtype` follows the module's casts through this buffer).
        self.register_buffer("_dtype_marker", torch.zeros(0), persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        """The features' floating dtype: the trunks' weights' (float32 unless cast)."""
        if not self.trunks:
            return self._dtype_marker.dtype
        return next(iter(self.trunks.values()))[0].weight.dtype

    def images(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The image entries as channels-first float in [0, 255] (augment these)."""
        dtype = self.dtype
        return {k: image_channels_first(obs[k], dtype) for k in self.image_keys}

    def image_features(self, images: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """Each camera's conv + trunk features from channels-first `images`, in key order."""
        return [self.trunks[k](self.convs[k](images[k] / 255.0 - 0.5)) for k in self.image_keys]

    def forward(
        self, images: Mapping[str, torch.Tensor], obs: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """Features from channels-first `images` (see `images`) and the state keys of `obs`."""
        parts = self.image_features(images)
        b = parts[0].shape[0] if parts else obs[self.state_keys[0]].shape[0]
        parts += [obs[k].reshape(b, -1).to(self.dtype) for k in self.state_keys]
        return torch.cat(parts, dim=-1)


STATE_KEY = "state"
"""The entry a flat vector observation becomes (`require_pixel_space`, `as_state_dict`)."""


def require_pixel_space(space: gym.Space, algo: str) -> gym.spaces.Dict:
    """The observation space as a Dict (camera images beside Box states), or a ConfigError.

    A Dict of states only (no camera; e.g. `env=fetch_push_pixels env.kwargs.cameras=[]
    env.kwargs.privileged_block=true`, issue 48's state gate) is accepted: the same algorithm
    then learns from the states alone (no encoder, no augmentation), which separates its RL
    from its vision. A flat vector Box is that too, as the one entry `STATE_KEY` (a goal env
    under ``her=``, whose relabelling needs the goal in one flat vector). Anything else is
    refused."""
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return gym.spaces.Dict({STATE_KEY: space})
    keys: Sequence[str] = image_keys(space)
    if not isinstance(space, gym.spaces.Dict) or not space.spaces:
        raise ConfigError(
            f"algo={algo} learns from camera images: it needs a Dict observation space with at "
            "least one uint8 image entry of shape (H, W, C) or (k, H, W, C), or a flat state "
            f"vector, but the env's observation space is {space}. Choose a pixel env config "
            "(e.g. a RoborlTabletop pixel task) or a vector env."
        )
    for key, sub in space.spaces.items():
        if key not in keys and not isinstance(sub, gym.spaces.Box):
            raise ConfigError(
                f"algo={algo}: observation entry {key!r} is a {type(sub).__name__}; state "
                "entries must be Box spaces (they are concatenated to the image features)."
            )
    return space


def as_state_dict(obs: Any) -> Any:
    """A flat batch of state vectors as the state-only Dict `require_pixel_space` made of its
    space; a Dict batch as it is."""
    return obs if isinstance(obs, Mapping) else {STATE_KEY: obs}


def shift_pad(space: gym.spaces.Dict, pixels: int, fraction: float | None) -> int:
    """The random shift's padding: `pixels`, or `fraction` of the smallest image side.

    Why a fraction: a 4-pixel shift is 12.5% of a 32 px view but 3% of DrQ-v2's 84 px one,
    so the same `image_pad` is a different augmentation at another image size."""
    if fraction is None:
        return int(pixels)
    sides = [min(space.spaces[k].shape[-3:-1]) for k in image_keys(space)]
    return round(fraction * min(sides)) if sides else 0


def load_pretrained_conv(encoder: ObsEncoder, path: str) -> None:
    """Copy a success classifier's conv net (`roborl reward train`, trained here on the task's
    own camera frames) into `encoder`'s conv for its one camera, and freeze it: SERL's frozen
    pretrained encoder, with weights that need no download. The layout must match: the
    classifier's is 4 layers of 32 channels, the first 3 with stride 2 on frames of 64 px and
    more (`conv_channels=32 conv_layers=4 conv_strided=3`), the first 1 under 64 px
    (`conv_strided=1`)."""
    from roborl.plugins.rewards.classifier import load

    where = f"algo.pretrained_encoder={path!r}"
    if len(encoder.image_keys) != 1:
        raise ConfigError(
            f"{where}: a classifier's conv net fits one camera; this observation has "
            f"{len(encoder.image_keys)} ({', '.join(encoder.image_keys)})."
        )
    source = load(path).net.conv
    target = encoder.convs[encoder.image_keys[0]]

    def strides(net: nn.Module) -> list[tuple[int, ...]]:
        return [tuple(m.stride) for m in net.modules() if isinstance(m, nn.Conv2d)]

    try:
        if strides(source) != strides(target):  # same weight shapes, another net
            raise RuntimeError(f"strides {strides(source)} vs the encoder's {strides(target)}")
        target.load_state_dict(source.state_dict())
    except RuntimeError as exc:
        layers = strides(source)
        halving = sum(1 for st in layers if st == (2, 2))  # leading stride-2 layers
        raise ConfigError(
            f"{where}: the classifier's conv net does not fit the encoder (set "
            f"algo.conv_channels=32 algo.conv_layers={len(layers)} algo.conv_strided={halving}, "
            "and the camera's size and channels the classifier was trained on): "
            f"{' '.join(str(exc).split())[:300]}"
        ) from None
    target.requires_grad_(False)
