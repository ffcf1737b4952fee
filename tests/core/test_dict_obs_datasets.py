"""Datasets with dict observations (uint8 images beside states): NPZ, HDF5 and Minari.

The demos that `roborl demos record` writes and `demos=PATH` reads go through these formats,
so a round trip must give back the same frames, uint8, under the same keys, and a malformed
file must fail with a DatasetError naming the key.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.dataset_spaces import check_dataset_spaces
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.core.spaces import space_to_dict
from roborl.plugins.datasets.files import load_file
from roborl.plugins.datasets.sources import load_minari_source, save_minari

SPACE = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        "state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
    }
)
ACTIONS = gym.spaces.Box(-1, 1, (2,), np.float32)


def _episodes(lengths=(5, 3, 4), seed=0):
    """Consecutive episodes: next obs of a step is the obs of the next (Minari can hold it)."""
    rng = np.random.default_rng(seed)
    obs, nxt, act, rew, term, tout = [], [], [], [], [], []
    for e, length in enumerate(lengths):
        frames = rng.integers(0, 256, (length + 1, 8, 8, 3), dtype=np.uint8)
        states = rng.normal(size=(length + 1, 3)).astype(np.float32)
        obs.append({"image": frames[:-1], "state": states[:-1]})
        nxt.append({"image": frames[1:], "state": states[1:]})
        act.append(rng.uniform(-1, 1, (length, 2)).astype(np.float32))
        rew.append(rng.normal(size=length).astype(np.float32))
        t = np.zeros(length, bool)
        o = np.zeros(length, bool)
        (t if e % 2 == 0 else o)[-1] = True
        term.append(t)
        tout.append(o)

    def cat(parts):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    return {
        "observations": cat(obs),
        "next_observations": cat(nxt),
        "actions": np.concatenate(act),
        "rewards": np.concatenate(rew),
        "terminals": np.concatenate(term),
        "timeouts": np.concatenate(tout),
    }


def _meta():
    return {"observation_space": space_to_dict(SPACE), "action_space": space_to_dict(ACTIONS)}


def _assert_same(a: OfflineDataset, b: OfflineDataset) -> None:
    assert a.dict_obs and b.dict_obs
    for field in ("observations", "next_observations"):
        for k in ("image", "state"):
            x, y = getattr(a, field)[k], getattr(b, field)[k]
            assert x.dtype == y.dtype and np.array_equal(x, y), (field, k)
    for field in ("actions", "rewards", "terminals", "timeouts"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field


@pytest.mark.parametrize("suffix", [".npz", ".hdf5"])
def test_file_round_trip_keeps_uint8_frames(tmp_path, suffix):
    ds = OfflineDataset.from_arrays(_episodes(), _meta())
    assert ds.observations["image"].dtype == np.uint8
    assert ds.observations["state"].dtype == np.float32
    back = load_file(ds.save(tmp_path / f"demo{suffix}"))
    _assert_same(ds, back)
    assert back.observation_space == SPACE
    assert back.action_space == ACTIONS
    assert back.obs_shape == {"image": (8, 8, 3), "state": (3,)}
    assert back.info()["episodes"] == 3
    batch = back.sample(16, torch.Generator().manual_seed(0))
    assert (
        batch.obs["image"].dtype == torch.uint8 and batch.next_obs["state"].dtype == torch.float32
    )
    check_dataset_spaces(back, SPACE, ACTIONS, "test")


def test_minari_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    ds = OfflineDataset.from_arrays(_episodes(), _meta())
    root = save_minari(ds, "roborl/dictdemo/test-v0")
    back = load_minari_source(str(root))
    _assert_same(ds, back)
    assert back.observation_space == SPACE


def test_derived_next_observations_and_timeouts_for_dicts():
    data = _episodes()
    no_timeouts = {k: v for k, v in data.items() if k != "timeouts"}
    ds = OfflineDataset.from_arrays(no_timeouts)
    # a gap between next obs and the next row marks the non-terminal episode end
    assert np.array_equal(ds.timeouts[:-1], data["timeouts"][:-1])
    no_next = {k: v for k, v in data.items() if k != "next_observations"}
    derived = OfflineDataset.from_arrays(no_next)
    keep = ~data["timeouts"]
    keep[-1] = False
    want = {k: v[1:][keep[:-1]] for k, v in data["observations"].items()}
    assert np.array_equal(derived.next_observations["image"], want["image"])


def test_errors_name_the_key():
    data = _episodes()
    bad = dict(data, next_observations={"image": data["next_observations"]["image"]})
    with pytest.raises(DatasetError, match="keys"):
        OfflineDataset.from_arrays(bad)
    state = data["observations"]["state"].copy()
    state[4, 1] = np.nan
    bad = dict(data, observations={**data["observations"], "state": state})
    with pytest.raises(DatasetError, match=r"observations/state.*transition 4"):
        OfflineDataset.from_arrays(bad)
    short = dict(
        data, observations={**data["observations"], "image": data["observations"]["image"][:3]}
    )
    with pytest.raises(DatasetError, match=r"observations/image.*length 3"):
        OfflineDataset.from_arrays(short)
    text = dict(data, observations={**data["observations"], "image": np.full((12, 8, 8, 3), "x")})
    text["next_observations"] = {
        **data["next_observations"],
        "image": text["observations"]["image"],
    }
    with pytest.raises(DatasetError, match=r"observations/image.*dtype"):
        OfflineDataset.from_arrays(text)
    ds = OfflineDataset.from_arrays(data)
    other = gym.spaces.Dict(
        {**SPACE.spaces, "image": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)}
    )
    with pytest.raises(DatasetError, match=r"observations/image.*\(8, 8, 3\).*\(16, 16, 3\)"):
        check_dataset_spaces(ds, other, ACTIONS, "tabletop")
    with pytest.raises(DatasetError, match="missing \\['wrist'\\]"):
        check_dataset_spaces(ds, gym.spaces.Dict({**SPACE.spaces, "wrist": SPACE["image"]}),
                             ACTIONS, "tabletop")  # fmt: skip
    with pytest.raises(DatasetError, match="is a dict"):
        check_dataset_spaces(ds, gym.spaces.Box(-1, 1, (5,)), ACTIONS, "hopper")


def test_npz_with_both_array_and_group_is_refused(tmp_path):
    data = _episodes()
    flat = {f"observations/{k}": v for k, v in data["observations"].items()}
    path = tmp_path / "bad.npz"
    rest = {k: v for k, v in data.items() if k != "observations"}
    rest["next_observations"] = data["next_observations"]["state"]
    np.savez(path, **flat, **rest)
    with pytest.raises(DatasetError, match=r"dict of arrays|one array"):
        load_file(path)
