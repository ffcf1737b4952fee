"""Demonstrations in online training: a second replay buffer and RLPD's symmetric sampling.

`demos=PATH` (any dataset roborl reads: NPZ, HDF5, a Minari id; Dict observations with uint8
images allowed) is loaded into its own `ReplayBuffer`, and every update batch takes exactly
``round(batch_size * demo_fraction)`` rows from it and the rest from the online buffer:
"symmetric sampling" of RLPD (Ball et al., 2023, "Efficient Online Reinforcement Learning with
Offline Data", Sec. 4.1: half of each batch from the offline data, half online), which SERL and
HIL-SERL use with demonstrations as the offline data. Demo rows are marked in
``Batch.extras["is_demo"]`` so an algorithm can treat them apart (RLPD's critic minibatches);
rows a recording marks as a person's takeover (metadata ``intervened_rows``, or a
LeRobotDataset's ``complementary_info.is_intervention``) carry ``extras["intervened"]``.

Transitions a person took over (``Chunk.extras["intervened"]``, from a robot's teleop channel)
are also added to the demo buffer, as HIL-SERL (Luo et al., 2024, Sec. III-B) adds intervention
data to both its demo and online buffers. With `reward=` (a learned reward), demo rewards and
terminals are relabelled by the model (`roborl.core.rewards.relabel`), as online rows are.
Checkpoints keep the demo buffer with the interventions it gained, so a resumed run goes on
from it rather than from `demos=` alone. `demo_pretrain_updates=N` runs N updates on demo rows
alone before the first env step (`roborl.core.loops.offpolicy.pretrain_on_demos`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer, Returns
from roborl.core.dataset_spaces import check_dataset_spaces
from roborl.core.errors import DatasetError
from roborl.core.interfaces import Batch
from roborl.core.rewards import relabel, reward_options

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

log = logging.getLogger(__name__)

EXTRAS = {"intervened": ((), np.bool_)}
"""Per-transition fields both buffers keep when demos are used."""


def load_demo_buffer(
    ctx: TrainContext,
    observation_space: gym.Space,
    action_space: gym.Space,
    room: int = 0,
) -> ReplayBuffer | None:
    """The `demos=` dataset in a ReplayBuffer (None without `demos=`), checked against the
    env's spaces first so that demos of another task or camera size fail before training
    with a `DatasetError` naming the field. `room` extra slots hold intervention data."""
    path = ctx.run.demos
    if not path:
        return None
    ds = ctx.load_dataset(path)
    env_name = ctx.config.get("robot", {}).get("name") if ctx.config.get("robot") else None
    env_name = env_name or (ctx.config.get("env") or {}).get("id") or "env"
    try:
        check_dataset_spaces(ds, observation_space, action_space, str(env_name))
    except DatasetError as exc:
        raise DatasetError(f"demos={path}: {exc}") from None
    if len(ds) == 0:
        raise DatasetError(f"demos={path} holds no transitions.")
    # The env's space, not the dataset's shape: the space check accepts a same-size flat shape
    # ((3, 1) rows for a (3,) Box), and the demo rows must mix with the online buffer's.
    buf = ReplayBuffer(
        len(ds) + int(room),
        observation_space,
        action_space.shape,
        device=ctx.run.buffer_device or ctx.device,
        with_costs=True,
        extras=EXTRAS,
    )
    costs = getattr(ds, "costs", None)
    next_obs = _obs_like(ds.next_observations, observation_space)
    rewards, terminals = np.asarray(ds.rewards, np.float32), np.asarray(ds.terminals, bool)
    options = reward_options(ctx.config)
    if options is not None:  # one reward for demo and online rows: the model's
        ends = terminals | np.asarray(ds.timeouts, bool)
        rewards, terminals, successes = relabel(
            ctx.reward_model(), next_obs, terminals, options, episode_ends=ends
        )
        log.info(
            "demos=%s: %d transitions relabelled by reward=%s (%d successes)",
            path, len(ds), options["name"], successes,
        )  # fmt: skip
    intervened = np.zeros(len(ds), np.bool_)
    intervened[np.asarray(ds.metadata.get("intervened_rows") or [], np.int64)] = True
    buf.extend(
        obs=_obs_like(ds.observations, observation_space),
        actions=np.asarray(ds.actions, np.float32).reshape(len(ds), *action_space.shape),
        rewards=rewards,
        next_obs=next_obs,
        terminated=terminals.astype(np.float32),
        costs=None if costs is None else np.asarray(costs, np.float32),
        extras={"intervened": intervened},
    )
    return buf


def _obs_like(obs: Any, space: gym.Space) -> Any:
    """Dataset observations in the env's dtypes (float64 state vectors become float32)."""
    if isinstance(obs, Mapping):
        return {k: np.asarray(obs[k], space[k].dtype) for k in space.spaces}
    return np.asarray(obs, np.float32)


def demo_rows(batch_size: int, fraction: float) -> int:
    """Rows of a batch that come from demonstrations: exactly round(batch_size * fraction)."""
    return min(batch_size, max(0, round(batch_size * fraction)))


def sample_mixed(
    online: ReplayBuffer,
    demos: ReplayBuffer,
    batch_size: int,
    fraction: float,
    generator: torch.Generator | None = None,
    returns: Returns | None = None,
) -> Batch:
    """One batch: online rows first, then ``round(batch_size * fraction)`` demo rows, with
    ``extras["is_demo"]`` True on the demo rows (RLPD's symmetric sampling) and
    ``Batch.demo_rows`` their count. With `returns` (the off-policy loop's, `Returns.of` the
    algorithm's config) both parts are n-step samples with `Batch.discount` set; without,
    plain one-step transitions and no discount."""
    n_demo = demo_rows(batch_size, fraction)
    parts: list[tuple[Batch, bool]] = []
    for buf, n, is_demo in ((online, batch_size - n_demo, False), (demos, n_demo, True)):
        if n == 0:
            continue
        if returns is not None:
            sample = buf.sample_nstep(n, returns.n_step, returns.gamma, generator, returns.stop_at)
            parts.append((sample, is_demo))
        else:
            parts.append((buf.sample(n, generator), is_demo))
    batch = _concat(parts)
    batch.demo_rows = n_demo  # the demo rows are the last n_demo: no need to read the mask
    return batch


def _cat(items: list[Any]) -> Any:
    if isinstance(items[0], Mapping):
        return {k: torch.cat([it[k] for it in items]) for k in items[0]}
    return torch.cat(items)


def _concat(parts: list[tuple[Batch, bool]]) -> Batch:
    batches = [b for b, _ in parts]
    extras: dict[str, torch.Tensor] = {}
    for name in {k for b in batches for k in b.extras}:
        cols = []
        for b in batches:
            col = b.extras.get(name)
            if col is None:
                ref = next(x.extras[name] for x in batches if name in x.extras)
                col = torch.zeros((len(b), *ref.shape[1:]), dtype=ref.dtype, device=ref.device)
            cols.append(col)
        extras[name] = torch.cat(cols)
    extras["is_demo"] = torch.cat(
        [
            torch.full((len(b),), flag, dtype=torch.bool, device=b.rewards.device)
            for b, flag in parts
        ]
    )
    with_costs = all(b.costs is not None for b in batches)
    with_discount = all(b.discount is not None for b in batches)
    return Batch(
        obs=_cat([b.obs for b in batches]),
        actions=torch.cat([b.actions for b in batches]),
        rewards=torch.cat([b.rewards for b in batches]),
        next_obs=_cat([b.next_obs for b in batches]),
        terminated=torch.cat([b.terminated for b in batches]),
        costs=torch.cat([b.costs for b in batches]) if with_costs else None,  # type: ignore[misc]
        discount=torch.cat([b.discount for b in batches]) if with_discount else None,  # type: ignore[misc]
        extras=extras,
    )


def add_interventions(demos: ReplayBuffer, chunk: Any) -> int:
    """Copy the transitions a person took over (``chunk.extras["intervened"]``) into the demo
    buffer (HIL-SERL); returns how many were added."""
    flags = chunk.extras.get("intervened") if chunk.extras else None
    if flags is None:
        return 0
    rows = np.flatnonzero(np.asarray(flags, bool).reshape(-1))
    if rows.size == 0:
        return 0

    def pick(x: Any) -> Any:
        if isinstance(x, Mapping):
            return {k: np.asarray(v)[rows] for k, v in x.items()}
        return np.asarray(x)[rows]

    costs = None if chunk.costs is None else pick(chunk.costs)
    demos.extend(
        obs=pick(chunk.obs),
        actions=pick(chunk.actions),
        rewards=pick(chunk.rewards),
        next_obs=pick(chunk.next_obs),
        terminated=pick(chunk.terminated),
        costs=costs,
        extras={"intervened": np.ones(rows.size, bool)},
    )
    return int(rows.size)
