"""Hard-negative rounds during a run: `reward.relabel_every=N`.

A policy trained on a success classifier's reward learns to reach the frames it wrongly calls
success; SERL's remedy (Luo et al., 2024, Sec. IV-B) is to retrain it with those frames as
negatives, which `roborl reward relabel` does between runs. With `relabel_every=N` the run does
it itself every N env steps: the frames the model fired on so far (`reward.save_fired`, the
run's `reward_fired/`) whose env success is 0 are added to its training data, the retrained
model is written to `<run_dir>/reward_model/round_<k>.pt` (atomically) and swapped into every
`LearnedReward` of the training envs. Frames without an env success (-1, a robot) are left
out: no person has judged them. The loop calls `RewardRounds.after_steps` after each
`advance`; the rounds count env steps (`ctx.step`), so they fall at the same points whatever the
number of envs. The model does the retraining (`RetrainableRewardModel`), so this module knows
no plugin; a resumed run restores the last round's model from its checkpoint (`ctx.extra`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from roborl.core.errors import ConfigError
from roborl.core.rewards import LearnedReward, RewardModel, relabel_every, reward_options

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

log = logging.getLogger("roborl.rewards")

EXTRA_KEY = "reward_rounds"
"""`ctx.extra` entry (kept in checkpoints): the last round and the model it wrote."""


@runtime_checkable
class RetrainableRewardModel(Protocol):
    """A reward model that can run a hard-negative round itself (the success classifier)."""

    def retrain_with_fired(
        self, fired: str, out: str, log: Callable[[str], None]
    ) -> tuple[RewardModel, Mapping[str, Any]] | None:
        """Retrained on its own data plus the false frames in `fired`, saved to `out`: the new
        model and a report with `count`, `fp_rate_before`, `fp_rate_after`; None when there
        is no false fired frame yet."""
        ...

    def load_round(self, path: str) -> RewardModel:
        """The model a round wrote to `path`."""
        ...


def learned_rewards(env: Any) -> list[LearnedReward]:
    """Every `LearnedReward` inside `env`: a vector env's sub-envs and each wrapper chain."""
    found: list[LearnedReward] = []
    for sub in getattr(env, "envs", None) or [env]:
        while sub is not None:
            if isinstance(sub, LearnedReward):
                found.append(sub)
                break
            sub = getattr(sub, "env", None)
    return found


class RewardRounds:
    """Retrains the run's learned reward every `every` env steps; see the module doc."""

    def __init__(self, ctx: TrainContext, wrappers: list[LearnedReward], every: int) -> None:
        self.wrappers = wrappers
        self.every = every
        self.fired = str(wrappers[0].fired.directory)  # type: ignore[union-attr]
        self.out_dir = Path(ctx.run_dir) / "reward_model"
        self.round = 0
        saved = ctx.extra.get(EXTRA_KEY)
        if saved:  # a resumed run: the model its last round wrote, not reward.path's
            self.round = int(saved["round"])
            self._swap(self.model.load_round(saved["path"]))
        self._next = (ctx.step // every + 1) * every

    @property
    def model(self) -> RetrainableRewardModel:
        return self.wrappers[0].model  # type: ignore[return-value]

    def after_steps(self, ctx: TrainContext) -> None:
        """Run a round when the run's env steps reached the next multiple of `every`."""
        if ctx.step < self._next:
            return
        self._next = (ctx.step // self.every + 1) * self.every
        self.run_round(ctx)

    def run_round(self, ctx: TrainContext) -> None:
        for w in self.wrappers:  # every fired frame so far on disk, not held in memory
            w.fired.flush()  # type: ignore[union-attr]
        k = self.round + 1
        out = self.out_dir / f"round_{k:03d}.pt"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        result = self.model.retrain_with_fired(self.fired, str(out), log.debug)
        if result is None:
            log.info("reward.relabel_every: no false fired frame yet at step %d", ctx.step)
            ctx.log({"reward/relabel_skipped": 1.0})
            return
        model, report = result
        self._swap(model)
        self.round = k
        ctx.set_extra(EXTRA_KEY, {"round": k, "path": str(out), "step": ctx.step})
        record = {
            "reward/relabel_round": float(k),
            "reward/hard_negatives": float(report["count"]),
            "reward/fired_false_positive_rate_after": float(report["fp_rate_after"]),
        }
        if "fp_rate_before" in report:
            record["reward/fired_false_positive_rate_before"] = float(report["fp_rate_before"])
        ctx.log(record)
        log.info("reward.relabel_every: round %d at step %d -> %s: %s", k, ctx.step, out, record)

    def _swap(self, model: RewardModel) -> None:
        for w in self.wrappers:
            w.set_model(model)


def reward_rounds(ctx: TrainContext, collector: Any) -> RewardRounds | None:
    """The run's rounds (None without `reward.relabel_every`); call after `ctx.resume`."""
    options = reward_options(ctx.config)
    every = relabel_every(options) if options is not None else 0
    if not every:
        return None
    wrappers = learned_rewards(getattr(collector, "envs", None) or getattr(collector, "env", None))
    if not wrappers:
        raise ConfigError(
            f"reward.relabel_every={every}: the training envs' learned reward is not in this "
            f"process (collector {type(collector).__name__}), so a retrained model could not "
            "be swapped in; use the in-process collector (collector=vector, "
            "vector_mode=sync) or retrain between runs with `roborl reward relabel`."
        )
    if not isinstance(wrappers[0].model, RetrainableRewardModel):
        raise ConfigError(
            f"reward.relabel_every={every}: reward={options['name']}'s model cannot retrain "
            "itself (it has no retrain_with_fired/load_round); drop reward.relabel_every."
        )
    return RewardRounds(ctx, wrappers, every)
