"""Curriculum selection (VLA-RL, Sec. 3.4): train most on the task variants the policy solves
about half of the time, where the learning signal of a binary success is strongest."""

from __future__ import annotations

import numpy as np


class SuccessCurriculum:
    """Per-variant success rates (exponential moving average) and sampling near 50%.

    Weight of variant k: exp(-|p_k - 0.5| / temperature); variants never tried count as
    p = 0.5 so that every variant is explored.
    """

    def __init__(self, num_tasks: int, temperature: float = 0.1, ema: float = 0.2) -> None:
        self.success = np.full(num_tasks, 0.5)
        self.tries = np.zeros(num_tasks, dtype=np.int64)
        self.temperature = temperature
        self.ema = ema

    def update(self, task: int, success: bool) -> None:
        if self.tries[task] == 0:
            self.success[task] = float(success)
        else:
            self.success[task] += self.ema * (float(success) - self.success[task])
        self.tries[task] += 1

    def probabilities(self) -> np.ndarray:
        logits = -np.abs(self.success - 0.5) / self.temperature
        w = np.exp(logits - logits.max())
        return w / w.sum()

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.choice(len(self.success), p=self.probabilities()))
