"""Offline RL: losses, dataset validation, corruption, Minari round trip, IQL learning, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_server import run_roborl

from roborl.core.config import build_config
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError, DatasetError
from roborl.plugins.datasets.corruption import corrupt
from roborl.plugins.datasets.files import load_file
from roborl.plugins.offline.iql import (
    IQL,
    RIQL,
    IQLConfig,
    ensemble_quantile,
    expectile_loss,
    riql_huber_loss,
    riql_preset,
)

torch.set_num_threads(1)
K = np.array([1.0, 10.0, 1.0, 1.0])  # a stabilising linear controller for InvertedPendulum


def behaviour_dataset(
    n: int = 8000, eps: float = 0.5, seed: int = 0, flip: bool = False
) -> OfflineDataset:
    """InvertedPendulum transitions from a linear controller that, on a fraction `eps` of the
    steps, acts at random (`flip=False`) or pushes the wrong way (`flip=True`: -K o)."""
    env = gym.make("InvertedPendulum-v5")
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("o", "a", "r", "o2", "d", "t")}
    o, _ = env.reset(seed=seed)
    for _ in range(n):
        good = np.clip([K @ o], -3, 3)
        if rng.random() >= eps:
            a = good
        else:
            a = -good if flip else rng.uniform(-3, 3, 1)
        o2, r, term, trunc, _ = env.step(a)
        for k, v in zip(cols, (o, a, r, o2, term, trunc)):
            cols[k].append(v)
        o = o2
        if term or trunc:
            o, _ = env.reset()
    cols["t"][-1] = True
    data = {
        "observations": np.array(cols["o"]),
        "actions": np.array(cols["a"]),
        "rewards": np.array(cols["r"]),
        "next_observations": np.array(cols["o2"]),
        "terminals": np.array(cols["d"]),
        "timeouts": np.array(cols["t"]),
    }
    meta = {
        "env_id": "InvertedPendulum-v5",
        "reference_returns": {"random": 0.0, "expert": 1000.0},
        "action_space": {"low": [-3.0], "high": [3.0]},
    }
    return OfflineDataset.from_arrays(data, meta)


def small(n: int = 100, obs_dim: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, obs_dim)).astype(np.float32)
    return {
        "observations": obs[:-1],
        "next_observations": obs[1:],
        "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "terminals": np.zeros(n, bool),
        "timeouts": (np.arange(n) % 25 == 24),
    }


# -- losses ------------------------------------------------------------------------------------


def test_expectile_loss_hand_computed() -> None:
    diff = torch.tensor([2.0, -1.0])
    # tau=0.7: (0.7 * 4 + 0.3 * 1) / 2 = 1.55
    assert expectile_loss(diff, 0.7).item() == pytest.approx(1.55)
    # tau=0.5 is half the mean squared error
    assert expectile_loss(diff, 0.5).item() == pytest.approx(0.5 * 2.5)


def test_ensemble_quantile_hand_computed() -> None:
    q = torch.tensor([[1.0, 10.0], [2.0, 0.0], [3.0, 5.0], [4.0, 5.0], [5.0, 20.0]])
    # K=5, alpha=0.25: position 0.25*4 = 1 -> second smallest member exactly
    assert ensemble_quantile(q, 0.25).tolist() == pytest.approx([2.0, 5.0])
    assert ensemble_quantile(q, 0.0).tolist() == pytest.approx([1.0, 0.0])  # the min (IQL)
    # alpha=0.1: position 0.4 -> 1 + 0.4 * (2 - 1) = 1.4 ; 0 + 0.4 * 5 = 2
    assert ensemble_quantile(q, 0.1).tolist() == pytest.approx([1.4, 2.0])


def test_riql_huber_loss_hand_computed() -> None:
    """Official RIQL form, delta = 1/sigma^2: 0.5 u^2/delta inside, |u| - delta/2 outside."""
    u = torch.tensor([0.5, -0.5, 3.0, -4.0])
    # delta = 1: 0.125, 0.125, 2.5, 3.5
    assert riql_huber_loss(u, 1.0).tolist() == pytest.approx([0.125, 0.125, 2.5, 3.5])
    # sigma = 3 -> delta = 1/9: every |u| here is outside: |u| - 1/18
    assert riql_huber_loss(u, 1 / 9).tolist() == pytest.approx(
        [x - 1 / 18 for x in (0.5, 0.5, 3, 4)]
    )
    # sigma = 0.1 -> delta = 100: quadratic, 0.5 u^2 / 100
    assert riql_huber_loss(u, 100.0).tolist() == pytest.approx([0.00125, 0.00125, 0.045, 0.08])


def test_riql_presets_follow_the_official_table() -> None:
    assert riql_preset("hopper/random/dynamics") == {
        "huber_delta": 1.0, "quantile": 0.5, "num_critics": 5,
    }  # fmt: skip
    assert riql_preset("halfcheetah/random/reward") == pytest.approx(
        {"huber_delta": 1 / 9, "quantile": 0.25, "num_critics": 5}
    )
    assert riql_preset("Hopper-v5/random/obs") == {
        "huber_delta": pytest.approx(100.0), "quantile": 0.25, "num_critics": 3,
    }  # fmt: skip
    assert riql_preset("walker2d/adversarial/reward")["huber_delta"] == pytest.approx(1 / 9)
    space = gym.spaces.Box(-1.0, 1.0, (3,))
    algo = RIQL(space, space, build_config(RIQL.Config, {"preset": "walker2d/random/dynamics"}))
    assert (algo.config.num_critics, algo.config.quantile, algo.config.huber_delta) == (
        3,
        0.25,
        1.0,
    )
    assert algo.critic(torch.zeros(4, 6)).shape[0] == 3
    with pytest.raises(ConfigError, match="unknown RIQL preset 'ant/random/obs'"):
        RIQL(space, space, build_config(RIQL.Config, {"preset": "ant/random/obs"}))


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("actions"), "actions"),
        # (without next_observations alone, they are derived: see test_dataset_inputs.py)
        (lambda d: (d.pop("next_observations"), d.pop("timeouts")), "next_observations"),
        (lambda d: d.__setitem__("rewards", d["rewards"][:-1]), "rewards"),
        (lambda d: d.__setitem__("terminals", np.zeros(99)), "terminals"),
        (lambda d: d["observations"].__setitem__((5, 1), np.nan), "observations"),
        (lambda d: d["actions"].__setitem__((7, 0), np.inf), "actions"),
        (lambda d: d["rewards"].__setitem__(3, -np.inf), "rewards"),
        (lambda d: d.__setitem__("next_observations", np.zeros((100, 4))), "next_observations"),
        (lambda d: d.__setitem__("rewards", np.zeros((100, 3))), "rewards"),
        (lambda d: d.__setitem__("terminals", np.full(100, 2)), "terminals"),
        (lambda d: d.__setitem__("costs", np.full(100, np.nan)), "costs"),
        (lambda d: d.__setitem__("actions", np.zeros((100, 2, 2))), "actions"),
    ],
)
def test_malformed_dataset_names_the_field(mutate, field: str, tmp_path: Path) -> None:
    data = small()
    mutate(data)
    with pytest.raises(DatasetError, match=f"'{field}'"):
        OfflineDataset.from_arrays(data)
    # and the same error through a file on disk
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(DatasetError, match=f"'{field}'"):
        load_file(tmp_path / "bad.npz")


def test_unreadable_and_unknown_files(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match=r"junk\.npz"):
        load_file(tmp_path / "junk.npz")
    with pytest.raises(DatasetError, match="does not exist"):
        load_file(tmp_path / "missing.hdf5")
    with pytest.raises(DatasetError, match=r"\.csv"):
        load_file(tmp_path / "x.csv")


def test_npz_hdf5_round_trip_and_sampling(tmp_path: Path) -> None:
    data = small()
    data["costs"] = np.abs(data["rewards"])
    ds = OfflineDataset.from_arrays(data, {"reference_returns": {"random": 1.0, "expert": 2.0}})
    for name in ("d.npz", "d.hdf5"):
        back = load_file(ds.save(tmp_path / name))
        for k, v in ds.arrays().items():
            np.testing.assert_array_equal(getattr(back, k), v)
        assert back.reference_returns == {"random": 1.0, "expert": 2.0}
    assert len(ds.episode_returns()) == 4  # timeouts every 25 steps
    batch = ds.sample(32, torch.Generator().manual_seed(0))
    assert batch.obs.shape == (32, 3) and batch.costs is not None and batch.costs.shape == (32,)
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


# -- corruption --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("obs", "observations"),
        ("action", "actions"),
        ("reward", "rewards"),
        ("dynamics", "next_observations"),
    ],
)
def test_random_corruption_changes_exactly_the_requested_fraction(field: str, name: str) -> None:
    ds = OfflineDataset.from_arrays(small(1000))
    bad = corrupt(ds, field, "random", rate=0.3, scale=1.0, seed=1)
    for k, v in ds.arrays().items():
        changed = np.any((getattr(bad, k) != v).reshape(len(ds), -1), axis=1)
        if k == name:
            assert changed.sum() == 300
        else:
            assert not changed.any(), k
    assert bad.metadata["corruption"]["field"] == field
    assert bad.metadata["corruption"]["corrupted"] == 300
    # reproducible from the recorded seed
    again = corrupt(ds, field, "random", rate=0.3, scale=1.0, seed=1)
    np.testing.assert_array_equal(getattr(again, name), getattr(bad, name))


@pytest.mark.parametrize("field", ["obs", "action", "reward", "dynamics"])
def test_adversarial_corruption_touches_only_its_field(field: str) -> None:
    ds = OfflineDataset.from_arrays(small(400))
    bad = corrupt(
        ds, field, "adversarial", rate=0.25, scale=0.5, seed=0, attack_steps=50, attack_iters=20
    )
    name = {"obs": "observations", "action": "actions", "reward": "rewards",
            "dynamics": "next_observations"}[field]  # fmt: skip
    for k, v in ds.arrays().items():
        changed = np.any((getattr(bad, k) != v).reshape(len(ds), -1), axis=1)
        if k != name:
            assert not changed.any(), k
        else:  # exactly the requested fraction (random starts move every chosen row)
            assert changed.sum() == 100
    if field != "reward":  # inside the box |delta| <= eps * std of the field
        std = getattr(ds, name).std(0)
        assert np.all(np.abs(getattr(bad, name) - getattr(ds, name)) <= 0.5 * std + 1e-5)


def test_corruption_rejects_bad_arguments() -> None:
    ds = OfflineDataset.from_arrays(small())
    with pytest.raises(ConfigError, match="'state'"):
        corrupt(ds, "state")
    with pytest.raises(ConfigError, match="rate"):
        corrupt(ds, "obs", rate=1.5)


def test_corrupted_actions_are_not_clipped_to_the_bounds() -> None:
    """The official attack.py does not clip: random noise of 2 std pushes actions near the
    bounds beyond them (roborl clipped them before)."""
    data = small(1000)
    data["actions"] = np.clip(data["actions"] * 1.5, -1.0, 1.0).astype(np.float32)
    ds = OfflineDataset.from_arrays(
        data, {"action_space": {"low": [-1.0, -1.0], "high": [1.0, 1.0]}}
    )
    bad = corrupt(ds, "action", "random", rate=0.3, scale=2.0, seed=0)
    assert np.abs(bad.actions).max() > 1.2
    assert (np.abs(bad.actions) > 1.0).any(axis=1).mean() > 0.05


@pytest.mark.parametrize("field", ["obs", "action", "dynamics"])
def test_adversarial_attack_lowers_q_more_than_random_noise_of_the_same_scale(field: str) -> None:
    """The attack minimises the attacker's Q (dynamics: Q(s', pi(s'))): on the corrupted rows
    it must sit well below uniform noise in the same box, and below the clean data."""
    from roborl.plugins.datasets.corruption import _attack_value, fit_attack_models

    ds = behaviour_dataset(n=800)
    kw = {"rate": 0.3, "scale": 1.0, "seed": 0, "attack_steps": 150}
    adv = corrupt(ds, field, "adversarial", **kw)
    rnd = corrupt(ds, field, "random", **{k: v for k, v in kw.items() if k != "attack_steps"})
    q, actor = fit_attack_models(ds, 150, seed=0)
    name = {"obs": "observations", "action": "actions", "dynamics": "next_observations"}[field]
    rows = np.flatnonzero(np.any(getattr(adv, name) != getattr(ds, name), axis=1))
    assert len(rows) == 240
    np.testing.assert_array_equal(  # the same rows for both kinds (same seed)
        rows, np.flatnonzero(np.any(getattr(rnd, name) != getattr(ds, name), axis=1))
    )
    obs = torch.as_tensor(ds.observations[rows])
    act = torch.as_tensor(ds.actions[rows])
    value = _attack_value(field, q, actor, obs, act)
    all_rows = torch.arange(len(rows))
    with torch.no_grad():
        v_clean, v_rand, v_adv = (
            value(torch.as_tensor(getattr(d, name)[rows]), all_rows).mean().item()
            for d in (ds, rnd, adv)
        )
    spread = abs(v_clean - v_rand) + 1e-3
    assert v_adv < v_clean and v_adv < v_rand - 2 * spread, (v_clean, v_rand, v_adv)


# -- Minari ------------------------------------------------------------------------------------


def test_minari_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    from roborl.plugins.datasets.sources import load_minari_source, save_minari

    ds = behaviour_dataset(n=600)
    ds = ds.replace(costs=np.abs(ds.observations[:, 1]).astype(np.float32))
    save_minari(ds, "roborl/pendulum/mixed-v0")
    assert load_minari_source.accepts("roborl/pendulum/mixed-v0")
    back = load_minari_source("roborl/pendulum/mixed-v0")
    for k, v in ds.arrays().items():
        np.testing.assert_allclose(getattr(back, k), v, rtol=1e-6, err_msg=k)
    assert back.reference_returns == ds.reference_returns
    import minari

    assert minari.load_dataset("roborl/pendulum/mixed-v0").total_steps == 600


# -- learning ----------------------------------------------------------------------------------


def evaluate(policy, episodes: int = 3) -> float:
    env = gym.make("InvertedPendulum-v5")
    total = 0.0
    for s in range(episodes):
        o, _ = env.reset(seed=100 + s)
        for _ in range(1000):
            o, r, term, trunc, _ = env.step(policy(o))
            total += r
            if term or trunc:
                break
    return total / episodes


def _train_offline(cls, ds: OfflineDataset, updates: int, beta: float, seed: int = 0):
    torch.manual_seed(seed)
    over = {"hidden_sizes": [64, 64], "max_steps": updates, "beta": beta}
    if cls is RIQL:  # Huber delta is per task in the paper; rewards here are ~15 per step
        over["huber_delta"] = 10.0
    algo = cls(ds.observation_space, ds.action_space, build_config(cls.Config, over))
    algo.prepare(ds)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        metrics = algo.update(ds.sample(256, gen))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    return algo


@pytest.mark.parametrize(("cls", "updates"), [(IQL, 3000), (RIQL, 1200)], ids=["IQL", "RIQL"])
def test_offline_rl_beats_behaviour_cloning_where_cloning_fails(cls, updates: int) -> None:
    """The data: a stabilising controller that pushes the wrong way (-K o) on half of its
    steps. Cloning it averages the two actions to about zero (doing nothing scores 28.7 on
    these eval seeds); offline RL must pick the good action out by its advantage.

    Negative control, same code and budget with beta=0 (every advantage weight 1: plain
    behaviour cloning). Measured on seeds 0/1/2 (eval seeds 100-102):
    behaviour return 55.8; IQL 3000 updates: BC 25.7/28.3/24.7, IQL 92/143/101;
    RIQL 3000 updates: BC 34.3/29.3/27.7, RIQL 1000/1000/1000, and at this test's 1200
    updates (seed 0) BC 30.3, RIQL 1000. The bounds: offline RL above 1.4x
    the behaviour return and 2.5x its own BC control, and the control under the behaviour
    return (a run that ignored the advantages would fail both).
    """
    ds = behaviour_dataset(flip=True)
    behaviour = float(ds.episode_returns()[:-1].mean())
    bc = evaluate(_train_offline(cls, ds, updates, beta=0.0).policy().act)
    algo = _train_offline(cls, ds, updates, beta=3.0)
    score = evaluate(algo.policy().act)
    print(f"{cls.__name__}: behaviour {behaviour:.1f}, BC control {bc:.1f}, offline RL {score:.1f}")
    assert bc < behaviour, (bc, behaviour)
    assert score > 1.4 * behaviour and score > 2.5 * bc, (score, behaviour, bc)
    clone = cls(ds.observation_space, ds.action_space, algo.config)
    clone.load_state_dict(algo.state_dict())
    o = ds.observations[:5]
    np.testing.assert_allclose(clone.policy().act(o), algo.policy().act(o))


def test_iql_config_defaults_match_the_paper() -> None:
    c = IQLConfig()
    assert (c.expectile, c.beta, c.max_weight, c.tau, c.batch_size) == (0.7, 3.0, 100.0, 0.005, 256)
    r = RIQL.Config()
    assert (r.num_critics, r.quantile, r.normalize_obs, r.deterministic_actor) == (
        5,
        0.25,
        True,
        True,
    )
    # the official script: sigma = 1, raw rewards, targets clipped to [-100, 1000]
    assert (r.huber_delta, r.normalize_reward, r.target_clip) == (1.0, False, [-100.0, 1000.0])


# -- end to end through the CLI ----------------------------------------------------------------


def test_train_iql_from_cli(tmp_path: Path) -> None:
    path = behaviour_dataset(n=2000).save(tmp_path / "pend.hdf5")
    out = run_roborl(["dataset", "info", str(path)], timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["transitions"] == 2000
    run_dir = tmp_path / "run"
    cmd = [
        "train", "algo=iql", f"dataset={path}",
        "env=inverted_pendulum", "total_updates=60", "eval_every=30", "eval_episodes=1",
        "checkpoint_every=60", "log_every=30", "algo.hidden_sizes=[32,32]", "progress=false",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    res = run_roborl(cmd, timeout=150, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if "eval/normalized_score" in x]
    assert evals and evals[-1]["eval/normalized_score"] == pytest.approx(
        evals[-1]["eval/return_mean"] / 10.0
    )
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    # Issue 17 item 5: the cosine horizon is the run's total_updates, and the actor's lr has
    # decayed to 0 at the end of the run (the old default horizon was 1e6 updates).
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["state"]
    assert state["lr_horizon"] == 60
    assert state["actor_opt"]["param_groups"][0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_offline_run_acts_in_the_envs_action_bounds(tmp_path: Path) -> None:
    """A file without recorded action bounds, actions in [-1.5, 1.5]: the data's own guess
    is [-2, 2], but InvertedPendulum takes [-3, 3]; the policy must be scaled to the env."""
    ds = behaviour_dataset(n=300)
    meta = {k: v for k, v in ds.metadata.items() if k != "action_space"}
    path = ds.replace(actions=np.clip(ds.actions, -1.5, 1.5), metadata={}).save(tmp_path / "p.npz")
    data = dict(np.load(path))
    data["__metadata__"] = np.array(json.dumps(meta))
    np.savez(path, **data)
    assert load_file(path).action_space.high.tolist() == [2.0]
    run_dir = tmp_path / "run"
    cmd = [
        "train", "algo=iql", f"dataset={path}",
        "env=inverted_pendulum", "total_updates=5", "eval_every=5", "eval_episodes=1",
        "algo.hidden_sizes=[8,8]", "progress=false", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    res = run_roborl(cmd, timeout=150, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert np.asarray(ckpt["action_space"]["high"]).tolist() == [3.0]


def test_cli_refuses_a_dataset_of_another_task_before_training(tmp_path: Path) -> None:
    """InvertedPendulum data (obs 4, action 1) with env=hopper (obs 11, action 3): a clear
    DatasetError before the first update, not a tensor-size crash at the first evaluation."""
    path = behaviour_dataset(n=300).save(tmp_path / "pend.npz")
    run_dir = tmp_path / "run"
    cmd = [
        "train", "algo=iql", f"dataset={path}",
        "env=hopper", "total_updates=50", "eval_every=1000", "progress=false",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    res = run_roborl(cmd, timeout=150, cwd=tmp_path)
    assert res.returncode != 0
    err = res.stderr + res.stdout
    assert "'observations'" in err and "(4,)" in err and "(11,)" in err and "Hopper" in err
    assert "Traceback" not in err
    metrics = run_dir / "metrics.jsonl"
    assert not metrics.exists() or "train/" not in metrics.read_text()
