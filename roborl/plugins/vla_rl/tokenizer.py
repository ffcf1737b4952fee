"""OpenVLA's action scheme and a word-level prompt tokenizer.

Actions (Kim et al., "OpenVLA", 2024, Sec. 3.3; official `prismatic/vla/action_tokenizer.py`
and the RLDS `BOUNDS_Q99` normalisation), reproduced exactly:

- each dimension is normalised to [-1, 1] with the 1st/99th percentiles of the training
  data, 2 (a - q01) / (q99 - q01 + 1e-8) - 1, and clipped to [-1, 1];
- the bin edges are `np.linspace(-1, 1, 256)` (256 edges, so 255 bins and 255 centres);
  `np.digitize` gives d in [1, 256] (256 only for exactly 1.0), and the token is
  `vocab_size - d`: larger actions map to *lower* token ids, all within the last 256 ids;
- decoding takes d = vocab_size - token, the centre `centres[clip(d - 1, 0, 254)]`, and
  un-normalises it, 0.5 (x + 1) (q99 - q01) + q01.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch

N_BINS = 256  # action tokens (the last N_BINS ids of the vocabulary) = OpenVLA's bin edges
PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
PAD, BOS, EOS, UNK = range(4)


class ActionTokenizer:
    """Continuous actions <-> OpenVLA action tokens, with percentile normalisation."""

    def __init__(self, q01: Sequence[float], q99: Sequence[float], vocab_size: int) -> None:
        self.q01 = np.asarray(q01, dtype=np.float64)
        self.q99 = np.asarray(q99, dtype=np.float64)
        if np.any(self.q99 <= self.q01):
            raise ValueError(
                f"action statistics need q99 > q01, got q01={self.q01}, q99={self.q99}"
            )
        self.vocab_size = vocab_size
        self.first_token = vocab_size - N_BINS
        self.edges = np.linspace(-1.0, 1.0, N_BINS)
        self.centers = (self.edges[:-1] + self.edges[1:]) / 2.0  # 255 centres

    @classmethod
    def fit(cls, actions: np.ndarray, vocab_size: int) -> ActionTokenizer:
        q01, q99 = np.percentile(actions, 1, axis=0), np.percentile(actions, 99, axis=0)
        q99 = np.maximum(q99, q01 + 1e-6)
        return cls(q01, q99, vocab_size)

    def normalize(self, actions: np.ndarray) -> np.ndarray:
        scaled = 2.0 * (actions - self.q01) / (self.q99 - self.q01 + 1e-8) - 1.0
        return np.clip(scaled, -1.0, 1.0)

    def unnormalize(self, normed: np.ndarray) -> np.ndarray:
        return 0.5 * (normed + 1.0) * (self.q99 - self.q01) + self.q01

    def encode(self, actions: np.ndarray) -> np.ndarray:
        """Action(s) (..., D) -> token ids (..., D): vocab_size - digitize(normalised, edges)."""
        digit = np.digitize(self.normalize(np.asarray(actions, dtype=np.float64)), self.edges)
        return (self.vocab_size - digit).astype(np.int64)

    def decode(self, tokens: np.ndarray | torch.Tensor) -> np.ndarray:
        tokens = np.asarray(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens)
        idx = np.clip(self.vocab_size - tokens - 1, 0, len(self.centers) - 1)
        return self.unnormalize(self.centers[idx])

    def state(self) -> dict[str, list[float]]:
        return {"q01": self.q01.tolist(), "q99": self.q99.tolist()}


class WordTokenizer:
    """Whitespace/punctuation word tokenizer over a fixed vocabulary of instruction words.

    Ids: 4 special tokens, the words, then 256 action tokens (so `vocab_size` includes them).
    """

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(SPECIAL) + sorted(set(words))
        self.index = {w: i for i, w in enumerate(self.words)}
        self.vocab_size = len(self.words) + N_BINS

    @staticmethod
    def split(text: str) -> list[str]:
        return re.findall(r"[a-z0-9]+|[?:\n]", text.lower())

    @classmethod
    def for_instructions(cls, instructions: Sequence[str]) -> WordTokenizer:
        words = set(cls.split(PROMPT.format(instruction="")))
        for text in instructions:
            words.update(cls.split(text))
        return cls(sorted(words))

    def encode_prompt(self, instruction: str) -> list[int]:
        return [BOS] + [
            self.index.get(w, UNK) for w in self.split(PROMPT.format(instruction=instruction))
        ]
