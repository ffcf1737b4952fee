"""VLA-RL's PPO iteration equals PPO's equations on a recorded rollout (float64 reference).

What `VLARL.ppo_iteration` claims (its docstring; Lu et al. 2025 and the official defaults):
- reward per env step: the env's reward, plus gamma V(s_final) on a time-limit truncation,
  plus the centred process reward prm_coef (sigmoid(RPRM(s, a)) - 0.5);
- GAE (Schulman et al. 2016, eq. 16): A_t = sum_l (gamma lambda)^l delta_{t+l} within the
  episode, delta_t = r_t + gamma (1 - done_t) V(s_{t+1}) - V(s_t), returns R = A + V;
  no advantage normalisation;
- log pi(a|s) = sum of the action tokens' log-probs under softmax(logits / temperature), for
  the stored (rollout) and the recomputed (trainer) log-prob alike;
- per minibatch (a random permutation per epoch): the critic's clipped value loss
  0.5 E[max((V - R)^2, (V_old + clip(V - V_old, -eps_v, eps_v) - R)^2)], then (after the
  critic's warm-up iterations) the clipped surrogate -E[min(rho A, clip(rho, 1 - eps,
  1 + eps) A)], rho = exp(log pi - log pi_old) (PPO eq. 7); no KL or entropy term in the
  loss (entropy is reported); each network's gradient clipped to global norm 1, then Adam;
- the rollout copy gets the trained weights at the end of the iteration.

The reference runs float64 copies of the networks (the Llama blocks' forward is
transformers'; the vision encoder, the log-probs, entropy, GAE, losses, clipping and Adam are
written here) on what the algorithm's rollout recorded: images, tasks, the sampled tokens
and the env's replies. The minibatch order is replayed from the algorithm's generator.
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from update_reference import Adam, approx, assert_grads, assert_values

import roborl.plugins.vla_rl.algorithm as vla_module
from roborl.plugins.vla_rl.algorithm import VLARL, VLARLConfig
from roborl.plugins.vla_rl.curriculum import SuccessCurriculum

N_ENVS, T_ROLL, TEMP = 2, 5, 1.5
CFG = {"hidden_size": 16, "layers": 1, "heads": 2, "num_envs": N_ENVS,
       "rollout_steps": T_ROLL, "temperature": TEMP, "epochs": 2, "minibatches": 2,
       "lr": 3e-3, "value_lr": 2e-3, "clip": 0.1, "value_clip": 0.05, "max_grad_norm": 1.0,
       "critic_warmup_iterations": 1, "prm_coef": 0.5, "gamma": 0.9, "gae_lambda": 0.8}  # fmt: skip


class FakeTabletop(gym.Env):
    """Random images, a reward that depends on the action; episode ends after `length` steps,
    by termination or by time limit. Records what it was sent and what it returned."""

    observation_space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8), "task": gym.spaces.Discrete(2)}
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, length: int, terminate: bool) -> None:
        self.length, self.terminate = length, terminate
        self.log: list[dict] = []

    def _obs(self) -> dict:
        self.last = {
            "image": self.np_rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
            "task": self.task,
        }
        return self.last

    def reset(self, seed=None, options=None):
        self.np_rng = np.random.default_rng(seed)
        self.task, self.k = int((options or {}).get("task", 0)), 0
        return self._obs(), {}

    def step(self, action):
        self.k += 1
        a = np.asarray(action, dtype=np.float64)
        r = float(a[0] - 0.5 * a[1] + 0.1 * self.k)
        end = self.k >= self.length
        obs = self._obs()
        term, trunc = end and self.terminate, end and not self.terminate
        self.log.append({"action": np.array(action), "r": r, "term": term, "trunc": trunc,
                         "final": obs})  # fmt: skip
        return obs, r, term, trunc, {}


def make() -> VLARL:
    obs_space = FakeTabletop.observation_space
    algo = VLARL(obs_space, FakeTabletop.action_space, VLARLConfig(**CFG))
    algo.setup(["reach the red block", "push the cube"], {"q01": [-1, -1], "q99": [1, 1]}, 0)
    algo.curriculum = SuccessCurriculum(2, algo.config.curriculum_temperature)
    algo.rng = np.random.default_rng(3)
    algo.gen.manual_seed(4)
    return algo


def vision_ref(vision: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Inverted intensities in [0, 1], CoordConv channels, the CNN, 16 tokens + positions."""
    x = 1.0 - images.permute(0, 3, 1, 2).double() / 255.0
    b, _, h, w = x.shape
    ys = torch.linspace(-1, 1, h, dtype=torch.float64).view(1, 1, h, 1).expand(b, 1, h, w)
    xs = torch.linspace(-1, 1, w, dtype=torch.float64).view(1, 1, 1, w).expand(b, 1, h, w)
    feats = vision.net(torch.cat([x, ys, xs], 1))
    return feats.flatten(2).transpose(1, 2) + vision.pos


def f64(model: torch.nn.Module) -> torch.nn.Module:
    ref = copy.deepcopy(model).double()
    ref.vision.forward = lambda images, v=ref.vision: vision_ref(v, images)
    return ref


def global_norm(grads) -> float:
    return math.sqrt(sum(float((g**2).sum()) for g in grads if g is not None))


def clip_by_global_norm(grads, max_norm: float) -> list:
    """g min(1, c / ||g||), ||g|| over all of the network's gradients together."""
    k = min(1.0, max_norm / max(global_norm(grads), 1e-300))
    return [None if g is None else g * k for g in grads]


class Reference:
    def __init__(self, algo: VLARL) -> None:
        self.cfg = algo.config
        self.policy, self.critic, self.prm = f64(algo.policy_model), f64(algo.critic), f64(algo.prm)
        self.first = algo.policy_model.first_action_token
        self.prompts = algo.prompts
        self.adams = {"policy": Adam(), "critic": Adam()}
        self.iteration = 0
        self.stats = {"clipped": 0, "value_clipped": 0, "grad_clipped": 0, "minibatches": 0}

    def logp_entropy(self, model, images, prompts, tokens):
        logits = model.action_logits(images, prompts, tokens) / self.cfg.temperature
        logp_all = logits - torch.logsumexp(logits, -1, keepdim=True)
        bins = tokens - self.first
        token_logp = logp_all.gather(-1, bins[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean(-1)
        return token_logp.sum(-1), entropy

    def values(self, images, prompts):
        return self.critic.values(images, prompts)

    def iterate(self, rollout: list[dict], env_logs: list[list[dict]], last_obs, perms) -> dict:
        cfg = self.cfg
        T, N = len(rollout), len(env_logs)
        with torch.no_grad():
            images = torch.stack([torch.as_tensor(s["image"]) for s in rollout])  # (T, N, ...)
            tasks = torch.stack([torch.as_tensor(s["task"]) for s in rollout]).long()
            tokens = torch.stack([s["tokens"] for s in rollout])
            prompts = self.prompts[tasks]
            flat = (images.flatten(0, 1), prompts.flatten(0, 1), tokens.flatten(0, 1))
            old_logp, _ = self.logp_entropy(self.policy, *flat)
            v = self.values(flat[0], flat[1]).view(T, N)
            r = torch.zeros(T, N, dtype=torch.float64)
            done = torch.zeros(T, N, dtype=torch.float64)
            for i, log in enumerate(env_logs):
                for t, e in enumerate(log):
                    r[t, i] = e["r"]
                    done[t, i] = float(e["term"] or e["trunc"])
                    if e["trunc"] and not e["term"]:
                        img = torch.as_tensor(e["final"]["image"])[None]
                        pr = self.prompts[torch.tensor([e["final"]["task"]])]
                        r[t, i] += cfg.gamma * float(self.values(img, pr)[0])
                    action = torch.as_tensor(e["action"]).double()[None]
                    p = torch.sigmoid(self.prm(images[t, i][None], tasks[t, i][None], action))[0]
                    r[t, i] += cfg.prm_coef * (float(p) - 0.5)
            last_img = torch.stack([torch.as_tensor(o["image"]) for o in last_obs])
            last_v = self.values(
                last_img, self.prompts[torch.tensor([o["task"] for o in last_obs])]
            )
            v_next = torch.cat([v[1:], last_v[None]])
            delta = r + cfg.gamma * (1 - done) * v_next - v
            adv = torch.zeros(T, N, dtype=torch.float64)
            for i in range(N):
                for t in range(T):
                    coef = 1.0
                    for u in range(t, T):
                        adv[t, i] += coef * delta[u, i]
                        if done[u, i]:
                            break
                        coef *= cfg.gamma * cfg.gae_lambda
            ret = adv + v
        adv, ret, v_old = adv.flatten(), ret.flatten(), v.flatten()

        out: dict = {"old_logp": old_logp, "value_loss": [], "policy_loss": []}
        warmup = self.iteration < cfg.critic_warmup_iterations
        size, mb = T * N, (T * N) // cfg.minibatches
        for perm in perms:
            for start in range(0, size, mb):
                idx = perm[start : start + mb]
                self.stats["minibatches"] += 1
                vals = self.values(flat[0][idx], flat[1][idx])
                v_clip = v_old[idx] + (vals - v_old[idx]).clamp(-cfg.value_clip, cfg.value_clip)
                sq, sq_clip = (vals - ret[idx]) ** 2, (v_clip - ret[idx]) ** 2
                self.stats["value_clipped"] += int((sq_clip > sq).sum())
                l_v = 0.5 * torch.maximum(sq, sq_clip).mean()
                params = list(self.critic.parameters())
                grads = torch.autograd.grad(l_v, params, allow_unused=True)
                self.stats["grad_clipped"] += int(global_norm(grads) > cfg.max_grad_norm)
                out["critic_grads"] = clip_by_global_norm(grads, cfg.max_grad_norm)
                self.adams["critic"].step(params, out["critic_grads"], cfg.value_lr)
                out["value_loss"].append(float(l_v.detach()))
                if warmup:
                    continue
                new_logp, entropy = self.logp_entropy(self.policy, *(x[idx] for x in flat))
                ratio = torch.exp(new_logp - old_logp[idx])
                a = adv[idx]
                surrogate = torch.minimum(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a)
                l_pi = -surrogate.mean()
                self.stats["clipped"] += int(((ratio - 1).abs() > cfg.clip).sum())
                params = list(self.policy.parameters())
                grads = torch.autograd.grad(l_pi, params, allow_unused=True)
                self.stats["grad_clipped"] += int(global_norm(grads) > cfg.max_grad_norm)
                out["policy_grads"] = clip_by_global_norm(grads, cfg.max_grad_norm)
                self.adams["policy"].step(params, out["policy_grads"], cfg.lr)
                out["policy_loss"].append(float(l_pi.detach()))
                out["clip_frac"] = float(((ratio - 1).abs() > cfg.clip).double().mean())
                out["entropy"] = float(entropy.mean().detach())
        self.iteration += 1
        return out


def record(fn, into: list):
    def wrapped(*args, **kwargs):
        loss = fn(*args, **kwargs)
        into.append(float((loss[0] if isinstance(loss, tuple) else loss).detach()))
        return loss

    return wrapped


def test_ppo_iteration_equals_the_equations(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    algo = make()
    ref = Reference(algo)
    got_losses: dict[str, list] = {"value": [], "policy": []}
    monkeypatch.setattr(
        vla_module, "clipped_value_loss", record(vla_module.clipped_value_loss, got_losses["value"])
    )
    monkeypatch.setattr(
        vla_module,
        "clipped_policy_loss",
        record(vla_module.clipped_policy_loss, got_losses["policy"]),
    )
    rollout: list[dict] = []
    act_tokens = algo.act_tokens

    def recording_act_tokens(obs, deterministic=False):
        actions, tokens, logp = act_tokens(obs, deterministic)
        rollout.append({"image": obs["image"].copy(), "task": obs["task"].copy(),
                        "tokens": tokens, "logp": logp, "gen": algo.gen.get_state()})  # fmt: skip
        return actions, tokens, logp

    monkeypatch.setattr(algo, "act_tokens", recording_act_tokens)
    # env 0 terminates every 3 steps, env 1 is cut by its time limit every 4 steps
    envs = [FakeTabletop(3, terminate=True), FakeTabletop(4, terminate=False)]
    state = {"obs": [algo._reset(e) for e in envs]}
    policy_before = copy.deepcopy(algo.policy_model.state_dict())
    for it in range(2):  # the critic's warm-up iteration, then a PPO iteration
        rollout.clear()
        for e in envs:
            e.log.clear()
        got_losses["value"].clear()
        got_losses["policy"].clear()
        metrics = algo.ppo_iteration(envs, state)
        gen = torch.Generator()
        gen.set_state(rollout[-1]["gen"])
        perms = [torch.randperm(N_ENVS * T_ROLL, generator=gen) for _ in range(CFG["epochs"])]
        want = ref.iterate(rollout, [e.log for e in envs], [e.last for e in envs], perms)

        stored = torch.cat([s["logp"] for s in rollout])
        torch.testing.assert_close(stored.double(), want["old_logp"], atol=1e-4, rtol=1e-4)
        assert got_losses["value"] == [approx(x, rel=1e-4) for x in want["value_loss"]]
        assert metrics["train/value_loss"] == approx(want["value_loss"][-1], rel=1e-4)
        critic_params = list(algo.critic.parameters())
        assert_grads([p.grad for p in critic_params], want["critic_grads"], rel=1e-3,
                     what=f"critic {it}")  # fmt: skip
        if it == 0:
            assert got_losses["policy"] == [] and "train/policy_loss" not in metrics
            for k, v in algo.policy_model.state_dict().items():
                assert torch.equal(v, policy_before[k]), k
        else:
            assert got_losses["policy"] == [approx(x, rel=1e-4) for x in want["policy_loss"]]
            assert metrics["train/policy_loss"] == approx(want["policy_loss"][-1], rel=1e-4)
            assert metrics["train/clip_frac"] == approx(want["clip_frac"])
            assert metrics["train/entropy"] == approx(want["entropy"], rel=1e-4)
            policy_params = list(algo.policy_model.parameters())
            assert_grads([p.grad for p in policy_params], want["policy_grads"], rel=1e-3,
                         what="policy")  # fmt: skip
        for mine, theirs, name in ((algo.critic, ref.critic, "critic"),
                                   (algo.policy_model, ref.policy, "policy")):  # fmt: skip
            got = [p.detach() for p in mine.parameters()]
            assert_values(got, list(theirs.parameters()), atol=2e-5, what=f"{name} {it}")
        rollout_sd = algo.rollout_model.state_dict()
        for k, v in algo.policy_model.state_dict().items():
            assert torch.equal(v, rollout_sd[k]), k
    # the recorded rollouts exercised every branch: both kinds of episode end, ratio and value
    # clipping, gradient-norm clipping
    assert any(e["term"] for e in envs[0].log) and any(e["trunc"] for e in envs[1].log)
    assert ref.stats["clipped"] > 0 and ref.stats["value_clipped"] > 0
    assert ref.stats["grad_clipped"] > 0
