"""algo=pixel_bc: behaviour cloning from camera frames on demos plus a person's interventions.

HIL-SERL (Luo et al., 2024, Sec. V) compares its RL agent with behaviour cloning trained on
the same human data; with interventions gathered while the cloned policy runs, that is
HG-DAgger (Kelly et al., 2019, "HG-DAgger: Interactive Imitation Learning with Human
Experts"): the person takes over when the policy drifts, and the policy is retrained on the
demonstrations plus every intervened step. In roborl it is an off-policy-loop algorithm: the
loop's demo buffer already holds `demos=` and each intervened transition (the person's
executed action), so with ``demo_fraction=1.0`` every batch is that data, and

    loss = || tanh(mu(f(aug(s)))) - a ||^2   (a scaled to [-1, 1])

trains the encoder (DrQ-v2's conv net, random shift) and the actor's mean together by Adam
(`actor_lr`). Rows not marked as demos are ignored, so a smaller `demo_fraction` only wastes
batch rows. Deviations: the policy acts with its mean always (a cloned policy has no
exploration to do; its log-std is never trained); the critics of the pixel SAC family are
built but unused (one, no LayerNorm), to share its encoder, actor and checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.core.nn import fused_adam, load_optimizer_state
from roborl.core.obs import to_torch
from roborl.plugins.pixel_sac.config import DrQConfig
from roborl.plugins.pixel_sac.drq import DrQ
from roborl.plugins.pixel_sac.encoder import as_state_dict


@dataclass
class PixelBCConfig(DrQConfig):
    """algo=pixel_bc: DrQ's encoder and actor trained by behaviour cloning."""

    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "encoder + actor Adam rate"))
    num_critics: int = field(default=1, metadata=rng(1, 64, "unused critics (kept at 1)"))
    critic_subsample: int | None = field(default=None, metadata={"help": "unused"})


class PixelBC(DrQ):
    """Behaviour cloning on the demo buffer (demos + interventions); see the module docstring."""

    name = "pixel_bc"
    Config = PixelBCConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bc_opt = fused_adam(
            [*self.encoder.parameters(), *self.actor.parameters()], lr=self.config.actor_lr
        )

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = False) -> np.ndarray:
        return super().act(obs, deterministic=True)

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        is_demo = batch.extras.get("is_demo")
        if is_demo is None:
            raise ConfigError(
                "algo=pixel_bc clones the demo buffer: give demos=PATH (recorded demos; a "
                "person's interventions are added as they happen) and demo_fraction=1.0."
            )
        rows = is_demo.reshape(-1).bool().to(self.device).nonzero().squeeze(-1)
        obs = {k: v[rows] for k, v in as_state_dict(to_torch(batch.obs, self.device)).items()}
        target = self.scaler.to_unit(batch.actions.to(self.device)[rows])
        images = {k: self.shift(v) for k, v in self.encoder.images(obs).items()}
        predicted = self.actor.deterministic(self.encoder(images, obs))
        loss = (predicted - target).pow(2).sum(-1).mean()
        self.bc_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.bc_opt.step()
        self.updates += 1
        return {"bc_loss": loss.detach(), "demo_rows": torch.tensor(float(len(rows)))}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "bc_opt": self.bc_opt.state_dict()}

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        if "bc_opt" in state:
            load_optimizer_state(self.bc_opt, state["bc_opt"])
