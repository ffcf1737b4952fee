"""Exact tests of demo mixing (roborl/core/demos.py), written against the mutants that
`make mutants` found alive there (tests/mutants-report.md): the default one-step sampling,
the seeded generator reaching both buffers, a one-row part of a batch, extras one buffer lacks,
dataset dtypes, and the intervention rows copied into the demo buffer with their costs."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer, Returns
from roborl.core.datasets import OfflineDataset
from roborl.core.demos import (
    EXTRAS,
    _concat,
    _obs_like,
    add_interventions,
    load_demo_buffer,
    sample_mixed,
)
from roborl.core.errors import DatasetError
from roborl.core.interfaces import Batch

OBS = 3


def filled(n: int, reward: float, extras=None, with_costs: bool = True) -> ReplayBuffer:
    rng = np.random.default_rng(int(reward * 10) + n)
    buf = ReplayBuffer(n, (OBS,), (1,), with_costs=with_costs, extras=extras or {})
    obs = rng.uniform(-1, 1, (n + 1, OBS)).astype(np.float32)
    buf.extend(
        obs[:-1],
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.full(n, reward, np.float32),
        obs[1:],
        np.zeros(n, np.float32),
        costs=np.full(n, reward, np.float32) if with_costs else None,
        extras={
            name: np.ones((n, *shape), dtype) for name, (shape, dtype) in (extras or {}).items()
        },
    )
    return buf


def test_the_default_is_one_step_sampling_without_a_discount_column() -> None:
    b = sample_mixed(filled(40, 0.0), filled(20, 1.0), 8, 0.5, torch.Generator().manual_seed(0))
    assert b.discount is None
    assert b.demo_rows == 4 and len(b) == 8


def test_n_step_sampling_from_two_steps_with_the_given_gamma() -> None:
    b = sample_mixed(
        filled(40, 0.0), filled(20, 1.0), 8, 0.5, torch.Generator().manual_seed(0),
        Returns(gamma=0.99, n_step=2),
    )  # fmt: skip
    assert b.discount is not None
    # no terminals: a row uses both steps (discount 0.99^2, demo reward 1 + 0.99) unless it
    # starts at the newest transition (one step: 0.99, reward 1)
    two = torch.isclose(b.discount, torch.tensor(0.99**2))
    assert bool((two | torch.isclose(b.discount, torch.tensor(0.99))).all()) and bool(two.any())
    torch.testing.assert_close(b.rewards[4:], torch.where(two[4:], 1.0 + 0.99, 1.0))


def test_a_part_of_one_row_is_sampled() -> None:
    b = sample_mixed(filled(40, 0.0), filled(20, 1.0), 4, 0.25, torch.Generator().manual_seed(0))
    assert len(b) == 4 and b.demo_rows == 1
    assert b.rewards.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert b.extras["is_demo"].tolist() == [False, False, False, True]
    b = sample_mixed(filled(40, 0.0), filled(20, 1.0), 4, 0.75, torch.Generator().manual_seed(0))
    assert b.rewards.tolist() == [0.0, 1.0, 1.0, 1.0] and b.demo_rows == 3


def test_the_seeded_generator_alone_decides_both_parts() -> None:
    online, demos = filled(40, 0.0), filled(20, 1.0)
    batches = []
    for global_seed, n_step in ((1, 1), (2, 1), (1, 3), (2, 3)):
        torch.manual_seed(global_seed)  # must not matter: the generator is passed through
        batches.append(
            sample_mixed(
                online, demos, 16, 0.5, torch.Generator().manual_seed(7), Returns(0.9, n_step)
            )
        )
    for a, b in (batches[:2], batches[2:]):
        assert torch.equal(a.obs, b.obs) and torch.equal(a.actions, b.actions)


def test_the_seeded_generator_decides_one_step_batches_too() -> None:
    """Without `returns` (plain one-step rows) the generator reaches both parts as well."""
    online, demos = filled(40, 0.0), filled(20, 1.0)
    batches = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # must not matter: the generator is passed through
        batches.append(sample_mixed(online, demos, 16, 0.5, torch.Generator().manual_seed(7)))
    assert torch.equal(batches[0].obs, batches[1].obs)
    assert torch.equal(batches[0].actions, batches[1].actions)


def test_extras_one_buffer_lacks_are_zeros_of_the_others_shape_and_dtype() -> None:
    extras = {**EXTRAS, "vec": ((2,), np.float32)}
    online, demos = filled(40, 0.0, with_costs=False), filled(20, 1.0, extras=extras)
    b = sample_mixed(online, demos, 6, 0.5, torch.Generator().manual_seed(0))
    assert b.costs is None  # the online buffer has none
    assert b.extras["intervened"].dtype == torch.bool
    assert b.extras["intervened"].tolist() == [False] * 3 + [True] * 3
    assert b.extras["vec"].dtype == torch.float32 and b.extras["vec"].shape == (6, 2)
    assert b.extras["vec"].tolist() == [[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 3
    b = sample_mixed(demos, online, 6, 0.5, torch.Generator().manual_seed(0))  # other order
    assert b.extras["vec"].tolist() == [[1.0, 1.0]] * 3 + [[0.0, 0.0]] * 3


def test_dataset_observations_take_the_envs_dtypes() -> None:
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8),
            "state": gym.spaces.Box(-1, 1, (2,), np.float32),
        }
    )
    obs = {"image": np.full((3, 2, 2, 1), 7.0), "state": np.full((3, 2), 0.5, np.float64)}
    out = _obs_like(obs, space)
    assert out["image"].dtype == np.uint8 and out["state"].dtype == np.float32
    assert out["image"].shape == (3, 2, 2, 1) and int(out["image"][0, 0, 0, 0]) == 7
    np.testing.assert_array_equal(out["state"], np.full((3, 2), 0.5, np.float32))
    flat = _obs_like(np.full((3, 4), 0.25, np.float64), gym.spaces.Box(-1, 1, (4,)))
    assert flat.dtype == np.float32 and flat.shape == (3, 4) and float(flat[0, 0]) == 0.25


def chunk(flags, extras=True, costs=True, dict_obs=False):
    n = len(flags)
    obs = np.arange(n * OBS, dtype=np.float32).reshape(n, OBS)
    return SimpleNamespace(
        obs={"state": obs} if dict_obs else obs,
        actions=np.arange(n, dtype=np.float32).reshape(n, 1),
        rewards=np.arange(n, dtype=np.float32),
        next_obs={"state": obs + 100} if dict_obs else obs + 100,
        terminated=np.zeros(n, np.float32),
        costs=np.arange(n, dtype=np.float32) + 0.5 if costs else None,
        extras={"intervened": np.asarray(flags)} if extras else None,
    )


def test_interventions_copy_exactly_the_flagged_rows_with_their_costs() -> None:
    demos = ReplayBuffer(10, (OBS,), (1,), with_costs=True, extras=EXTRAS)
    assert add_interventions(demos, chunk([False, True, False, True])) == 2
    assert len(demos) == 2
    assert demos.rewards[:2].tolist() == [1.0, 3.0]
    assert demos.costs[:2].tolist() == [1.5, 3.5]
    assert demos.actions[:2, 0].tolist() == [1.0, 3.0]
    assert demos.obs[:2, 0].tolist() == [3.0, 9.0]
    assert demos.extras["intervened"][:2].tolist() == [True, True]


def test_no_flags_or_no_flagged_row_adds_nothing() -> None:
    demos = ReplayBuffer(10, (OBS,), (1,), with_costs=True, extras=EXTRAS)
    assert add_interventions(demos, chunk([False, False])) == 0
    assert add_interventions(demos, chunk([True], extras=False)) == 0
    assert len(demos) == 0


def test_interventions_with_dict_observations() -> None:
    space = gym.spaces.Dict({"state": gym.spaces.Box(-100, 200, (OBS,), np.float32)})
    demos = ReplayBuffer(10, space, (1,), with_costs=True, extras=EXTRAS)
    assert add_interventions(demos, chunk([True, False, True], dict_obs=True)) == 2
    assert demos.obs["state"][:2, 0].tolist() == [0.0, 6.0]
    assert demos.rewards[:2].tolist() == [0.0, 2.0]


def test_the_zero_filled_extras_are_made_on_the_batchs_device() -> None:
    """On a GPU buffer the zeros must be made on the GPU, or `torch.cat` fails; the meta device
    stands in for one here (any device but the CPU default shows the difference)."""

    def batch(n: int, extras: dict) -> Batch:
        t = torch.zeros(n, device="meta")
        return Batch(t, t[:, None], t, t, t, extras=extras)

    mixed = _concat(
        [
            (batch(2, {}), False),
            (batch(3, {"vec": torch.ones(3, 2, device="meta")}), True),
        ]
    )
    assert mixed.extras["vec"].device.type == "meta" and mixed.extras["vec"].shape == (5, 2)
    assert mixed.extras["is_demo"].device.type == "meta"


def demo_dataset(
    n: int = 5, obs_dim: int = OBS, costs: bool = True, intervened: tuple = (1, 3)
) -> OfflineDataset:
    obs = np.arange((n + 1) * obs_dim, dtype=np.float64).reshape(n + 1, obs_dim)
    data = {
        "observations": obs[:-1],
        "actions": np.linspace(-1, 1, n).reshape(n, 1),
        "rewards": np.arange(n, dtype=np.float64),
        "next_observations": obs[1:],
        "terminals": np.eye(n)[-1].astype(bool),
        "timeouts": np.zeros(n, bool),
    }
    if costs:
        data["costs"] = np.arange(n, dtype=np.float64) + 0.5
    return OfflineDataset.from_arrays(data, metadata={"intervened_rows": list(intervened)})


def context(config: dict, ds: OfflineDataset) -> SimpleNamespace:
    return SimpleNamespace(
        run=SimpleNamespace(demos="demos.npz", buffer_device=None),
        device="cpu",
        config=config,
        load_dataset=lambda path: ds,
    )


def test_demos_load_into_a_buffer_of_exactly_their_size_with_their_interventions() -> None:
    ds = demo_dataset()
    box = gym.spaces.Box(-100, 100, (OBS,), np.float32)
    action = gym.spaces.Box(-1, 1, (1,), np.float32)
    buf = load_demo_buffer(context({"env": {"id": "Demo-v0"}}, ds), box, action)
    assert buf.capacity == 5 and len(buf) == 5
    assert buf.obs.dtype == torch.float32 and buf.obs[:, 0].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert buf.rewards.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert buf.terminated.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert buf.costs.tolist() == [0.5, 1.5, 2.5, 3.5, 4.5]
    assert buf.extras["intervened"].tolist() == [False, True, False, True, False]
    roomy = load_demo_buffer(context({}, ds), box, action, room=3)
    assert roomy.capacity == 8 and len(roomy) == 5


@pytest.mark.parametrize(
    ("config", "name"),
    [
        ({"robot": {"name": "arm7"}, "env": {"id": "Other-v0"}}, "arm7"),
        ({"robot": {}, "env": {"id": "Other-v0"}}, "Other-v0"),
        ({"robot": None, "env": {"id": "Other-v0"}}, "Other-v0"),  # `robot: null` in a config
        ({"env": {"id": "Other-v0"}}, "Other-v0"),
        ({"env": {}}, "env"),
        ({}, "env"),
    ],
)
def test_demos_of_another_task_name_the_robot_or_env(config, name) -> None:
    ds = demo_dataset(obs_dim=OBS + 1)
    box = gym.spaces.Box(-100, 100, (OBS,), np.float32)
    with pytest.raises(DatasetError) as err:
        load_demo_buffer(context(config, ds), box, gym.spaces.Box(-1, 1, (1,), np.float32))
    message = str(err.value)
    assert message.startswith("demos=demos.npz: dataset field 'observations' has per-step shape")
    assert f"but env {name!r} observes shape ({OBS},)" in message


def test_a_single_transition_loads_and_an_empty_dataset_is_refused() -> None:
    box = gym.spaces.Box(-100, 100, (OBS,), np.float32)
    action = gym.spaces.Box(-1, 1, (1,), np.float32)
    one = load_demo_buffer(context({}, demo_dataset(n=1, intervened=())), box, action)
    assert len(one) == 1
    ds = demo_dataset()
    with pytest.raises(DatasetError) as err:
        load_demo_buffer(
            context({}, EmptyDataset(**{f.name: getattr(ds, f.name) for f in fields(ds)})),
            box,
            action,
        )
    assert str(err.value) == "demos=demos.npz holds no transitions."


class EmptyDataset(OfflineDataset):
    """Passes the space checks but holds no transitions (`OfflineDataset.from_arrays` refuses
    to build an empty one)."""

    def __len__(self) -> int:
        return 0


def test_costs_are_mixed_when_both_buffers_keep_them() -> None:
    b = sample_mixed(filled(40, 0.0), filled(20, 1.0), 6, 0.5, torch.Generator().manual_seed(0))
    assert b.costs is not None and b.costs.tolist() == [0.0] * 3 + [1.0] * 3


def test_demos_without_costs_get_a_zero_cost_column() -> None:
    """The demo buffer always keeps costs, so it mixes with a safe-RL online buffer."""
    box = gym.spaces.Box(-100, 100, (OBS,), np.float32)
    action = gym.spaces.Box(-1, 1, (1,), np.float32)
    buf = load_demo_buffer(context({}, demo_dataset(costs=False)), box, action)
    assert buf.costs is not None and buf.costs.tolist() == [0.0] * 5
