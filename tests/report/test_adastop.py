"""roborl's AdaStop: the authors' package reproduced exactly in its own (one-sided reference)
mode, and in the paper's two-sided mode a false-difference rate at most alpha."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from roborl.plugins.report.adastop import AdaStop


def _package(data: dict[str, np.ndarray], n: int, K: int, seed: int) -> tuple[dict, list]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from adastop import MultipleAgentsComparator

        comp = MultipleAgentsComparator(n=n, K=K, B=10_000, alpha=0.05, seed=seed)
        for k in range(K):
            comp.partial_compare({a: v[: (k + 1) * n] for a, v in data.items()}, verbose=False)
            if comp.is_finished:
                break
    decisions = {
        tuple(int(x) for x in key.strip("[]").split()): d for key, d in comp.decisions.items()
    }
    return decisions, [b[1] for b in comp.boundary]


def _ours(data: dict[str, np.ndarray], n: int, K: int, seed: int, two_sided: bool) -> AdaStop:
    test = AdaStop(n=n, K=K, B=10_000, alpha=0.05, seed=seed, two_sided=two_sided)
    for k in range(K):
        test.partial_compare({a: v[: (k + 1) * n] for a, v in data.items()})
        if test.is_finished:
            break
    return test


@pytest.mark.parametrize(
    ("agents", "n", "K", "shift"),
    [(2, 5, 3, 0.0), (3, 5, 3, 1.2), (2, 3, 4, 0.8), (3, 5, 2, 0.0)],
)
def test_one_sided_mode_reproduces_the_adastop_package(
    agents: int, n: int, K: int, shift: float
) -> None:
    """Same decisions and the same boundary at every interim, on the package's own code."""
    rs = np.random.RandomState(agents * 100 + n * 10 + K)
    data = {f"agent{i}": rs.randn(n * K) + shift * (i % 2) for i in range(agents)}
    decisions, boundary = _package(data, n, K, seed=3)
    ours = _ours(data, n, K, seed=3, two_sided=False)
    assert ours.decisions == decisions
    assert ours.boundary == pytest.approx(boundary, rel=1e-12)


def test_two_sided_test_keeps_its_error_level_and_finds_real_differences() -> None:
    rs = np.random.RandomState(0)
    reps, n, K = 300, 5, 3
    false_two, false_one, found = 0, 0, 0
    for r in range(reps):
        same = {"a": rs.randn(n * K), "b": rs.randn(n * K)}
        false_two += any(d != "equal" for d in _ours(same, n, K, r, True).decisions.values())
        false_one += any(d != "equal" for d in _ours(same, n, K, r, False).decisions.values())
        shifted = {"a": rs.randn(n * K) + 1.5, "b": rs.randn(n * K)}
        found += _ours(shifted, n, K, r, True).decisions[(0, 1)] == "larger"
    # alpha = 0.05; 300 repetitions: a binomial standard error of 0.013
    assert false_two / reps <= 0.05 + 2 * 0.013, false_two
    assert false_one > false_two  # the package's one-sided reference is the liberal one
    assert found / reps >= 0.8, found  # a 1.5-sigma shift is found with n*K <= 15 seeds


def test_sequential_bookkeeping() -> None:
    """Decided pairs leave the test, so only agents of undecided pairs need more runs; the
    last interim accepts what is left as equal."""
    rs = np.random.RandomState(1)
    data = {"low": rs.randn(15), "high": rs.randn(15) + 20.0, "low2": rs.randn(15)}
    test = AdaStop(n=5, K=3, alpha=0.05, seed=0)
    test.partial_compare({a: v[:5] for a, v in data.items()})
    assert test.decisions[(0, 1)] == "smaller" and test.decisions[(1, 2)] == "larger"
    assert test.current_comparisons == [(0, 2)] and not test.is_finished
    test.partial_compare(
        {"low": data["low"][:10], "high": data["high"][:5], "low2": data["low2"][:10]}
    )
    test.partial_compare({"low": data["low"], "high": data["high"][:5], "low2": data["low2"]})
    assert test.decisions[(0, 2)] == "equal" and test.is_finished
    # two-sided, the first interim's smallest p-value is 2 / C(2n, n): n=4 cannot decide
    # at alpha / K = 0.05 / 3 < 2 / 70, whatever the data
    four = AdaStop(n=4, K=3, alpha=0.05, seed=0)
    four.partial_compare({a: v[:4] for a, v in data.items()})
    assert set(four.decisions.values()) == {"continue"}
    with pytest.raises(RuntimeError, match="finished"):
        test.partial_compare(data)
    with pytest.raises(ValueError, match="needs 10"):
        short = AdaStop(n=5, K=3)
        short.partial_compare({a: v[:5] for a, v in data.items()})
        short.partial_compare({a: v[:7] for a, v in data.items()})
