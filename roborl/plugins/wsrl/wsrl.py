"""WSRL: warm-start RL, offline-to-online fine-tuning without retaining offline data.

Zhou, Peng, Li, Levine, Kumar, "Efficient Online Reinforcement Learning Fine-Tuning Need Not
Retain Offline Data", ICLR 2025, arXiv 2412.07762. Three phases driven by `train(runner)`:

1. Pre-training on `dataset=` with Cal-QL (Nakamoto et al., arXiv 2303.05479, the paper's
   default) or IQL (Kostrikov et al., arXiv 2110.06169, `pretrain: iql`). Cal-QL is CQL
   (Kumar et al. 2020, eq. 3; importance-sampled log-sum-exp over `cql_n_actions` uniform,
   pi(s) and pi(s') actions) whose policy-action Q-values inside the log-sum-exp are replaced by
   max(Q(s, a_pi), MC(s)) (Cal-QL eq. 5): the regulariser never pushes Q below the dataset's
   discounted Monte-Carlo return-to-go MC(s). TD target from a REDQ subsample of 2 of the 10
   target critics (min), no entropy backup (Cal-QL default).
2. Warm-up: an empty online buffer, `warmup_steps` (5,000) env steps rolled out with the frozen
   pre-trained policy (stochastic actions), no gradient updates.
3. Fine-tuning: plain SAC (no CQL term), UTD `utd_ratio` (4), batch 1024, 10 LayerNorm critics
   with a REDQ min over a random subsample of 2 for the target, entropy backup, actor on the
   ensemble mean; every network initialised from pre-training; no offline data in the buffer.

Baselines in the same class (configs `algo=wsrl_scratch|wsrl_rlpd|wsrl_no_warmup`): SAC from
scratch (`pretrain: none`, uniform random actions for the warm-up, as SAC's learning starts),
fine-tuning that keeps the offline data (`offline_ratio: 0.5`, RLPD-style symmetric sampling),
fine-tuning without warm-up (`warmup_steps: 0`).

Step axis: one continuous curve. During pre-training `step` counts gradient steps; online,
`step = pretrain_steps + env steps`. `train/phase` is 0 (pre-training), 1 (warm-up), 2
(fine-tuning); `phase/boundary_step` is logged once where online starts, and `wsrl.json` in the
run directory records it. `run.total_steps` is the online env-step budget.

Defaults checked against the public WSRL launch scripts (finetune.py with `--utd 4
--batch_size 1024 --warmup_steps 5000`; RLPD baseline `--offline_data_ratio 0.5`); their
locomotion scripts pre-train for 250k steps (`algo.pretrain_steps=250000`), other suites 1M.

Deviations / choices (stated, not hidden):
- cql_alpha defaults to 5.0 (Cal-QL's locomotion/antmaze value); set it per task.
- Fresh Adam state at the phase switch (weights and temperature carry over).
- A resumed online phase restarts the current episode (the env state is not checkpointed).
- The IQL actor is a tanh-Gaussian trained by advantage-weighted log-likelihood of the clipped
  dataset action, so SAC can fine-tune the same network.
- Online evaluation every `eval_every` env steps; pre-training evaluation every `eval_every`
  gradient steps.
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import atomic_write_json, load_checkpoint
from roborl.core.config import rng
from roborl.core.errors import CheckpointError, ConfigError, DatasetError
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import (
    ActionScaler,
    EnsembleMLP,
    TanhGaussianActor,
    obs_tensor,
    polyak_update,
)
from roborl.core.policies import SquashedGaussianPolicy
from roborl.core.spaces import flat_dim

PHASE_PRETRAIN, PHASE_WARMUP, PHASE_FINETUNE = 0, 1, 2


@dataclass
class WSRLConfig:
    pretrain: str = field(default="calql", metadata={"choices": ["calql", "cql", "iql", "none"]})
    pretrain_steps: int = field(default=1_000_000, metadata=rng(0, None, "gradient steps"))
    pretrain_batch_size: int = field(default=256, metadata=rng(1, None))
    warmup_steps: int = field(default=5_000, metadata=rng(0, None, "frozen-policy env steps"))
    utd_ratio: int = field(default=4, metadata=rng(1, 1024))
    batch_size: int = field(default=1024, metadata=rng(1, None))
    offline_ratio: float = field(default=0.0, metadata=rng(0.0, 1.0, "RLPD baseline: 0.5"))
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0))
    actor_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    alpha_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = field(default="relu", metadata={"choices": ["relu", "gelu", "elu", "silu"]})
    num_critics: int = field(default=10, metadata=rng(1, 64))
    critic_subsample: int = field(default=2, metadata=rng(1, 64))
    layer_norm: bool = True
    init_alpha: float = field(default=1.0, metadata=rng(1e-8, None))
    target_entropy: float | None = None
    cql_alpha: float = field(default=5.0, metadata=rng(0.0, None))
    cql_n_actions: int = field(default=10, metadata=rng(1, 1024))
    cql_temperature: float = field(default=1.0, metadata=rng(1e-6, None))
    iql_expectile: float = field(default=0.7, metadata=rng(0.5, 1.0))
    iql_temperature: float = field(default=3.0, metadata=rng(0.0, None))
    max_episode_steps: int = field(default=1000, metadata=rng(1, None))
    pretrained: str | None = None


def mc_returns(rewards: np.ndarray, episode_ends: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return-to-go within each episode (Cal-QL's lower bound MC(s))."""
    out = np.zeros(len(rewards), dtype=np.float64)
    start = 0
    for end in episode_ends:
        acc = 0.0
        for i in range(int(end) - 1, start - 1, -1):
            acc = float(rewards[i]) + gamma * acc
            out[i] = acc
        start = int(end)
    return out.astype(np.float32)


def calql_regulariser(
    q_data: torch.Tensor,
    q_rand: torch.Tensor,
    q_cur: torch.Tensor,
    logp_cur: torch.Tensor,
    q_next: torch.Tensor,
    logp_next: torch.Tensor,
    mc: torch.Tensor | None,
    act_dim: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """CQL's importance-sampled gap, per critic and sample: (E, B).

    q_* are (E, B, n); logp_* (B, n). With `mc` (B,) given (Cal-QL), policy-action values are
    max(Q, MC) so the push-down stops at the dataset's Monte-Carlo return.
    """
    if mc is not None:
        bound = mc.view(1, -1, 1)
        q_cur = torch.maximum(q_cur, bound)
        q_next = torch.maximum(q_next, bound)
    rand_density = act_dim * math.log(0.5)  # uniform on [-1, 1]^d
    cat = torch.cat(
        [q_rand - rand_density, q_next - logp_next.unsqueeze(0), q_cur - logp_cur.unsqueeze(0)],
        dim=-1,
    )
    lse = temperature * torch.logsumexp(cat / temperature, dim=-1)
    return lse - q_data


class WSRL(Algorithm):
    name = "wsrl"
    accepts_pretrained = True  # the runner's top-level `pretrained=CKPT` is honoured
    Config = WSRLConfig
    loop = "custom"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: WSRLConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(f"WSRL needs a continuous (Box) action space, got {action_space}.")
        cfg = config
        if cfg.critic_subsample > cfg.num_critics:
            raise ConfigError(
                f"algo.critic_subsample={cfg.critic_subsample} exceeds algo.num_critics="
                f"{cfg.num_critics}; the REDQ subsample must be at most the ensemble size."
            )
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.scaler = ActionScaler(action_space, self.device)
        hidden = list(cfg.hidden_sizes)
        self.actor = TanhGaussianActor(obs_dim, act_dim, hidden, cfg.activation).to(self.device)
        self.critic = EnsembleMLP(
            cfg.num_critics, obs_dim + act_dim, hidden, 1, cfg.activation, cfg.layer_norm
        ).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.value = EnsembleMLP(1, obs_dim, hidden, 1, cfg.activation, cfg.layer_norm).to(
            self.device
        )  # IQL's V (unused by Cal-QL and SAC)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_alpha), device=self.device, requires_grad=True
        )
        self.target_entropy = float(
            cfg.target_entropy if cfg.target_entropy is not None else -act_dim
        )
        self.phase = {"pretrain_updates": 0, "online_steps": 0, "pretrain_done": False}
        self.updates = 0
        self._make_optimizer()

    def _make_optimizer(self) -> None:
        cfg = self.config
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
                {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
                {"params": list(self.value.parameters()), "lr": cfg.critic_lr},
                {"params": [self.log_alpha], "lr": cfg.alpha_lr},
            ],
            foreach=self.device.type == "cpu",
        )

    # -- acting ------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        a = self.actor.deterministic(x) if deterministic else self.actor.sample(x)[0]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return SquashedGaussianPolicy(self.actor, self.observation_space, self.action_space)

    # -- losses ------------------------------------------------------------------------------

    def q(self, obs: torch.Tensor, unit_a: torch.Tensor, detach: bool = False) -> torch.Tensor:
        return self.critic(torch.cat([obs, unit_a], -1), detach).squeeze(-1)

    def _td_target(self, batch: Batch, obs_next: torch.Tensor, entropy: bool) -> torch.Tensor:
        cfg = self.config
        with torch.no_grad():
            na, nlogp = self.actor.sample(obs_next)
            qn = self.critic_target(torch.cat([obs_next, na], -1)).squeeze(-1)
            idx = torch.randperm(cfg.num_critics, device=self.device)[: cfg.critic_subsample]
            qn = qn[idx].min(0).values
            if entropy:
                qn = qn - self.log_alpha.exp() * nlogp
            return batch.rewards + cfg.gamma * (1.0 - batch.terminated) * qn

    def _actor_alpha_loss(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        alpha = self.log_alpha.exp().detach()
        pi_a, logp = self.actor.sample(obs)
        q_pi = self.q(obs, pi_a, detach=True).mean(0)
        actor_loss = (alpha * logp - q_pi).mean()
        alpha_loss = -(self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
        return actor_loss + alpha_loss, logp.detach()

    def _step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        polyak_update(self.critic_target.parameters(), self.critic.parameters(), self.config.tau)

    def update(self, batch: Batch) -> dict[str, Any]:
        """One online SAC step (no conservatism): REDQ target with entropy backup."""
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        target = self._td_target(batch, next_obs, entropy=True)
        q = self.q(obs, self.scaler.to_unit(batch.actions))
        critic_loss = (q - target).pow(2).mean(-1).sum()
        pi_loss, logp = self._actor_alpha_loss(obs)
        self._step(critic_loss + pi_loss)
        return {
            "critic_loss": critic_loss.detach(),
            "alpha": self.log_alpha.exp().detach(),
            "entropy": -logp.mean(),
            "q_mean": q.detach().mean(),
        }

    def pretrain_update(self, batch: Batch) -> dict[str, Any]:
        """One Cal-QL (or CQL / IQL) gradient step on an offline batch with `extras['mc']`."""
        if self.config.pretrain == "iql":
            return self._iql_update(batch)
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        target = self._td_target(batch, next_obs, entropy=False)
        q = self.q(obs, actions)
        td_loss = (q - target).pow(2).mean(-1).sum()

        b, n = obs.shape[0], cfg.cql_n_actions
        rep = obs.repeat_interleave(n, 0)
        rep_next = next_obs.repeat_interleave(n, 0)
        with torch.no_grad():
            a_cur, lp_cur = self.actor.sample(rep)
            a_next, lp_next = self.actor.sample(rep_next)
        a_rand = torch.rand(b * n, self.act_dim, device=self.device) * 2 - 1
        q_rand = self.q(rep, a_rand).view(-1, b, n)
        q_cur = self.q(rep, a_cur).view(-1, b, n)
        q_next = self.q(rep, a_next).view(-1, b, n)
        mc = batch.extras.get("mc") if cfg.pretrain == "calql" else None
        gap = calql_regulariser(
            q,
            q_rand,
            q_cur,
            lp_cur.view(b, n),
            q_next,
            lp_next.view(b, n),
            mc,
            self.act_dim,
            cfg.cql_temperature,
        )
        cql_loss = cfg.cql_alpha * gap.mean(-1).sum()
        pi_loss, logp = self._actor_alpha_loss(obs)
        self._step(td_loss + cql_loss + pi_loss)
        return {
            "td_loss": td_loss.detach(),
            "cql_gap": gap.detach().mean(),
            "alpha": self.log_alpha.exp().detach(),
            "entropy": -logp.mean(),
            "q_mean": q.detach().mean(),
        }

    def _iql_update(self, batch: Batch) -> dict[str, Any]:
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        with torch.no_grad():
            q_t = self.critic_target(torch.cat([obs, actions], -1)).squeeze(-1).min(0).values
            v_next = self.value(next_obs).squeeze(-1).squeeze(0)
            target = batch.rewards + cfg.gamma * (1.0 - batch.terminated) * v_next
        v = self.value(obs).squeeze(-1).squeeze(0)
        diff = q_t - v
        weight = torch.where(diff > 0, cfg.iql_expectile, 1 - cfg.iql_expectile)
        v_loss = (weight * diff.pow(2)).mean()
        q = self.q(obs, actions)
        q_loss = (q - target).pow(2).mean(-1).sum()
        adv_w = torch.exp(cfg.iql_temperature * diff.detach()).clamp(max=100.0)
        actor_loss = -(adv_w * self.actor.log_prob(obs, actions)).mean()
        self._step(v_loss + q_loss + actor_loss)
        return {"v_loss": v_loss.detach(), "td_loss": q_loss.detach(), "q_mean": q.detach().mean()}

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "value": self.value.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "phase": dict(self.phase),
        }

    def load_state_dict(self, state: Mapping[str, Any], weights_only: bool = False) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.value.load_state_dict(state["value"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if weights_only:
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))
        self.phase = dict(state.get("phase", self.phase))

    # -- the three phases --------------------------------------------------------------------

    def _dataset(self, runner: Any) -> Any:
        path = runner.run.dataset
        if not path:
            raise ConfigError(
                f"algo=wsrl with pretrain={self.config.pretrain!r} / offline_ratio="
                f"{self.config.offline_ratio} needs dataset=PATH (an .npz/.hdf5 file or a "
                "Minari dataset); or pass pretrained=CHECKPOINT, or algo.pretrain=none."
            )
        ds = runner.load_dataset(path)
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

    def train(self, runner: Any) -> None:
        cfg = self.config
        resumed = runner.resume_checkpoint is not None
        pretrained = self._pretrained_path(runner)
        need_data = cfg.offline_ratio > 0 or (
            cfg.pretrain != "none" and not self.phase["pretrain_done"] and not pretrained
        )
        ds = self._dataset(runner) if need_data else None
        if pretrained and not resumed:
            self._load_pretrained(pretrained)
            runner.step = self.phase["pretrain_updates"]
        if cfg.pretrain == "none":
            self.phase["pretrain_done"] = True
        if not self.phase["pretrain_done"]:
            self._pretrain(runner, ds)
        self._online(runner, ds)

    def _pretrained_path(self, runner: Any) -> str | None:
        """Top-level `pretrained=` (the issue's spelling) or its alias `algo.pretrained=`."""
        top = getattr(runner.run, "pretrained", None)
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

    def _pretrain(self, runner: Any, ds: Any) -> None:
        cfg, run = self.config, runner.run
        sums: dict[str, Any] = defaultdict(float)
        count, t0 = 0, time.time()
        while self.phase["pretrain_updates"] < cfg.pretrain_steps:
            metrics = self.pretrain_update(
                self._sample_offline(ds, cfg.pretrain_batch_size, runner.torch_gen)
            )
            for k, v in metrics.items():
                sums[k] = sums[k] + v
            count += 1
            self.phase["pretrain_updates"] += 1
            runner.updates += 1
            runner.advance(1)
            s = runner.step
            last = self.phase["pretrain_updates"] >= cfg.pretrain_steps
            if s % run.log_every == 0:
                rec = {f"train/{k}": float(v) / count for k, v in sums.items()}
                rec["train/phase"] = PHASE_PRETRAIN
                rec["time/updates_per_s"] = count / max(time.time() - t0, 1e-9)
                runner.log(rec)
                sums, count, t0 = defaultdict(float), 0, time.time()
            if s % run.eval_every == 0 and not last:
                runner.evaluate(self)
            if s % run.checkpoint_every == 0 and not last:
                runner.checkpoint(self)
        self.phase["pretrain_done"] = True
        self._make_optimizer()  # fresh Adam state for fine-tuning
        res = runner.evaluate(self)
        runner.extra_state["pretrain_final_return"] = res["return_mean"]
        runner.checkpoint(self, name="pretrained.pt")
        runner.checkpoint(self)

    def _online(self, runner: Any, ds: Any) -> None:
        cfg, run = self.config, runner.run
        boundary = self.phase["pretrain_updates"] if cfg.pretrain != "none" else 0
        runner.extra_state["phase_boundary_step"] = boundary
        atomic_write_json(
            runner.run_dir / "wsrl.json",
            {
                "phase_boundary_step": boundary,
                "pretrain": cfg.pretrain,
                "pretrain_final_return": runner.extra_state.get("pretrain_final_return"),
            },
        )
        buffer = ReplayBuffer(
            max(run.total_steps, 1), (self.obs_dim,), (self.act_dim,), device=self.device
        )
        self.online_buffer = buffer
        runner._buffer = buffer  # the runner's Ctrl-C checkpoint saves it too
        ckpt = runner.resume_checkpoint
        if ckpt is not None and "buffer" in ckpt:
            buffer.load_state_dict(ckpt["buffer"])
        if self.phase["online_steps"] == 0:
            runner.log({"phase/boundary_step": boundary, "train/phase": PHASE_WARMUP})
        env = runner.make_env(seed=run.seed + self.phase["online_steps"])
        obs, _ = env.reset(seed=run.seed + self.phase["online_steps"])
        env.action_space.seed(run.seed)
        ep_ret, ep_len = 0.0, 0
        n_off = round(cfg.batch_size * cfg.offline_ratio)
        sums: dict[str, Any] = defaultdict(float)
        count = 0
        while self.phase["online_steps"] < run.total_steps:
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
            runner.advance(1)
            if terminated or truncated or ep_len >= cfg.max_episode_steps:
                runner.episodes += 1
                runner.log({"train/episode_return": ep_ret, "train/episode_length": ep_len})
                obs, _ = env.reset()
                ep_ret, ep_len = 0.0, 0
            if not warm:  # the warm-up's steps collect only; updates start after it
                for _ in range(cfg.utd_ratio):
                    metrics = self.update(self._online_batch(buffer, ds, n_off, runner))
                    for k, v in metrics.items():
                        sums[k] = sums[k] + v
                    count += 1
                    runner.updates += 1
            s, k = runner.step, self.phase["online_steps"]
            if k % run.log_every == 0:
                rec = {f"train/{n}": float(v) / count for n, v in sums.items()} if count else {}
                rec["train/phase"] = PHASE_WARMUP if k <= cfg.warmup_steps else PHASE_FINETUNE
                rec["train/online_env_steps"] = k
                runner.log(rec, s)
                sums, count = defaultdict(float), 0
            if k % run.eval_every == 0:
                runner.evaluate(self)
            if k % run.checkpoint_every == 0:
                runner.checkpoint(self, buffer)
        env.close()
        if runner.last_eval is None or runner.last_eval.get("step") != runner.step:
            runner.evaluate(self)
        runner.checkpoint(self, buffer)

    def _online_batch(self, buffer: ReplayBuffer, ds: Any, n_off: int, runner: Any) -> Batch:
        cfg = self.config
        if n_off == 0 or ds is None:
            return buffer.sample(cfg.batch_size, runner.torch_gen)
        on = buffer.sample(cfg.batch_size - n_off, runner.torch_gen)
        off = self._sample_offline(ds, n_off, runner.torch_gen)
        return Batch(
            obs=torch.cat([on.obs, off.obs]),
            actions=torch.cat([on.actions, off.actions]),
            rewards=torch.cat([on.rewards, off.rewards]),
            next_obs=torch.cat([on.next_obs, off.next_obs]),
            terminated=torch.cat([on.terminated, off.terminated]),
        )
