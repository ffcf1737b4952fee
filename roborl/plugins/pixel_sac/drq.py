"""Pixel soft actor-critic: DrQ, and RLPD as SERL runs it on camera images.

Papers and code read:

- DrQ: Kostrikov, Yarats, Fergus, "Image Augmentation Is All You Need: Regularizing Deep
  Reinforcement Learning from Pixels", ICLR 2021, arXiv 2004.13649 (code: denisyarats/drq).
  SAC on features of a conv encoder shared by actor and critic and trained by the critic loss
  only (the actor sees detached features); random shift (pad 4, replicate, random crop) of obs
  and next obs, drawn INDEPENDENTLY for the two (Algorithm 1: nu_i for s, nu'_k for s');
  target y = r + gamma (min_j Q'_j(f(s', nu'), a') - alpha log pi(a'|f(s', nu'))) (eq. 3),
  critic loss (Q(f(s, nu), a) - y)^2 (eq. 4). DMC defaults: Adam 1e-3, critic tau 0.01,
  encoder tau 0.05, initial temperature 0.1, batch 512 (128 for PlaNet tasks), features 50,
  log-std in [-10, 2], K = M = 2 augmented copies.
- DrQ-v2: Yarats, Fergus, Lazaric, Pinto, "Mastering Visual Continuous Control: Improved
  Data-Augmented Reinforcement Learning", arXiv 2107.09645 (code: facebookresearch/drqv2).
  The conv encoder used here (Sec. 3: 4 x 3x3 conv, 32 channels, first stride 2) and the
  Linear -> LayerNorm -> tanh trunk of 50 features; shift by bilinear `grid_sample` with
  integer offsets, again independent for obs and next obs (two `aug` calls in `update`);
  frames stacked along channels, so all frames of one observation shift together.
- RLPD: Ball, Smith, Kostrikov, Levine, "Efficient Online Reinforcement Learning with Offline
  Data", ICML 2023, arXiv 2302.02948 (code: ikostrikov/rlpd). Three changes to SAC (Sec. 3):
  symmetric sampling, half of each batch from the prior data and half online (Sec. 3.1);
  LayerNorm in the critics (eq. 2, Sec. 3.2); a large ensemble with a random subset for the
  target (10 critics, min over 2, as REDQ) and a high update-to-data ratio G = 20 (Sec. 3.3).
  The code's `update(batch, utd_ratio)` splits a batch of batch_size * G rows into G
  minibatches, takes a critic step on each and ONE actor/temperature step on the last; actor
  loss with the ensemble MEAN of Q; temperature initialised at 1, target entropy -dim(A)/2;
  critic loss averaged over the ensemble; Adam 3e-4, tau 0.005, gamma 0.99, 256x256 MLPs.
- SERL: Luo et al., "SERL: A Software Suite for Sample-Efficient Robotic Reinforcement
  Learning", ICRA 2024, arXiv 2401.16013 (code: rail-berkeley/serl, `serl_launcher/agents/
  continuous/drq.py`, `utils/launcher.py`, `examples/async_drq_sim`). DrQ + RLPD on cameras:
  the encoder shared by actor and critic with a stop-gradient on the actor side, random crop
  (pad 4) of obs and next obs with two independent keys, critics with LayerNorm and tanh, an
  ensemble with a random subset for the target (`critic_ensemble_size`,
  `critic_subsample_size`; 10/2 in `make_sac_agent`), no entropy term in the backup
  (`backup_entropy=False`), temperature from 1e-2, 50/50 demo/online batches, and
  `critic_actor_ratio` = 4 critic steps per actor step.

- BC with the Q-filter: Nair, McGrew, Andrychowicz, Zaremba, Abbeel, "Overcoming Exploration
  in Reinforcement Learning with Demonstrations", ICRA 2018, arXiv 1709.10089 (Sec. IV-B/C):
  an auxiliary actor loss lambda_2 sum_i ||pi(s_i) - a_i||^2 over demo transitions, counted
  only where Q(s_i, a_i) > Q(s_i, pi(s_i)). Off by default (`bc_weight` 0: neither SERL nor
  RLPD has it); issue 48's state gate measures it. Here the demo rows are the batch's
  `is_demo` rows of the last minibatch (demos and a person's interventions, HIL-SERL's demo
  buffer), pi(s) is the mean action, Q is reduced over the ensemble as in the actor loss, and
  the term is averaged over the demo rows where the paper sums (so `bc_weight` is per row).

Two algorithms with these defaults:

- ``algo=drq``: pixel SAC from scratch (DrQ): 2 critics, min of both in target and actor
  loss, no LayerNorm, entropy in the backup, `critic_steps` 1.
- ``algo=rlpd``: RLPD with its official pixel config (`configs/rlpd_pixels_config.py` over
  `drq_config.py`): 10 LayerNorm critics, the target from ONE random critic of the ensemble
  (`num_min_qs=1`), no entropy term in the backup (`backup_entropy=False`), initial
  temperature 0.1, target entropy -dim(A)/2, ensemble mean in the actor loss; `critic_steps` 4
  (critic updates per env step at the run's default utd_ratio=1: SERL's critic_actor_ratio),
  learning from `demos=PATH` with `demo_fraction=0.5` (the off-policy loop's symmetric sampling
  marks demo rows in `Batch.extras["is_demo"]`; `critic_steps` splits each half evenly over
  the minibatches).
- ``algo=serl`` (a preset over rlpd): SERL's `make_drq_agent`: discount 0.96, tanh and
  LayerNorm in actor and critics, target min over 2 of 10 critics, no entropy backup,
  temperature from 1e-2, target entropy -dim(A)/2.

A Dict of states alone (no camera key) is accepted too: the encoder is then the identity on
the concatenated states and nothing is augmented, so the same algorithm runs on the task's
state (issue 48's state gate, `env.kwargs.cameras=[]` on the Fetch tasks).

Deviations (each a config value where it is one):

- Encoder: one conv net per camera key, shared by actor and critic, followed by a shared
  LayerNorm/tanh trunk (DrQ's and SERL's layout); DrQ-v2 gives actor and critic separate
  trunks on the shared conv output. State keys are appended to the features untouched
  (SERL passes them through a Dense+LayerNorm+tanh "proprio" layer).
- One augmented copy per transition (K = M = 1, as DrQ-v2 and SERL); DrQ averages the
  target over K = 2 shifted next observations and the loss over M = 2 shifted observations.
- Augmentation: the replicate-pad random crop of DrQ's own (kornia) code, as one gather, for
  every image key independently; `shift_next_obs=same` applies one offset to obs and next
  obs (the consistent variant), off by default because DrQ, DrQ-v2 and SERL all draw them
  apart. The papers pad by 4 pixels at 84-128 px; `image_pad_fraction` sets the pad as a
  share of the image side instead (issue 48: at 32 px, 4 pixels are 12.5% of the view).
- The target encoder is a Polyak copy (DrQ and SERL keep one; DrQ-v2 encodes next obs with
  the online encoder), updated with `encoder_tau`.
- algo=drq: batch 256 (DrQ 512), 256x256 MLPs (DrQ 1024x1024), actor and target updated
  every step (DrQ every 2nd), Adam 1e-3 (DrQ's DMC value).
- algo=rlpd: `critic_steps` 4 (RLPD's G = 20 is too slow for pixels on a CPU; SERL's ratio
  is 4). RLPD's state-based config differs from its pixel one (min over 2 critics, entropy
  in the backup, temperature from 1.0): set `algo.critic_subsample=2
  algo.backup_entropy=true algo.init_alpha=1.0` for it.
- algo=serl: SERL's frozen pretrained ResNet-10 encoder is not available (no weights can be
  downloaded here); the encoder is DrQ-v2's conv net trained by the critic, as in algo=rlpd.
  `algo.pretrained_encoder=CLASSIFIER` is the frozen-encoder variant with weights made here:
  the conv net of a success classifier trained on the task's frames (`roborl reward train`;
  supervised on success labels, where SERL's ResNet is pre-trained on ImageNet), frozen, with
  the Linear/LayerNorm/tanh trunk still trained by the critic.
- No dropout in the critics (some SERL launch configs add 0.1, as DroQ), PyTorch's default
  initialisation instead of orthogonal/Xavier.
- The actor step reuses the last minibatch's features, computed before that minibatch's
  critic step (detached, so it is the same loss up to one encoder step's staleness; saves
  one encoder forward per update).
- Critic steps see minibatches of `batch_size / critic_steps` rows: the loop samples
  `batch_size` transitions per update call, RLPD samples batch_size * G.

Speed (no effect on the maths): the minibatches are fixed row indices made once per layout
whenever the demo rows form one known block (`_demo_layout`: the loop's symmetric sampling
sets `Batch.demo_rows`), so the update has static shapes and never waits for the device; a
scattered mask, or a GPU mask without `demo_rows`, takes the `nonzero` path, with the same
rows. `capture` (CUDA) records the whole update (augmentation, every critic step, actor,
temperature, Polyak updates: `_update_step`) as one CUDA graph per layout with capturable
fused Adam (`roborl.core.compile.CapturedUpdate`); elsewhere it runs eagerly with a one-line
warning and the same numbers (tests/sac/test_static_update_equivalence.py).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.actor_critic import require_box
from roborl.core.actor_graph import ActorGraph, observation_inputs
from roborl.core.compile import CapturedUpdate
from roborl.core.errors import CheckpointError
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import (
    ActionScaler,
    EnsembleMLP,
    TanhGaussianActor,
    fused_adam,
    load_optimizer_state,
    polyak_update,
)
from roborl.core.obs import to_torch
from roborl.plugins.pixel_sac.config import DrQConfig, RLPDConfig
from roborl.plugins.pixel_sac.encoder import (
    ObsEncoder,
    RandomShift,
    as_state_dict,
    load_pretrained_conv,
    require_pixel_space,
    shift_pad,
)
from roborl.plugins.pixel_sac.policy import PixelActorGraph, PixelPolicy

log = logging.getLogger(__name__)


class DrQ(Algorithm):
    """Pixel SAC (see the module docstring for papers, equations and deviations)."""

    name = "drq"
    Config = DrQConfig
    loop = "offpolicy"
    accepts_dict_obs = True

    @property
    def default_target_entropy(self) -> float:
        """-dim(A): SAC's and DrQ's heuristic, used when `target_entropy` is null."""
        return -float(self.act_dim)

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DrQConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        space = require_pixel_space(observation_space, self.name)
        require_box(action_space, self.name)
        cfg = config
        self.act_dim = int(np.prod(action_space.shape))
        self.scaler = ActionScaler(action_space, self.device)
        self.encoder = ObsEncoder(
            space, cfg.feature_dim, cfg.conv_channels, cfg.conv_layers, cfg.conv_strided
        ).to(self.device)
        if cfg.pretrained_encoder:
            load_pretrained_conv(self.encoder, cfg.pretrained_encoder)
        feat = self.encoder.out_dim
        hidden = list(cfg.hidden_sizes)
        self.actor = TanhGaussianActor(
            feat,
            self.act_dim,
            hidden,
            cfg.activation,
            (cfg.log_std_min, cfg.log_std_max),
            layer_norm=cfg.actor_layer_norm,
        ).to(self.device)
        self.critic = EnsembleMLP(
            cfg.num_critics, feat + self.act_dim, hidden, 1, cfg.activation, cfg.critic_layer_norm
        ).to(self.device)
        self.encoder_target = copy.deepcopy(self.encoder).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_alpha), device=self.device, requires_grad=cfg.autotune_alpha
        )
        self.target_entropy = float(
            cfg.target_entropy if cfg.target_entropy is not None else self.default_target_entropy
        )
        self.shift = RandomShift(shift_pad(space, cfg.image_pad, cfg.image_pad_fraction))
        # The critic's optimiser owns the encoder: only the critic loss trains it.
        capturable = cfg.capture and self.device.type == "cuda"
        self.critic_opt = fused_adam(
            [*self.encoder.parameters(), *self.critic.parameters()], cfg.critic_lr, capturable
        )
        self.actor_opt = fused_adam(self.actor.parameters(), cfg.actor_lr, capturable)
        self.alpha_opt = fused_adam([self.log_alpha], cfg.alpha_lr, capturable)
        self.updates = 0
        self._warned_no_demos = False
        self._splits: dict[tuple[int, int, int], list[torch.Tensor]] = {}
        self._capture = CapturedUpdate(
            self._layout_step,
            enabled=cfg.capture,
            device=self.device,
            name=self.name,
            before_capture=self._zero_grads,
        )

    # -- acting ------------------------------------------------------------------------------

    def features(self, obs: Mapping[str, torch.Tensor], augment: bool = False) -> torch.Tensor:
        """Encoder features of a batch of tensor observations (optionally shifted)."""
        images = self.encoder.images(obs)
        if augment:
            images = {k: self.shift(v) for k, v in images.items()}
        return self.encoder(images, obs)

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = False) -> np.ndarray:
        x = self.features(as_state_dict(to_torch(obs, self.device)))
        a = self.actor.deterministic(x) if deterministic else self.actor.sample(x)[0]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return PixelPolicy(self)

    def actor_graph(self) -> ActorGraph:
        """`policy()` as tensor ops for ONNX export: one input per observation entry (camera
        frames uint8), encoder, tanh(mean), scaled to the bounds; no augmentation."""
        keys = list(require_pixel_space(self.observation_space, self.name).spaces)
        module = PixelActorGraph(self.encoder, self.actor, self.action_space, keys)
        return ActorGraph(module, observation_inputs(self.observation_space))

    # -- learning ----------------------------------------------------------------------------

    def augment(
        self, obs: Mapping[str, torch.Tensor], next_obs: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Channels-first, randomly shifted images of obs and next obs (per `shift_next_obs`)."""
        a, b = self.encoder.images(obs), self.encoder.images(next_obs)
        if self.config.shift_next_obs == "same":
            pairs = {k: self.shift(a[k], b[k]) for k in a}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        return {k: self.shift(v) for k, v in a.items()}, {k: self.shift(v) for k, v in b.items()}

    def critic_loss(
        self,
        images: Mapping[str, torch.Tensor],
        obs: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_images: Mapping[str, torch.Tensor],
        next_obs: Mapping[str, torch.Tensor],
        not_done_discount: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """TD loss (DrQ eq. 4; ensemble mean as RLPD/SERL), its features and Q values.

        `actions` are in [-1, 1]; `not_done_discount` is gamma^n (1 - terminated).
        """
        cfg = self.config
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_feat = self.encoder(next_images, next_obs)
            next_a, next_logp = self.actor.sample(next_feat)
            target_feat = self.encoder_target(next_images, next_obs)
            q_next = self.critic_target(torch.cat([target_feat, next_a], -1)).squeeze(-1)
            if cfg.critic_subsample is not None and cfg.critic_subsample < cfg.num_critics:
                pick = torch.randperm(cfg.num_critics, device=self.device)[: cfg.critic_subsample]
                q_next = q_next[pick]
            v_next = q_next.min(0).values
            if cfg.backup_entropy:
                v_next = v_next - alpha * next_logp
            target = rewards + not_done_discount * v_next
        feat = self.encoder(images, obs)
        q = self.critic(torch.cat([feat, actions], -1)).squeeze(-1)
        return (q - target).pow(2).mean(), feat, q

    def actor_loss(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha log pi - Q(s, pi)] on DETACHED features: no gradient reaches the encoder,
        and the critics are evaluated with detached weights (gradients reach the action)."""
        feat = feat.detach()
        pi_a, logp = self.actor.sample(feat)
        q = self.critic(torch.cat([feat, pi_a], -1), detach=True).squeeze(-1)
        q_pi = q.min(0).values if self.config.actor_q == "min" else q.mean(0)
        alpha = self.log_alpha.detach().exp()
        return (alpha * logp - q_pi).mean(), logp

    def bc_loss(
        self, feat: torch.Tensor, actions: torch.Tensor, is_demo: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Nair et al. (2018)'s behaviour cloning with the Q-filter, on the demo rows: the
        squared distance of the policy's mean action to the demo's, counted where the critics
        (reduced as in the actor loss) rate the demo action above the policy's. Averaged over
        the demo rows (the paper sums over its demo minibatch). Returns the loss and the
        fraction of demo rows the filter kept."""
        feat = feat.detach()
        mu = self.actor.deterministic(feat)
        demo = is_demo.reshape(-1).to(mu.dtype)
        keep = demo
        if self.config.bc_q_filter:
            with torch.no_grad():
                both = torch.cat([torch.cat([feat, actions], -1), torch.cat([feat, mu], -1)])
                q = self.critic(both).squeeze(-1)
                q = q.min(0).values if self.config.actor_q == "min" else q.mean(0)
                q_demo, q_pi = q.chunk(2)
            keep = demo * (q_demo > q_pi).to(mu.dtype)
        n_demo = demo.sum().clamp(min=1.0)
        loss = (keep * (mu - actions).pow(2).sum(-1)).sum() / n_demo
        return loss, keep.sum() / n_demo

    def _demo_layout(self, batch: Batch) -> tuple[int, int, int] | None:
        """(rows, first demo row, demo rows) when the demo rows are one contiguous block
        known without reading the device: no `is_demo` (no demo rows), `Batch.demo_rows` (the
        loop's symmetric sampling puts them last), or a CPU mask holding one block. None
        otherwise (a scattered mask, or one on the GPU without `demo_rows`)."""
        n = len(batch)
        mask = batch.extras.get("is_demo")
        if mask is None:
            return (n, 0, 0)
        if batch.demo_rows is not None:
            return (n, n - batch.demo_rows, batch.demo_rows)
        if mask.device.type != "cpu":
            return None
        m = mask.reshape(-1).bool()
        d = int(m.sum())
        start = int(m.to(torch.uint8).argmax()) if d else 0
        return (n, start, d) if bool(m[start : start + d].all()) else None

    def _split(self, layout: tuple[int, int, int]) -> list[torch.Tensor]:
        """Row indices of the `critic_steps` minibatches for a block layout, made once per
        layout: each minibatch is its share of the demo rows, then its share of the online
        rows (`tensor_split` of each, in row order), as `_minibatches` always split them."""
        split = self._splits.get(layout)
        if split is None:
            n, start, d = layout
            k = self.config.critic_steps
            rows = torch.arange(n)
            demo = rows[start : start + d].tensor_split(k)
            online = torch.cat([rows[:start], rows[start + d :]]).tensor_split(k)
            split = [torch.cat([a, b]).to(self.device) for a, b in zip(demo, online)]
            self._splits[layout] = split
        return split

    def _minibatches(self, batch: Batch) -> list[torch.Tensor]:
        """Row indices of `critic_steps` minibatches; demo and online rows split evenly.

        Static shapes where the layout is known (`_demo_layout`): fixed indices made once, no
        device read. Otherwise (a scattered mask, or a GPU mask without `Batch.demo_rows`) the
        rows are found with `nonzero`, which waits for the device: the same rows either way."""
        layout = self._demo_layout(batch)
        if layout is not None:
            return self._split(layout)
        k = self.config.critic_steps
        mask = batch.extras["is_demo"].reshape(-1).bool().to(self.device)
        demo = mask.nonzero().squeeze(-1).tensor_split(k)
        online = (~mask).nonzero().squeeze(-1).tensor_split(k)
        return [torch.cat([d, o]) for d, o in zip(demo, online)]

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """`critic_steps` critic steps on minibatches of `batch`, then one actor and
        temperature step on the last minibatch's (detached) features.

        The tensor work is `_update_step`; with `capture` and a known demo layout it is one
        CUDA graph per layout (`_layout_step`), else eager. The counter moves here."""
        if isinstance(self.observation_space, gym.spaces.Dict) and not isinstance(
            batch.obs, Mapping
        ):
            raise TypeError(f"algo={self.name} expects Dict batches, got {type(batch.obs)}")
        inputs = (
            as_state_dict(to_torch(batch.obs, self.device)),
            as_state_dict(to_torch(batch.next_obs, self.device)),
            batch.actions.to(self.device), batch.rewards, batch.terminated,
            batch.require_discount(self.name),
            batch.extras.get("is_demo"),
        )  # fmt: skip
        layout = self._demo_layout(batch)
        if layout is None:
            metrics = self._update_step(self._minibatches(batch), *inputs)
        else:
            metrics = self._capture(layout, *inputs)
        self.updates += 1
        return metrics

    def _layout_step(self, layout: tuple[int, int, int], *inputs: Any) -> dict[str, torch.Tensor]:
        return self._update_step(self._split(layout), *inputs)

    def _zero_grads(self) -> None:
        for opt in (self.critic_opt, self.actor_opt, self.alpha_opt):
            opt.zero_grad(set_to_none=True)

    def _update_step(
        self,
        minibatches: list[torch.Tensor],
        obs: dict[str, torch.Tensor],
        next_obs: dict[str, torch.Tensor],
        env_actions: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor,
        is_demo: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """Augmentation, every critic step, the actor and temperature steps and the Polyak
        updates on `minibatches` (row indices): tensor work only, so it can be captured."""
        cfg = self.config
        images, next_images = self.augment(obs, next_obs)
        actions = self.scaler.to_unit(env_actions)
        ndd = discount * (1.0 - terminated)

        def rows(x: Any, idx: torch.Tensor) -> Any:
            if isinstance(x, Mapping):
                return {key: v[idx] for key, v in x.items()}
            return x[idx]

        critic_losses = []
        for idx in minibatches:
            loss, feat, q = self.critic_loss(
                rows(images, idx), rows(obs, idx), actions[idx], rewards[idx],
                rows(next_images, idx), rows(next_obs, idx), ndd[idx],
            )  # fmt: skip
            self.critic_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.critic_opt.step()
            polyak_update(self.critic_target.parameters(), self.critic.parameters(), cfg.tau)
            polyak_update(
                self.encoder_target.parameters(), self.encoder.parameters(), cfg.encoder_tau
            )
            critic_losses.append(loss.detach())
        actor_loss, logp = self.actor_loss(feat)
        extra: dict[str, torch.Tensor] = {}
        if cfg.bc_weight > 0 and is_demo is not None:
            bc, kept = self.bc_loss(feat, actions[idx], is_demo[idx])
            actor_loss = actor_loss + cfg.bc_weight * bc
            extra = {"bc_loss": bc.detach(), "bc_kept": kept.detach()}
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        metrics = {
            "critic_loss": torch.stack(critic_losses).mean(),
            "actor_loss": actor_loss.detach(),
            "entropy": -logp.detach().mean(),
            "q_mean": q.detach().mean(),
            "alpha": self.log_alpha.detach().exp(),
            **extra,
        }
        if cfg.autotune_alpha:
            alpha_loss = -(self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
            self.alpha_opt.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_opt.step()
        if is_demo is not None:
            metrics["demo_fraction"] = is_demo.float().mean()
        return metrics

    # -- state -------------------------------------------------------------------------------

    _NETWORKS = ("encoder", "encoder_target", "actor", "critic", "critic_target")

    def state_dict(self) -> dict[str, Any]:
        return {
            **{k: getattr(self, k).state_dict() for k in self._NETWORKS},
            "log_alpha": self.log_alpha.detach().clone(),
            "critic_opt": self.critic_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in self._NETWORKS:
            try:
                getattr(self, key).load_state_dict(state[key])
            except (RuntimeError, KeyError) as exc:
                detail = " ".join(str(exc).split())[:400]
                raise CheckpointError(
                    f"the checkpoint's {key!r} does not fit algo={self.name} as configured "
                    "(the observation space, feature_dim, conv_channels, conv_layers, "
                    "hidden_sizes, num_critics and critic_layer_norm decide the layout): "
                    f"{detail}"
                ) from None
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for key in ("critic_opt", "actor_opt", "alpha_opt"):
            if key in state:
                load_optimizer_state(getattr(self, key), state[key])
        self.updates = int(state.get("updates", 0))
        self._capture.reset()  # graphs recorded the replaced optimiser state


class RLPD(DrQ):
    """RLPD on pixels as SERL runs it (see the module docstring); same networks as DrQ."""

    name = "rlpd"
    Config = RLPDConfig

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        if "is_demo" not in batch.extras and not self._warned_no_demos:
            self._warned_no_demos = True
            log.warning(
                "algo=rlpd got a batch without demonstrations: give demos=PATH (and "
                "demo_fraction, 0.5 = RLPD's symmetric sampling) to learn from them; "
                "without, it trains online only with RLPD's critics and UTD."
            )
        return super().update(batch)

    @property
    def default_target_entropy(self) -> float:
        """-dim(A)/2: RLPD's and SERL's SAC default."""
        return -self.act_dim / 2


__all__ = ["RLPD", "DrQ", "DrQConfig", "PixelPolicy", "RLPDConfig"]
