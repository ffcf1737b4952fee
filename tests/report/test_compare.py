"""`roborl compare`: AdaStop stops early on a clearly better method, declares no winner
between identical configs, and writes the decision table, seeds and error level."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_server import run_roborl

from roborl.core.errors import ConfigError
from roborl.plugins.report.compare import CompareOptions, Method, main, run_comparison

# Tiny online runs on InvertedPendulum-v5: SAC after 800 env steps (300 updates) balances
# several times longer than uniform random actions (about 30 vs 5 steps), every seed.
PENDULUM = [
    "env=inverted_pendulum",
    "total_steps=800",
    "learning_starts=200",
    "eval_every=800",
    "checkpoint_every=800",
    "log_every=800",
    "eval_episodes=3",
]
SMALL_SAC = "sac: algo=sac algo.hidden_sizes=[64,64] algo.batch_size=64 utd_ratio=0.5"


def _cli(*args: str, timeout: int = 400) -> subprocess.CompletedProcess[str]:
    return run_roborl(["compare", *args], timeout=timeout)


def test_decisions_follow_the_data_in_either_order() -> None:
    """Synthetic scores (no training): the better method wins after the first group whatever
    its position in the pair; two methods of one distribution are equal after K groups."""
    means = {"bad": 0.0, "good": 10.0, "bad2": 0.0}
    rs = np.random.RandomState(0)
    opts = CompareOptions(n=5, max_groups=3, alpha=0.05, seed=7)
    methods = [Method(label, (f"algo={label}",)) for label in means]
    (test,) = run_comparison(
        methods, ["env=x"], opts, lambda jobs: [means[j.method] + rs.randn() for j in jobs]
    )
    rows = {(d["a"], d["b"]): d for d in test.decisions()}
    assert rows[("bad", "good")]["decision"] == "good better"  # AdaStop's "smaller"
    assert rows[("good", "bad2")]["decision"] == "good better"  # AdaStop's "larger"
    assert rows[("bad", "bad2")]["decision"] == "equal"
    assert test.groups == 3
    # good left the test after group 1; the others ran every group
    assert len(test.seeds["good"]) == 5 and len(test.seeds["bad"]) == 15
    all_seeds = [s for seeds in test.seeds.values() for s in seeds]
    assert len(all_seeds) == len(set(all_seeds))  # each method its own seeds
    assert test.seeds["good"] == [8, 11, 14, 17, 20]  # seed + m + r * M


def test_compare_sac_vs_random_stops_early_with_sac_better(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = _cli(SMALL_SAC, "algo=random", *PENDULUM, "n=5", "max_groups=2", "alpha=0.05",
                f"out={out}", "reps=200")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "compare.json").read_text())
    (row,) = res["decisions"]
    assert (row["a"], row["b"], row["decision"]) == ("sac", "random", "sac better")
    assert res["status"] == "decided"
    assert res["groups_used"] == {"env.id=InvertedPendulum-v5": 1}  # of 2: stopped early
    assert res["seeds"]["env.id=InvertedPendulum-v5"] == {"sac": [0, 2, 4, 6, 8], "random": [1, 3, 5, 7, 9]}  # fmt: skip
    assert res["family_wise_error"] == 0.05
    scores = res["scores"]["env.id=InvertedPendulum-v5"]
    assert min(scores["sac"]) > max(scores["random"])
    md = (out / "compare.md").read_text()
    assert "| InvertedPendulum-v5 | sac | random | sac better |" in md
    assert "stopped early" in md and "alpha=0.05" in md
    assert len(list((out / "runs").rglob("summary.json"))) == 10
    html = (out / "report" / "report.html").read_text()
    assert "AdaStop decisions" in html and "sac better" in html
    # the same command again reuses the finished runs and reaches the same decision
    again = _cli(SMALL_SAC, "algo=random", *PENDULUM, "n=5", "max_groups=2", "alpha=0.05",
                 f"out={out}", "report=false")  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "seed 0:" not in again.stdout  # nothing ran again
    assert json.loads((out / "compare.json").read_text())["decisions"] == res["decisions"]


def test_compare_identical_configs_declares_no_winner(tmp_path: Path) -> None:
    """Two identical configs on independent seeds. Under this null AdaStop declares a
    winner with probability at most alpha (test_adastop.py measures the rate), so one fixed
    seed set can still be such a draw, and seeds 0-9 are one: the random policy's eval
    returns alternate high/low (evens 6.6, odds 4.4 on average). seed=100 is a typical draw."""
    out = tmp_path / "same"
    proc = _cli("a: algo=random", "b: algo=random", *PENDULUM, "n=5", "max_groups=2",
                "seed=100", f"out={out}", "report=false")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "compare.json").read_text())
    (row,) = res["decisions"]
    assert row["decision"] == "equal" and row["better"] is None
    assert res["status"] == "budget spent"
    assert res["groups_used"] == {"env.id=InvertedPendulum-v5": 2}
    seeds = res["seeds"]["env.id=InvertedPendulum-v5"]
    assert seeds == {"a": list(range(100, 120, 2)), "b": list(range(101, 120, 2))}
    scores = res["scores"]["env.id=InvertedPendulum-v5"]
    assert scores["a"] != scores["b"]  # independent seeds: the test had real noise to judge


def test_compare_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two or more methods"):
        main(["algo=sac", "env=hopper"])
    with pytest.raises(ConfigError, match="both named 'random'"):
        main(["algo=random", "algo=random"])
    with pytest.raises(ConfigError, match="only the task list"):
        main(["algo=sac", "algo=random", "total_steps=100,200"])
    with pytest.raises(ConfigError, match="seeds are compare's"):
        main(["algo=sac seed=3", "algo=random"])
    with pytest.raises(ConfigError, match="unknown algorithm"):
        main(["algo=sacc", "algo=random", f"out={tmp_path / 'x'}"])
    assert not (tmp_path / "x").exists()  # nothing ran before the configs composed
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "compare.json").write_text(json.dumps({"spec": {"n": 2}}))
    with pytest.raises(ConfigError, match="another setup"):
        main(["algo=sac", "algo=random", f"out={tmp_path / 'y'}"])
