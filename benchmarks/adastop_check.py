"""Cross-check of roborl's AdaStop (roborl.plugins.report.adastop) against the `adastop`
package (Mathieu et al., 2023), on the package's own example data and on simulated nulls.

1. The package's tutorial: PPO, DDPG, SAC, TRPO on Walker, groups of n=5 (its
   examples/walker1.csv ... walker6.csv; the repository of the `adastop` package), K=5,
   alpha=0.05. Each interim's decisions and boundary from the package, from roborl's port in
   the package's one-sided mode (must be identical) and in the paper's two-sided mode.
2. Type I error: two agents with the same Gaussian scores, `--reps` repetitions; the fraction
   of repetitions in which any difference is declared (should be at most alpha).

Usage (needs `pip install adastop` and the package repository's examples/ folder):

    python benchmarks/adastop_check.py --examples PATH/TO/adastop/examples --reps 300
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from roborl.plugins.report.adastop import AdaStop

OUT = Path(__file__).parent / "results"


def read_groups(folder: Path) -> list[dict[str, list[float]]]:
    groups = []
    for i in range(1, 7):
        path = folder / f"walker{i}.csv"
        if not path.exists():
            break
        with path.open() as f:
            rows = list(csv.DictReader(f))
        names = [k for k in rows[0] if k]
        groups.append({a: [float(r[a]) for r in rows] for a in names})
    return groups


def _package(n: int, K: int, alpha: float, seed: int) -> Any:
    from adastop import MultipleAgentsComparator

    return MultipleAgentsComparator(n=n, K=K, B=10_000, alpha=alpha, seed=seed)


def replay(groups: list[dict[str, list[float]]], n: int, K: int, alpha: float, seed: int) -> dict:
    """Feed the groups interim by interim; a tester whose undecided agents have no data in the
    next file stops there (the files were made for the package's decisions)."""
    agents = list(groups[0])
    testers = {
        "package": _package(n, K, alpha, seed),
        "roborl_one_sided": AdaStop(n=n, K=K, alpha=alpha, seed=seed, two_sided=False),
        "roborl_two_sided": AdaStop(n=n, K=K, alpha=alpha, seed=seed, two_sided=True),
    }
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in testers}
    scores = {a: [] for a in agents}
    for k, group in enumerate(groups[:K]):
        for a, v in group.items():
            scores[a].extend(v)
        for name, t in testers.items():
            if t.is_finished or (out[name] and out[name][-1].get("stopped")):
                continue
            pairs = (
                t.current_comparisons if k else list(itertools.combinations(range(len(agents)), 2))
            )
            need = {agents[int(i)] for c in pairs for i in c}
            if any(len(scores[a]) < (k + 1) * n for a in need):
                out[name].append({"interim": k + 1, "stopped": "no data for its undecided agents"})
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name == "package":
                    t.partial_compare({a: np.array(v) for a, v in scores.items()}, verbose=False)
                    decisions = {
                        f"{agents[int(i)]} vs {agents[int(j)]}": d
                        for (i, j), d in (
                            (tuple(key.strip("[]").split()), d) for key, d in t.decisions.items()
                        )
                    }
                    boundary = float(t.boundary[-1][1])
                else:
                    t.partial_compare(scores)
                    decisions = {f"{a} vs {b}": d for (a, b), d in t.named_decisions().items()}
                    boundary = float(t.boundary[-1])
            out[name].append({"interim": k + 1, "boundary": boundary, "decisions": decisions})
    return out


def type_one(reps: int, n: int, K: int, alpha: float) -> dict[str, Any]:
    rs = np.random.RandomState(123)
    hits = {"package": 0, "roborl_one_sided": 0, "roborl_two_sided": 0}
    secs = dict.fromkeys(hits, 0.0)
    for r in range(reps):
        data = {"a": rs.randn(n * K), "b": rs.randn(n * K)}
        for name in hits:
            t0 = time.time()
            if name == "package":
                t = _package(n, K, alpha, r)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for k in range(K):
                        t.partial_compare({a: v[: (k + 1) * n] for a, v in data.items()}, verbose=False)  # fmt: skip
                        if t.is_finished:
                            break
            else:
                t = AdaStop(n=n, K=K, alpha=alpha, seed=r, two_sided=name.endswith("two_sided"))
                for k in range(K):
                    t.partial_compare({a: v[: (k + 1) * n] for a, v in data.items()})
                    if t.is_finished:
                        break
            secs[name] += time.time() - t0
            hits[name] += any(d != "equal" for d in t.decisions.values())
    return {
        "agents": 2, "n": n, "K": K, "alpha": alpha, "reps": reps,
        "false_difference_rate": {k: v / reps for k, v in hits.items()},
        "binomial_std_error_at_alpha": float(np.sqrt(alpha * (1 - alpha) / reps)),
        "seconds": {k: round(v, 2) for k, v in secs.items()},
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--examples", type=Path, required=True, help="adastop's examples/ folder")
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--out", default="adastop_check")
    a = p.parse_args()
    import adastop

    groups = read_groups(a.examples)
    res = {
        "adastop_version": adastop.__version__,
        "tutorial_replay": {"n": 5, "K": 5, "alpha": 0.05, "seed": 0,
                            **replay(groups, 5, 5, 0.05, seed=0)},
        "type_one_error": type_one(a.reps, 5, 3, 0.05),
    }  # fmt: skip
    pkg = res["tutorial_replay"]["package"]
    one = res["tutorial_replay"]["roborl_one_sided"]
    res["one_sided_matches_package"] = all(
        x.get("decisions") == y.get("decisions")
        and np.isclose(x.get("boundary", 0), y.get("boundary", 0), rtol=1e-12)
        for x, y in zip(pkg, one, strict=True)
    )
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.out}.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
