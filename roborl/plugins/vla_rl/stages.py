"""VLA-RL's stages around PPO: scripted demonstrations with milestone pseudo-labels, SFT
(behaviour cloning on action tokens), the process reward model's training, and the greedy
per-task evaluation.

Apart from `algorithm.py` (the PPO iterations and the run that orders the stages) so each
module has one job. `VLAStages` is a mixin of `VLARL`: its methods are VLARL's and use its
models, tokenizers and generator.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from roborl.core.errors import ConfigError
from roborl.plugins.vla_rl.policy import batch_obs


class VLAStages:
    """Demos, SFT, RPRM training and evaluation; mixed into `VLARL`."""

    def collect_demos(self, env: gym.Env, seed: int) -> dict[str, np.ndarray]:
        """Scripted-expert demonstrations per task variant, with milestone pseudo-labels."""
        base = env.unwrapped
        if not hasattr(base, "expert_action"):
            raise ConfigError(
                "VLA-RL's SFT stage needs demonstrations: the env must provide expert_action() "
                "(roborl's tabletop tasks do)."
            )
        images, tasks, actions, labels = [], [], [], []
        for task in range(len(base.task_instructions)):
            for ep in range(self.config.demos_per_task):
                obs, _ = env.reset(seed=seed + 1000 * task + ep, options={"task": task})
                start = base.progress()
                milestones = [0.75, 0.5, 0.25]
                ep_steps = []
                done = False
                while not done:
                    a = base.expert_action(noise=self.config.demo_noise)
                    next_obs, _, term, trunc, _ = env.step(a)
                    progressed = False
                    while milestones and base.progress() < milestones[0] * start:
                        milestones.pop(0)
                        progressed = True
                    ep_steps.append((obs["image"], task, a, progressed or term))
                    obs, done = next_obs, term or trunc
                # A step is positive when a milestone is reached within the next 2 steps.
                flags = [s[3] for s in ep_steps]
                for t, (img, k, a, _) in enumerate(ep_steps):
                    images.append(img)
                    tasks.append(k)
                    actions.append(a)
                    labels.append(float(any(flags[t : t + 2])))
        return {
            "images": np.stack(images),
            "tasks": np.asarray(tasks),
            "actions": np.stack(actions).astype(np.float32),
            "labels": np.asarray(labels, dtype=np.float32),
        }

    def sft(self, demos: Mapping[str, np.ndarray]) -> list[float]:
        """Behaviour cloning: cross-entropy on the action tokens of the demonstrations."""
        assert self.policy_model is not None and self.action_tokenizer is not None
        cfg = self.config
        opt = torch.optim.Adam(self.policy_model.parameters(), lr=cfg.sft_lr)
        images = torch.as_tensor(demos["images"])
        prompts = self.prompts[torch.as_tensor(demos["tasks"], dtype=torch.long)]
        tokens = torch.as_tensor(self.action_tokenizer.encode(demos["actions"]))
        losses = []
        for _ in range(cfg.sft_steps):
            idx = torch.randint(0, len(images), (cfg.sft_batch_size,), generator=self.gen)
            logp, _ = self.policy_model.action_log_prob(images[idx], prompts[idx], tokens[idx])
            loss = -logp.mean() / self.action_dim
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        self.sync_rollout_weights()
        assert self.critic is not None
        # The critic starts from the SFT policy's weights (official: value model = the VLA).
        self.critic.load_state_dict(self.policy_model.state_dict(), strict=False)
        return losses

    def train_prm(self, demos: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Binary classifier on (state, action) -> progress; demo actions with their milestone
        labels, plus random actions on the same states as negatives."""
        assert self.prm is not None
        cfg = self.config
        n = len(demos["labels"])
        images = torch.as_tensor(demos["images"])
        tasks = torch.as_tensor(demos["tasks"], dtype=torch.long)
        actions = torch.as_tensor(demos["actions"])
        labels = torch.as_tensor(demos["labels"])
        opt = torch.optim.Adam(self.prm.parameters(), lr=1e-3)
        bce = nn.BCEWithLogitsLoss()
        loss = torch.tensor(0.0)
        for _ in range(cfg.prm_steps):
            idx = torch.randint(0, n, (64,), generator=self.gen)
            rand_a = torch.rand(64, self.action_dim, generator=self.gen) * 2 - 1
            img = torch.cat([images[idx], images[idx]])
            tk = torch.cat([tasks[idx], tasks[idx]])
            act = torch.cat([actions[idx], rand_a])
            lab = torch.cat([labels[idx], torch.zeros(64)])
            loss = bce(self.prm(img, tk, act), lab)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            pos = torch.sigmoid(self.prm(images, tasks, actions))
            neg = torch.sigmoid(self.prm(images, tasks, torch.rand(n, self.action_dim) * 2 - 1))
        return {
            "prm/loss": float(loss.detach()),
            "prm/p_demo": float(pos.mean()),
            "prm/p_random": float(neg.mean()),
        }

    def evaluate_tasks(self, env: gym.Env, seed: int) -> dict[str, float]:
        """Greedy success rate per task variant."""
        base = env.unwrapped
        out = {}
        for task in range(len(self.instructions)):
            wins = 0
            for ep in range(self.config.eval_episodes_per_task):
                obs, _ = env.reset(seed=seed + 7919 * task + ep, options={"task": task})
                done, term = False, False
                while not done:
                    obs, _, term, trunc, _ = env.step(
                        self.act(batch_obs(obs), deterministic=True)[0]
                    )
                    done = term or trunc
                wins += int(term)
            out[f"success/{base.task_instructions[task].replace(' ', '_')}"] = (
                wins / self.config.eval_episodes_per_task
            )
        out["success/mean"] = float(np.mean(list(out.values())))
        return out
