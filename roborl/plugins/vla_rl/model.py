"""A small vision-language-action model trainable on CPU, OpenVLA-shaped.

Sequence layout: [visual tokens (CNN features of the image)] [<bos> prompt words] [action
tokens]. The language model is a tiny `transformers.LlamaForCausalLM`, so the same weights can
be served by vLLM. Prompts of different length are left-padded; padding is masked and position
ids skip it. Decoding is constrained to the 256 action tokens (the trainer recomputes
log-probs over the same restricted vocabulary, so rollout and training agree).
"""

from __future__ import annotations

import torch
from torch import nn

from roborl.plugins.vla_rl.tokenizer import N_BINS, PAD

N_VISUAL_TOKENS = 16


class VisionEncoder(nn.Module):
    """64x64 RGB -> 16 visual tokens (a 4x4 grid of CNN features, like ViT patches).

    Two coordinate channels (CoordConv) are appended to the pixels so that the tiny encoder
    can tell where an object is, which reaching and pushing depend on.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(5, 32, 4, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 2, stride=2), nn.ReLU(),
            nn.Conv2d(64, hidden, 2, stride=2),
            nn.AdaptiveAvgPool2d(4),
        )  # fmt: skip
        self.pos = nn.Parameter(torch.zeros(1, N_VISUAL_TOKENS, hidden))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        # Inverted intensities: the bright table becomes ~0, objects carry the signal.
        x = 1.0 - images.permute(0, 3, 1, 2).float() / 255.0
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w).view(1, 1, 1, w).expand(b, 1, h, w)
        x = torch.cat([x, ys, xs], 1)
        return self.net(x).flatten(2).transpose(1, 2) + self.pos  # (B, 16, hidden)


class TinyVLA(nn.Module):
    """Image + instruction -> action-token distribution (and optionally a value)."""

    def __init__(
        self,
        vocab_size: int,
        action_dim: int,
        hidden: int = 64,
        layers: int = 2,
        heads: int = 4,
        value_head: bool = False,
    ) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.vocab_size = vocab_size
        self.action_dim = action_dim
        self.first_action_token = vocab_size - N_BINS
        self.vision = VisionEncoder(hidden)
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=128,
            pad_token_id=PAD,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=False,
        )
        self.lm = LlamaForCausalLM(config)
        self.value = nn.Linear(hidden, 1) if value_head else None

    def _hidden(
        self, images: torch.Tensor, prompts: torch.Tensor, actions: torch.Tensor | None
    ) -> torch.Tensor:
        vis = self.vision(images)
        embed = self.lm.get_input_embeddings()
        parts = [vis, embed(prompts)]
        masks = [torch.ones(vis.shape[:2], dtype=torch.long), (prompts != PAD).long()]
        if actions is not None and actions.shape[1] > 0:
            parts.append(embed(actions))
            masks.append(torch.ones(actions.shape, dtype=torch.long))
        x = torch.cat(parts, 1)
        mask = torch.cat(masks, 1).to(x.device)
        position_ids = (mask.cumsum(1) - 1).clamp(min=0)
        out = self.lm.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids)
        return out.last_hidden_state

    def prompt_end(self, prompts: torch.Tensor) -> int:
        return N_VISUAL_TOKENS + prompts.shape[1] - 1  # index of the last prompt position

    def action_logits(
        self, images: torch.Tensor, prompts: torch.Tensor, actions: torch.Tensor
    ) -> torch.Tensor:
        """Logits over the 256 action bins for each of the D action tokens (teacher forcing):
        (B, D, 256)."""
        h = self._hidden(images, prompts, actions[:, :-1])
        start = self.prompt_end(prompts)
        h = h[:, start : start + self.action_dim]
        logits = self.lm.lm_head(h)
        return logits[..., self.first_action_token :]

    def action_log_prob(
        self,
        images: torch.Tensor,
        prompts: torch.Tensor,
        actions: torch.Tensor,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi_T(a|s) = sum of the action tokens' log-probs under softmax(logits / T), and
        the per-token entropy mean of that distribution. PPO must pass the rollout's
        temperature, so that its ratio compares the distribution the actions were sampled
        from; SFT uses T = 1."""
        logits = self.action_logits(images, prompts, actions) / temperature
        logp_all = torch.log_softmax(logits, -1)
        bins = (actions - self.first_action_token).clamp(0, N_BINS - 1)
        token_logp = logp_all.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean(-1)
        return token_logp.sum(-1), entropy

    @torch.no_grad()
    def generate(
        self,
        images: torch.Tensor,
        prompts: torch.Tensor,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Batched auto-regressive decoding of D action tokens; returns (tokens, log-prob).

        Sampling is from softmax(logits / temperature), and the returned log-prob is of that
        same tempered distribution (greedy decoding reports it too).
        """
        batch = images.shape[0]
        tokens = torch.zeros(batch, 0, dtype=torch.long)
        logp = torch.zeros(batch)
        start = self.prompt_end(prompts)
        for i in range(self.action_dim):
            h = self._hidden(images, prompts, tokens)[:, start + i]
            logits = self.lm.lm_head(h)[:, self.first_action_token :]
            logp_all = torch.log_softmax(logits / temperature, -1)
            if greedy:
                bins = logits.argmax(-1)
            else:
                bins = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
            logp += logp_all.gather(-1, bins[:, None]).squeeze(-1)
            tokens = torch.cat([tokens, (bins + self.first_action_token)[:, None]], 1)
        return tokens, logp

    def values(self, images: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        assert self.value is not None, "this model has no value head"
        h = self._hidden(images, prompts, None)[:, self.prompt_end(prompts)]
        return self.value(h).squeeze(-1)


class ProcessRewardModel(nn.Module):
    """P(this action makes progress | image, task, action): the robotic process reward model,
    trained on pseudo-labels from automatically segmented demonstrations.

    Image, task and action are each embedded to `hidden` and normalised before they are mixed,
    so the 2-d action is not drowned by the 1024-d image features.
    """

    def __init__(self, num_tasks: int, action_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.vision = VisionEncoder(hidden)
        self.image_proj = nn.Sequential(
            nn.LayerNorm(N_VISUAL_TOKENS * hidden), nn.Linear(N_VISUAL_TOKENS * hidden, hidden)
        )
        self.task = nn.Embedding(num_tasks, hidden)
        self.action = nn.Sequential(
            nn.Linear(action_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden)
        )
        self.head = nn.Sequential(
            nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(
        self, images: torch.Tensor, tasks: torch.Tensor, actions: torch.Tensor
    ) -> torch.Tensor:
        z = (
            self.image_proj(self.vision(images).flatten(1))
            + self.task(tasks)
            + self.action(actions)
        )
        return self.head(z).squeeze(-1)
