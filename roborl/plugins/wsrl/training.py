"""WSRL's `train(ctx)`: pre-training, warm-up and fine-tuning, the three phases in order.

Apart from `wsrl.py` (the networks, losses and updates) so the algorithm file holds the
maths and this one the schedule: which phase runs, what each counts (`updates` while
pre-training, env steps online), the offline and online batches, and what is logged,
evaluated and checkpointed. `WSRLTraining` is a mixin of `WSRL`: its methods are WSRL's.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import atomic_write_json, load_checkpoint
from roborl.core.errors import CheckpointError, ConfigError, DatasetError
from roborl.core.interfaces import Batch
from roborl.plugins.wsrl.calql import mc_returns

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

PHASE_PRETRAIN, PHASE_WARMUP, PHASE_FINETUNE = 0, 1, 2


class WSRLTraining:
    """The phases of `WSRL.train`; mixed into `WSRL`, whose attributes they use."""

    def _dataset(self, ctx: TrainContext) -> Any:
        path = ctx.run.dataset
        if not path:
            raise ConfigError(
                f"algo=wsrl with pretrain={self.config.pretrain!r} / offline_ratio="
                f"{self.config.offline_ratio} needs dataset=PATH (an .npz/.hdf5 file or a "
                "Minari dataset); or pass pretrained=CHECKPOINT, or algo.pretrain=none."
            )
        ds = ctx.load_dataset(path)
        if ds.obs_dim != self.obs_dim or ds.action_dim != self.act_dim:
            raise DatasetError(
                f"dataset {path!r} has obs dim {ds.obs_dim} / action dim {ds.action_dim}, the "
                f"env has {self.obs_dim} / {self.act_dim}: collect it on the same env."
            )
        ds.to(self.device)
        mc = mc_returns(ds.rewards, ds.episode_ends(), self.config.gamma)
        self._mc = torch.as_tensor(mc, device=self.device)
        return ds

    def _sample_offline(self, ds: Any, n: int, gen: torch.Generator) -> Batch:
        idx = torch.randint(len(ds), (n,), generator=gen).to(self.device)
        t = ds._tensors
        return Batch(
            obs=t["obs"][idx],
            actions=t["actions"][idx],
            rewards=t["rewards"][idx],
            next_obs=t["next_obs"][idx],
            terminated=t["terminated"][idx],
            extras={"mc": self._mc[idx]},
        )

    def train(self, ctx: TrainContext) -> None:
        """Pre-training (counted in `ctx.updates`, `algo.pretrain_steps` of them), then the
        online phases (counted in env steps, `ctx.step`, up to `total_steps`)."""
        cfg = self.config
        resumed = ctx.resume_checkpoint is not None
        pretrained = self._pretrained_path(ctx)
        need_data = cfg.offline_ratio > 0 or (
            cfg.pretrain != "none" and not self.phase["pretrain_done"] and not pretrained
        )
        ds = self._dataset(ctx) if need_data else None
        if pretrained and not resumed:
            self._load_pretrained(pretrained)
        if cfg.pretrain == "none":
            self.phase["pretrain_done"] = True
        if not self.phase["pretrain_done"]:
            self._pretrain(ctx, ds)
        self._online(ctx, ds)

    def _pretrained_path(self, ctx: TrainContext) -> str | None:
        """Top-level `pretrained=` (the issue's spelling) or its alias `algo.pretrained=`."""
        top = ctx.run.pretrained
        alias = self.config.pretrained
        if top and alias and str(top) != str(alias):
            raise ConfigError(
                f"pretrained={top!r} and algo.pretrained={alias!r} disagree; give one of them "
                "(algo.pretrained is an alias of the top-level pretrained=)."
            )
        return top or alias

    def _load_pretrained(self, path: str) -> None:
        ckpt = load_checkpoint(path, map_location=str(self.device))
        if ckpt.get("algo") != self.name or not ckpt["state"].get("phase", {}).get("pretrain_done"):
            raise CheckpointError(
                f"pretrained={path!r} is not a WSRL checkpoint taken after pre-training "
                f"(algo={ckpt.get('algo')!r}); use checkpoints/pretrained.pt of a wsrl run."
            )
        self.load_state_dict(ckpt["state"], weights_only=True)
        self.phase = {
            "pretrain_updates": int(ckpt["state"]["phase"]["pretrain_updates"]),
            "online_steps": 0,
            "pretrain_done": True,
        }

    def _pretrain(self, ctx: TrainContext, ds: Any) -> None:
        cfg = self.config
        ctx.begin("updates", total=cfg.pretrain_steps)
        sums: dict[str, Any] = defaultdict(float)
        count, t0 = 0, time.time()
        while self.phase["pretrain_updates"] < cfg.pretrain_steps:
            metrics = self.pretrain_update(
                self._sample_offline(ds, cfg.pretrain_batch_size, ctx.torch_gen)
            )
            for k, v in metrics.items():
                sums[k] = sums[k] + v
            count += 1
            self.phase["pretrain_updates"] += 1
            ctx.advance(updates=1)
            last = self.phase["pretrain_updates"] >= cfg.pretrain_steps
            if ctx.due("log"):
                rec = {f"train/{k}": float(v) / count for k, v in sums.items()}
                rec["train/phase"] = PHASE_PRETRAIN
                rec["time/updates_per_s"] = count / max(time.time() - t0, 1e-9)
                ctx.log(rec)
                sums, count, t0 = defaultdict(float), 0, time.time()
            if ctx.due("eval") and not last:
                ctx.evaluate(self)
            if ctx.due("checkpoint") and not last:
                ctx.checkpoint(self)
        self.phase["pretrain_done"] = True
        self._make_optimizer()  # fresh Adam state for fine-tuning
        res = ctx.evaluate(self)
        ctx.set_extra("pretrain_final_return", res["return_mean"])
        ctx.checkpoint(self, name="pretrained.pt")
        ctx.checkpoint(self)

    def _online(self, ctx: TrainContext, ds: Any) -> None:
        cfg, run = self.config, ctx.run
        boundary = self.phase["pretrain_updates"] if cfg.pretrain != "none" else 0
        ctx.set_extra("phase_boundary_updates", boundary)
        atomic_write_json(
            ctx.run_dir / "wsrl.json",
            {
                "phase_boundary_step": 0,  # online starts at env step 0
                "phase_boundary_updates": boundary,
                "pretrain": cfg.pretrain,
                "pretrain_final_return": ctx.extra.get("pretrain_final_return"),
            },
        )
        buffer = ReplayBuffer(
            max(run.total_steps, 1), (self.obs_dim,), (self.act_dim,), device=self.device
        )
        self.online_buffer = buffer
        ctx.attach(self, buffer)  # an interrupt's final checkpoint saves the buffer too
        ckpt = ctx.resume_checkpoint
        if ckpt is not None and "buffer" in ckpt:
            buffer.load_state_dict(ckpt["buffer"])
        ctx.begin("steps")
        if self.phase["online_steps"] == 0:
            ctx.log({"phase/boundary_updates": boundary, "train/phase": PHASE_WARMUP})
        env = ctx.make_env(seed=run.seed + self.phase["online_steps"])
        obs, _ = env.reset(seed=run.seed + self.phase["online_steps"])
        env.action_space.seed(run.seed)
        ep_ret, ep_len = 0.0, 0
        n_off = round(cfg.batch_size * cfg.offline_ratio)
        sums: dict[str, Any] = defaultdict(float)
        count = 0
        # ctx.finished: the budget is used up, or a plugin asked to stop (roborl_should_stop)
        while self.phase["online_steps"] < run.total_steps and not ctx.finished:
            warm = self.phase["online_steps"] < cfg.warmup_steps
            if warm and cfg.pretrain == "none":
                action = env.action_space.sample()
            else:  # during warm-up the pre-trained policy is frozen: no update happens yet
                action = self.act(np.asarray(obs, dtype=np.float32)[None])[0]
            next_obs, reward, terminated, truncated, _ = env.step(action)
            buffer.add(
                obs[None],
                action[None],
                np.array([reward]),
                next_obs[None],
                np.array([float(terminated)]),
            )
            ep_ret += float(reward)
            ep_len += 1
            obs = next_obs
            self.phase["online_steps"] += 1
            ctx.advance(env_steps=1)
            if terminated or truncated or ep_len >= cfg.max_episode_steps:
                ctx.record_episode(ep_ret, ep_len)
                obs, _ = env.reset()
                ep_ret, ep_len = 0.0, 0
            if not warm:  # the warm-up's steps collect only; updates start after it
                # one update = utd_ratio critic steps + one actor step (official high-UTD)
                metrics = self.update(self._online_batch(buffer, ds, n_off, ctx))
                for k, v in metrics.items():
                    sums[k] = sums[k] + v
                count += 1
                ctx.advance(updates=cfg.utd_ratio)
            k = self.phase["online_steps"]
            if ctx.due("log"):
                rec = {f"train/{n}": float(v) / count for n, v in sums.items()} if count else {}
                rec["train/phase"] = PHASE_WARMUP if k <= cfg.warmup_steps else PHASE_FINETUNE
                rec["train/online_env_steps"] = k
                ctx.log(rec)
                sums, count = defaultdict(float), 0
            if ctx.due("eval"):
                ctx.evaluate(self)
            if ctx.due("checkpoint"):
                ctx.checkpoint(self, buffer)
        env.close()
        ctx.finish(self, buffer)

    def _online_batch(self, buffer: ReplayBuffer, ds: Any, n_off: int, ctx: TrainContext) -> Batch:
        cfg = self.config
        if n_off == 0 or ds is None:
            return buffer.sample(cfg.batch_size, ctx.torch_gen)
        on = buffer.sample(cfg.batch_size - n_off, ctx.torch_gen)
        off = self._sample_offline(ds, n_off, ctx.torch_gen)
        return Batch(
            obs=torch.cat([on.obs, off.obs]),
            actions=torch.cat([on.actions, off.actions]),
            rewards=torch.cat([on.rewards, off.rewards]),
            next_obs=torch.cat([on.next_obs, off.next_obs]),
            terminated=torch.cat([on.terminated, off.terminated]),
        )
