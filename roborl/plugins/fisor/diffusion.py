"""FISOR's policy network: a DDPM over actions conditioned on the observation.

Beta schedules (VP, cosine), Fourier time features, the residual MLP and the noise-prediction
loss and sampler, as the official JAX code's ``DDPM`` (the values are cited in `fisor.py`'s
docstring, which names the paper). Apart from `fisor.py` because it is a generative model of
actions that knows nothing of safety: FISOR only weights its loss and selects its samples.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def vp_beta_schedule(T: int, b_min: float = 0.1, b_max: float = 10.0) -> torch.Tensor:
    """Discretised variance-preserving schedule (the official config's ``beta_schedule='vp'``):
    beta_t = 1 - exp(-b_min / T - (b_max - b_min) (2t - 1) / (2 T^2)), t = 1..T."""
    t = torch.arange(1, T + 1, dtype=torch.float64)
    alpha = torch.exp(-b_min / T - 0.5 * (b_max - b_min) * (2 * t - 1) / T**2)
    return (1 - alpha).float()


def cosine_beta_schedule(T: int, s: float = 0.008) -> torch.Tensor:
    """Nichol & Dhariwal's cosine schedule (an alternative of the official code)."""
    steps = torch.arange(T + 1, dtype=torch.float64)
    f = torch.cos(((steps / T) + s) / (1 + s) * math.pi / 2) ** 2
    alphas_bar = f / f[0]
    betas = 1 - alphas_bar[1:] / alphas_bar[:-1]
    return betas.clamp(0.0, 0.999).float()


class FourierTime(nn.Module):
    """Learnable Fourier features of the diffusion step (official: ``FourierFeatures``,
    kernel initialised N(0, 0.2^2), output [cos, sin])."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim // 2, 1) * 0.2)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        f = 2 * math.pi * t[:, None].float() @ self.w.T
        return torch.cat([f.cos(), f.sin()], -1)


class ResNetBlock(nn.Module):
    """IDQL's MLPResNet block: dropout -> LayerNorm -> Dense(4w) -> Mish -> Dense(w), + skip."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Dropout(dropout) if dropout > 0 else nn.Identity(),
            nn.LayerNorm(width),
            nn.Linear(width, 4 * width),
            nn.Mish(),
            nn.Linear(4 * width, width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class DiffusionPolicy(nn.Module):
    """DDPM over actions in [-1, 1] conditioned on the observation; predicts the noise.

    Noise model as the official ``ln_resnet`` actor: time -> Fourier features -> MLP(128, 128,
    Mish) = cond; [a, s, cond] -> Dense(width) -> `blocks` ResNet blocks -> Mish -> Dense(|A|).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        width: int = 256,
        blocks: int = 3,
        T: int = 5,
        dropout: float = 0.1,
        time_dim: int = 64,
        schedule: str = "vp",
    ) -> None:
        super().__init__()
        self.act_dim, self.T = act_dim, T
        self.time = nn.Sequential(
            FourierTime(time_dim), nn.Linear(time_dim, 128), nn.Mish(), nn.Linear(128, 128)
        )
        self.net = nn.Sequential(
            nn.Linear(act_dim + obs_dim + 128, width),
            *[ResNetBlock(width, dropout) for _ in range(blocks)],
            nn.Mish(),
            nn.Linear(width, act_dim),
        )
        if schedule not in ("vp", "cosine"):
            raise ValueError(f"unknown beta schedule {schedule!r}; accepted: vp, cosine")
        betas = vp_beta_schedule(T) if schedule == "vp" else cosine_beta_schedule(T)
        alphas = 1 - betas
        self.register_buffer("betas", betas)
        self.register_buffer("alphas", alphas)
        self.register_buffer("alphas_bar", torch.cumprod(alphas, 0))

    def eps(self, obs: torch.Tensor, a_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([a_t, obs, self.time(t)], -1))

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Weighted noise-prediction loss, squared error summed over action dims (as the
        official code), weighted per sample, averaged over the batch."""
        t = torch.randint(0, self.T, (obs.shape[0],), device=obs.device)
        noise = torch.randn_like(actions)
        ab = self.alphas_bar[t][:, None]
        a_t = ab.sqrt() * actions + (1 - ab).sqrt() * noise
        per = (self.eps(obs, a_t, t) - noise).pow(2).sum(-1)
        return (weight * per).mean()

    @torch.no_grad()
    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Ancestral DDPM sampling with variance beta_t (the official sampler), clipping the
        action to [-1, 1] at every step. The T standard normal draws (the start, then one per
        step but the last) are taken first, in that order; nothing else draws in between
        (the noise model has no dropout in eval mode), so this equals drawing them step by step."""
        return self.denoise(obs, self.draw_noise(obs.shape[0], obs.device, generator))

    def draw_noise(
        self,
        rows: int,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """(rows, T, |A|) standard normal draws for `denoise`, in the sampler's order."""
        draws = [
            torch.randn(rows, self.act_dim, device=device, generator=generator)
            for _ in range(self.T)
        ]
        return torch.stack(draws, 1)

    def denoise(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The sampler with its randomness given: ``noise[:, 0]`` starts the chain and
        ``noise[:, k]`` is added at step i = T - k (tensor ops only, so it exports to ONNX)."""
        a = noise[:, 0]
        for k, i in enumerate(reversed(range(self.T))):
            t = torch.full_like(a[:, 0], i, dtype=torch.long)
            eps = self.eps(obs, a, t)
            alpha, ab, beta = self.alphas[i], self.alphas_bar[i], self.betas[i]
            a = (a - (1 - alpha) / (1 - ab).sqrt() * eps) / alpha.sqrt()
            if i > 0:
                a = a + beta.sqrt() * noise[:, k + 1]
            a = a.clamp(-1.0, 1.0)
        return a
