"""VLA-RL: online PPO for an auto-regressive vision-language-action policy.

Lu et al., "VLA-RL: Towards Masterful and General Robotic Manipulation with Scalable
Reinforcement Learning", arXiv 2505.18719 (2025), and its official code (GuanxingLu/vlarl,
`scripts/train_rl_vllm_ray_fsdp.sh` defaults):

- start from a supervised VLA (the paper fine-tunes OpenVLA-7B on demos; here: behaviour
  cloning of a small VLA on scripted demos, `sft_*`);
- rollouts with batched decoding across vectorised envs at temperature 1.0 (`temperature`);
  an action's log-prob is the sum of its token log-probs under softmax(logits / T), both when
  stored at rollout time and when recomputed by the trainer (`TinyVLA.action_log_prob`), so
  PPO's ratio compares the distribution the actions were sampled from;
- actions are OpenVLA's tokens exactly (`tokenizer.ActionTokenizer`: 255 bins, larger actions
  on lower ids);
- PPO per env step: GAE gamma 0.99, lambda 0.95, ratio clip 0.2, value clipping, no KL
  penalty, no advantage normalisation (`norm_adv False`), 1 epoch, grad-norm clip 1.0;
- a separate critic of the same architecture initialised from the SFT policy
  (`value_model_type "vla"`) with a value head, warmed up alone for 5 iterations
  (`value_init_steps 5`) before policy updates;
- a robotic process reward model (RPRM) trained on pseudo-labels from automatically segmented
  successful demonstrations, added as a dense reward;
- curriculum selection of task variants with success rate nearest 50%;
- rollout weights synced from the trainer every iteration.

Deviations (scale and infrastructure, not method): a 2-layer, 64-wide Llama with a CNN
vision encoder instead of OpenVLA-7B (Prismatic), full fine-tuning instead of LoRA, learning
rates scaled for the tiny model (policy 3e-5, critic 1e-4, vs 2e-6 / 1e-4 for LoRA on 7B),
rollouts decoded with torch in-process rather than a vLLM engine on a separate GPU (the
weight sync is a `load_state_dict` into the rollout copy), the RPRM is a small CNN
classifier over (image, task, action) instead of a fine-tuned VLM, its milestones come from
the task's progress signal (distance-to-goal thresholds) rather than gripper keyframes, and
its reward is centred (p - 0.5) so that dense reward cannot pay for never finishing. The
initial weights are drawn from the run's seed. Rollouts are 32 steps per env per iteration
(`rollout_steps`; official `num_steps 128`), sized for a CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.interfaces import Algorithm, Policy
from roborl.plugins.vla_rl.config import VLARLConfig
from roborl.plugins.vla_rl.curriculum import SuccessCurriculum
from roborl.plugins.vla_rl.model import ProcessRewardModel, TinyVLA
from roborl.plugins.vla_rl.policy import VLAPolicy, batch_obs
from roborl.plugins.vla_rl.ppo import clipped_policy_loss, clipped_value_loss, gae
from roborl.plugins.vla_rl.stages import VLAStages
from roborl.plugins.vla_rl.tokenizer import PAD, ActionTokenizer, WordTokenizer

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

# The action-token scheme of the checkpoints this version writes (OpenVLA's exact binning).
ACTION_TOKENS = "openvla-255"


class VLARL(VLAStages, Algorithm):
    name = "vla_rl"
    Config = VLARLConfig
    loop = "custom"
    accepts_dict_obs = True  # {"image", "task"} from RoborlTabletop

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: VLARLConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not (
            isinstance(observation_space, gym.spaces.Dict) and "image" in observation_space.spaces
        ):
            raise ConfigError(
                "algo=vla_rl needs an image-based env with Dict observations {'image', 'task'}, "
                f"e.g. env=tabletop; got {observation_space}."
            )
        self.action_dim = int(np.prod(action_space.shape))
        self.instructions: list[str] = []
        self.tokenizer: WordTokenizer | None = None
        self.action_tokenizer: ActionTokenizer | None = None
        self.policy_model: TinyVLA | None = None
        self.critic: TinyVLA | None = None
        self.prm: ProcessRewardModel | None = None
        self.iteration = 0
        self.phase = "init"
        self.rng = np.random.default_rng(0)
        self.gen = torch.Generator().manual_seed(0)

    # -- building ----------------------------------------------------------------------------

    def setup(
        self, instructions: list[str], action_stats: Mapping[str, list[float]], seed: int
    ) -> None:
        """Tokenizers and networks; `seed` (the run's) draws the initial weights, so runs with
        different seeds start from different networks."""
        cfg = self.config
        self.instructions = list(instructions)
        self.tokenizer = WordTokenizer.for_instructions(self.instructions)
        self.action_tokenizer = ActionTokenizer(
            action_stats["q01"], action_stats["q99"], self.tokenizer.vocab_size
        )
        self.prompts = self._encode_prompts()
        torch.manual_seed(seed)
        self.policy_model = TinyVLA(
            self.tokenizer.vocab_size, self.action_dim, cfg.hidden_size, cfg.layers, cfg.heads
        )
        self.rollout_model = copy.deepcopy(self.policy_model).eval()
        self.critic = TinyVLA(
            self.tokenizer.vocab_size,
            self.action_dim,
            cfg.hidden_size,
            cfg.layers,
            cfg.heads,
            value_head=True,
        )
        self.prm = ProcessRewardModel(len(self.instructions), self.action_dim, cfg.hidden_size)
        self.policy_opt = torch.optim.Adam(self.policy_model.parameters(), lr=cfg.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.value_lr)

    def _encode_prompts(self) -> torch.Tensor:
        assert self.tokenizer is not None
        encoded = [self.tokenizer.encode_prompt(text) for text in self.instructions]
        width = max(map(len, encoded))
        rows = [[PAD] * (width - len(e)) + e for e in encoded]  # left padding
        return torch.tensor(rows, dtype=torch.long)

    def sync_rollout_weights(self) -> None:
        """Trainer -> rollout engine, every iteration (VLA-RL syncs to vLLM the same way)."""
        assert self.policy_model is not None
        self.rollout_model.load_state_dict(self.policy_model.state_dict())

    # -- acting ------------------------------------------------------------------------------

    def _inputs(self, obs: Mapping[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.as_tensor(np.asarray(obs["image"]))
        tasks = torch.as_tensor(np.asarray(obs["task"]), dtype=torch.long)
        return images, self.prompts[tasks]

    def act_tokens(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = False
    ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        assert self.action_tokenizer is not None
        images, prompts = self._inputs(obs)
        tokens, logp = self.rollout_model.generate(
            images, prompts, self.config.temperature, greedy=deterministic, generator=self.gen
        )
        return self.action_tokenizer.decode(tokens).astype(np.float32), tokens, logp

    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        return self.act_tokens(obs, deterministic)[0]

    def policy(self) -> Policy:
        return VLAPolicy(self)

    def actor_graph(self) -> NoReturn:
        """Refused: see the error (the policy is not one fixed tensor function)."""
        raise ConfigError(
            "algo=vla_rl cannot be exported to ONNX: its policy decodes action tokens one at a "
            "time with a transformer (a loop whose steps depend on earlier tokens) and turns the "
            "'task' entry of its Dict observation into a text prompt with its word tokenizer, "
            "neither of which is a fixed tensor graph. Export it without format=onnx and run it "
            "with roborl's torch runtime."
        )

    def ppo_iteration(self, envs: list[gym.Env], state: dict[str, Any]) -> dict[str, float]:
        """One rollout of `rollout_steps` per env, then PPO updates (critic only in warm-up)."""
        assert self.policy_model is not None and self.critic is not None and self.prm is not None
        cfg = self.config
        T, N = cfg.rollout_steps, len(envs)
        obs_list = state["obs"]
        imgs, tasks, toks, logps, rews, dones, vals = [], [], [], [], [], [], []
        successes, episodes = 0, 0
        for _ in range(T):
            batch = {
                "image": np.stack([o["image"] for o in obs_list]),
                "task": np.asarray([o["task"] for o in obs_list]),
            }
            actions, tokens, logp = self.act_tokens(batch)
            images, prompts = self._inputs(batch)
            with torch.no_grad():
                value = self.critic.values(images, prompts)
                prm_r = (
                    torch.sigmoid(
                        self.prm(images, torch.as_tensor(batch["task"]), torch.as_tensor(actions))
                    )
                    - 0.5
                ) * cfg.prm_coef
            step_r, step_d = np.zeros(N, np.float32), np.zeros(N, np.float32)
            for i, env in enumerate(envs):
                o, r, term, trunc, _ = env.step(actions[i])
                step_r[i] = r
                if term or trunc:
                    if trunc and not term:  # time limit: bootstrap from the final state
                        with torch.no_grad():
                            fi, fp = self._inputs(batch_obs(o))
                            step_r[i] += cfg.gamma * float(self.critic.values(fi, fp)[0])
                    self.curriculum.update(int(batch["task"][i]), bool(term))
                    successes += int(term)
                    episodes += 1
                    step_d[i] = 1.0
                    o = self._reset(env)
                obs_list[i] = o
            imgs.append(images)
            tasks.append(torch.as_tensor(batch["task"]))
            toks.append(tokens)
            logps.append(logp)
            rews.append(torch.as_tensor(step_r) + (prm_r if cfg.use_prm else 0.0))
            dones.append(torch.as_tensor(step_d))
            vals.append(value)
        state["obs"] = obs_list
        with torch.no_grad():
            last_images, last_prompts = self._inputs(
                {
                    "image": np.stack([o["image"] for o in obs_list]),
                    "task": np.asarray([o["task"] for o in obs_list]),
                }
            )
            last_v = self.critic.values(last_images, last_prompts)
        values = torch.stack(vals)
        adv, ret = gae(
            torch.stack(rews), values, torch.stack(dones), last_v, cfg.gamma, cfg.gae_lambda
        )

        flat = {
            "images": torch.cat(imgs),
            "prompts": self.prompts[torch.cat(tasks)],
            "tokens": torch.cat(toks),
            "logp": torch.cat(logps),
            "adv": adv.reshape(-1),
            "ret": ret.reshape(-1),
            "val": values.reshape(-1),
        }
        warmup = self.iteration < cfg.critic_warmup_iterations
        metrics: dict[str, float] = {"rollout/success_rate": successes / max(episodes, 1)}
        size = T * N
        mb = max(size // cfg.minibatches, 1)
        for _ in range(cfg.epochs):
            perm = torch.randperm(size, generator=self.gen)
            for start in range(0, size, mb):
                idx = perm[start : start + mb]
                v = self.critic.values(flat["images"][idx], flat["prompts"][idx])
                v_loss = clipped_value_loss(v, flat["val"][idx], flat["ret"][idx], cfg.value_clip)
                self.critic_opt.zero_grad()
                v_loss.backward()
                nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.critic_opt.step()
                metrics["train/value_loss"] = float(v_loss.detach())
                if warmup:
                    continue
                new_logp, entropy = self.policy_model.action_log_prob(
                    flat["images"][idx], flat["prompts"][idx], flat["tokens"][idx], cfg.temperature
                )
                p_loss, clip_frac = clipped_policy_loss(
                    new_logp, flat["logp"][idx], flat["adv"][idx], cfg.clip
                )
                self.policy_opt.zero_grad()
                p_loss.backward()
                nn.utils.clip_grad_norm_(self.policy_model.parameters(), cfg.max_grad_norm)
                self.policy_opt.step()
                metrics.update(
                    {
                        "train/policy_loss": float(p_loss.detach()),
                        "train/clip_frac": float(clip_frac),
                        "train/entropy": float(entropy.mean().detach()),
                    }
                )
        self.sync_rollout_weights()
        metrics["train/critic_warmup"] = float(warmup)
        metrics["train/iteration"] = float(self.iteration)
        for k, p in enumerate(self.curriculum.success):
            metrics[f"curriculum/success_{k}"] = float(p)
        self.iteration += 1
        return metrics

    def _reset(self, env: gym.Env) -> dict[str, Any]:
        task = self.curriculum.sample(self.rng) if self.config.curriculum else None
        options = {} if task is None else {"task": task}
        obs, _ = env.reset(seed=int(self.rng.integers(2**31)), options=options)
        return obs

    # -- the whole run -----------------------------------------------------------------------

    def train(self, ctx: TrainContext) -> None:
        cfg = self.config
        seed = ctx.run.seed
        self.rng = np.random.default_rng(seed)
        self.gen.manual_seed(seed)
        env = ctx.make_env(seed=seed)
        base = env.unwrapped
        resumed = ctx.resume_checkpoint is not None and self.policy_model is not None
        if not resumed:
            demos = self.collect_demos(env, seed)
            stats = ActionTokenizer.fit(demos["actions"], 1).state()
            self.setup(list(base.task_instructions), stats, seed)
            losses = self.sft(demos)
            ctx.log(
                {
                    "sft/loss_first": losses[0] if losses else 0.0,
                    "sft/loss_last": losses[-1] if losses else 0.0,
                }
            )
            if cfg.use_prm:
                ctx.log(self.train_prm(demos))
            self.phase = "sft_done"
            sft_eval = self.evaluate_tasks(env, seed + 99)
            ctx.log({f"sft/{k}": v for k, v in sft_eval.items()})
            self.sft_success = sft_eval
        self.curriculum = getattr(self, "curriculum", None) or SuccessCurriculum(
            len(self.instructions), cfg.curriculum_temperature
        )
        envs = [ctx.make_env(seed=seed + 1 + i) for i in range(cfg.num_envs)]
        state = {"obs": [self._reset(e) for e in envs]}
        self.phase = "rl"
        # One metrics record per PPO iteration (its losses are per iteration); evaluations and
        # checkpoints follow the run's schedule, eval_every / checkpoint_every env steps.
        while self.iteration < cfg.iterations and not ctx.finished:
            metrics = self.ppo_iteration(envs, state)
            ctx.advance(env_steps=cfg.rollout_steps * cfg.num_envs)
            ctx.log(metrics)
            if ctx.due("eval"):
                ctx.evaluate(self)
            if ctx.due("checkpoint"):
                ctx.checkpoint(self)
        final = self.evaluate_tasks(env, seed + 99)
        ctx.log({f"eval/{k}": v for k, v in final.items()})
        ctx.finish(self)
        for e in envs:
            e.close()
        env.close()

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        if self.policy_model is None:
            return {"phase": self.phase}
        assert (
            self.critic is not None and self.prm is not None and self.action_tokenizer is not None
        )
        return {
            "phase": self.phase,
            "iteration": self.iteration,
            "instructions": list(self.instructions),
            "action_stats": self.action_tokenizer.state(),
            "action_tokens": ACTION_TOKENS,
            "policy": self.policy_model.state_dict(),
            "critic": self.critic.state_dict(),
            "prm": self.prm.state_dict(),
            "policy_opt": self.policy_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "curriculum": {
                "success": torch.as_tensor(
                    getattr(self, "curriculum", SuccessCurriculum(1)).success
                ),
                "tries": torch.as_tensor(getattr(self, "curriculum", SuccessCurriculum(1)).tries),
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.phase = state.get("phase", "init")
        if "policy" not in state:
            return
        if state.get("action_tokens") != ACTION_TOKENS:
            raise CheckpointError(
                "this VLA-RL checkpoint was written before roborl adopted OpenVLA's action "
                "tokens (255 bins, larger actions on lower token ids); its policy would decode "
                "every action wrongly. Retrain it with this version."
            )
        self.setup(list(state["instructions"]), state["action_stats"], 0)  # weights loaded next
        assert self.policy_model is not None and self.critic is not None and self.prm is not None
        self.policy_model.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.prm.load_state_dict(state["prm"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.iteration = int(state["iteration"])
        self.curriculum = SuccessCurriculum(
            len(self.instructions), self.config.curriculum_temperature
        )
        self.curriculum.success = state["curriculum"]["success"].numpy().copy()
        self.curriculum.tries = state["curriculum"]["tries"].numpy().copy()
        self.sync_rollout_weights()
