"""AdaStop, the sequential permutation test of Mathieu et al. (2023).

Mathieu, Le Tour, Le Corff, Gilbert, Moulines (2023), "AdaStop: adaptive statistical testing
for sound comparisons of Deep RL agents" (arXiv:2306.10882). L agents, a set of pairwise
comparisons, at most K interims of n new scores per agent. At interim k (1-based) the
statistic of a pair is |sum over interims i <= k of (block-i mean of agent a - block-i mean of
agent b)| = k * |mean_a - mean_b|. Its reference distribution is that of the same statistic
under permutations of each block's 2n pooled scores, conditioned on the earlier interims not
having rejected (a permutation whose earlier statistic crossed an earlier boundary is dropped),
with an alpha-spending boundary: the level spent up to interim k is at most alpha * k / K.
Decisions are step-down over the pairs (Holm-like): while the largest statistic of the
undecided pairs exceeds the boundary of the max over those pairs, that pair is rejected and
the boundary recomputed without it. After interim K every undecided pair is accepted as equal
(the design without early acceptance, beta = 0).

Why roborl has its own copy rather than calling the `adastop` package (0.1.3, the same code as
its repository's newest commit): it is a line-by-line port of the package's
`MultipleAgentsComparator` with two corrections, so its other choices (per-pair permutations,
enumeration when B exceeds the number of permutations, random permutations otherwise) are the
authors':

1. The reference distribution takes the max over pairs of |permuted statistic|, as in the
   paper; the package takes the max of the signed one while testing the absolute statistic,
   so a pair of identical agents is declared different about twice as often as alpha. With
   `two_sided=False` this module reproduces the package exactly, which the tests check, and
   the cross-check on the package's example data is in benchmarks/results/adastop_crosscheck.json.
2. When permutations are sampled from the first interim on (C(2n, n) >= B, i.e. n >= 8 at
   B = 10000) the package normalises later interims by 1 instead of B and can never reject
   after the first; here the normaliser stays that of the first sampled interim.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class AdaStop:
    """The sequential test; call `partial_compare(scores)` after each group of n scores.

    `scores[agent]` holds every score so far, in order. `decisions[(i, j)]` is "larger"
    (agent i's mean is larger), "smaller", "equal" or "continue"; `is_finished` when no pair
    is "continue". `current_comparisons` are the pairs still undecided, so only their
    agents need more runs.
    """

    def __init__(
        self,
        n: int = 5,
        K: int = 5,
        B: int = 10_000,
        alpha: float = 0.05,
        seed: int | None = None,
        comparisons: Sequence[tuple[int, int]] | None = None,
        two_sided: bool = True,
    ) -> None:
        self.n, self.K, self.B, self.alpha = int(n), int(K), int(B), float(alpha)
        self.two_sided = two_sided
        self.rng = np.random.RandomState(seed)  # the package's generator, draw for draw
        self.comparisons = None if comparisons is None else [tuple(c) for c in comparisons]
        self.current_comparisons: list[tuple[int, int]] = []
        self.decisions: dict[tuple[int, int], str] = {}
        self.boundary: list[float] = []
        self.level_spent = 0.0
        self.k = 0
        self.agent_names: list[str] | None = None
        self.is_finished = False
        self._diffs: dict[tuple[int, int], np.ndarray] = {}
        self._normalization = 1.0

    # -- the permutation distribution ------------------------------------------------------

    def _perm_means(self, z: np.ndarray, perms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean of the first agent's share and of the rest, for each permutation (a row of n
        indices into the pooled 2n scores), summed in index order as the package does, so
        equal permutation values stay equal (ties decide boundaries)."""
        mask = np.zeros((len(perms), len(z)), dtype=bool)
        np.put_along_axis(mask, perms, True, axis=1)
        idx = np.broadcast_to(np.arange(len(z)), mask.shape)
        first = z[idx[mask].reshape(len(perms), -1)]
        rest = z[idx[~mask].reshape(len(perms), -1)]
        return first.mean(axis=1), rest.mean(axis=1)

    def _permutations(self, count: int, size: int) -> np.ndarray:
        """The identity, then `count - 1` random draws (the package's order of draws)."""
        rows = [np.arange(self.n)] + [
            self.rng.permutation(size)[: self.n] for _ in range(count - 1)
        ]
        return np.array(rows)

    def _compute_diffs(self, Z: Sequence[np.ndarray]) -> None:
        k, n = self.k, self.n
        n_perm = math.comb(2 * n, n)
        block = slice(k * n, (k + 1) * n)
        if k == 0:
            for comp in self.current_comparisons:
                if n_perm < self.B:
                    perms = np.array(list(itertools.combinations(range(2 * n), n)))
                    self._normalization = float(n_perm)
                else:
                    perms = self._permutations(self.B, 2 * n)
                    self._normalization = float(self.B)
                z = np.concatenate([Z[comp[0]][block], Z[comp[1]][block]])
                first, rest = self._perm_means(z, perms)
                self._diffs[comp] = first - rest
            return
        # Condition on the earlier interims: keep the permutations that did not reject.
        tracked = list(self._diffs)
        stacked = np.stack([self._diffs[c] for c in tracked])
        keep = np.max(np.abs(stacked), axis=0) <= self.boundary[-1]
        previous = {c: self._diffs[c][keep] for c in tracked}
        count = int(keep.sum())
        exact = n_perm ** (k + 1) < self.B
        for comp in self.current_comparisons:
            z = np.concatenate([Z[comp[0]][block], Z[comp[1]][block]])
            if exact:
                perms = np.array(list(itertools.combinations(range(2 * n), n)))
                first, rest = self._perm_means(z, perms)
                # every earlier permutation crossed with every permutation of this block,
                # the package's order: this block's permutation outer, the earlier inner
                crossed = (previous[comp][None, :] + first[:, None]) - rest[:, None]
                self._diffs[comp] = crossed.ravel()
                self._normalization = float(n_perm ** (k + 1))
            else:
                first, rest = self._perm_means(z, self._permutations(count, 2 * n))
                self._diffs[comp] = (previous[comp] + first) - rest
                # the normaliser of the sample drawn before conditioning (correction 2)

    # -- one interim --------------------------------------------------------------------------

    def partial_compare(self, eval_values: Mapping[str, Sequence[float]]) -> None:
        """The test at the next interim, given every score so far of every agent."""
        if self.is_finished:
            raise RuntimeError("AdaStop: the test is finished; start a new one")
        if self.agent_names is None:
            self.agent_names = list(eval_values)
        Z = [np.asarray(eval_values[a], dtype=float).ravel() for a in self.agent_names]
        if self.k == 0:
            if self.comparisons is None:
                self.comparisons = list(itertools.combinations(range(len(Z)), 2))
            self.current_comparisons = list(self.comparisons)
            self.decisions = {c: "continue" for c in self.comparisons}
        k, n = self.k, self.n
        for i in {i for c in self.current_comparisons for i in c}:
            if len(Z[i]) < (k + 1) * n:
                raise ValueError(
                    f"AdaStop: {self.agent_names[i]} has {len(Z[i])} scores; interim {k + 1} "
                    f"needs {(k + 1) * n}"
                )
        clevel = self.alpha * (k + 1) / self.K
        self._compute_diffs(Z)
        undecided = list(self.current_comparisons)
        level_to_add, bk_sup = 0.0, np.inf
        while undecided:
            stacked = np.stack([self._diffs[c] for c in undecided])
            if self.two_sided:
                stacked = np.abs(stacked)
            values = np.sort(stacked.max(axis=0))
            tail = np.arange(len(values))[::-1] / self._normalization  # P(T > t)
            ok = self.level_spent + tail <= clevel
            if ok.any():
                bk_sup = float(values[ok][0])
                level_to_add = float(tail[ok][0])
            else:  # too few permutations left for this level: no decision at this interim
                bk_sup, level_to_add = np.inf, 0.0
            stats = [
                (k + 1) * (Z[a][: (k + 1) * n].mean() - Z[b][: (k + 1) * n].mean())
                for a, b in undecided
            ]
            imax = int(np.argmax(np.abs(stats)))
            if abs(stats[imax]) > bk_sup:
                comp = undecided.pop(imax)
                self.decisions[comp] = "larger" if stats[imax] > 0 else "smaller"
            else:
                break
        self.boundary.append(bk_sup)
        self.level_spent += level_to_add
        if k == self.K - 1:
            for c in self.comparisons or []:
                if self.decisions[c] == "continue":
                    self.decisions[c] = "equal"
        self.k += 1
        self.current_comparisons = [c for c in self.current_comparisons if c in undecided]
        self._diffs = {c: self._diffs[c] for c in self.current_comparisons}
        self.is_finished = "continue" not in self.decisions.values()

    def named_decisions(self) -> dict[tuple[str, str], str]:
        names = self.agent_names or []
        return {(names[a], names[b]): d for (a, b), d in self.decisions.items()}

    def state(self) -> dict[str, Any]:
        return {
            "interims": self.k,
            "boundary": list(self.boundary),
            "level_spent": self.level_spent,
            "decisions": {f"{a} vs {b}": d for (a, b), d in self.named_decisions().items()},
        }
