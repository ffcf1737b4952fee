"""`roborl compare`'s results: compare.json's summary, the decision table, compare.md.

Split from `compare.py` so the command line only drives: these functions turn the finished
(or interrupted) per-task tests into the words and tables a reader gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roborl.plugins.report.compare import CompareOptions, Method
    from roborl.plugins.report.compare_sequential import TaskTest


CITATION = (
    "Mathieu, Le Tour, Le Corff, Gilbert, Moulines (2023). AdaStop: adaptive statistical "
    "testing for sound comparisons of Deep RL agents. arXiv:2306.10882."
)


def summarise(
    tests: Sequence[TaskTest], methods: Sequence[Method], opts: CompareOptions, status: str
) -> dict[str, Any]:
    rows = [row for t in tests for row in t.decisions()]
    n_pairs = len(rows)
    return {
        "status": status,
        "test": "AdaStop (roborl.plugins.report.adastop; two-sided, see its docstring)",
        "citation": CITATION,
        "family_wise_error": opts.alpha,
        "alpha_per_task": opts.alpha / len(tests),
        "pairs": n_pairs,
        "n": opts.n,
        "max_groups": opts.max_groups,
        "permutations": opts.permutations,
        "score": f"{opts.which} {opts.metric}",
        "methods": {m.label: list(m.overrides) for m in methods},
        "groups_used": {t.task or "default": t.groups for t in tests},
        "decisions": rows,
        "seeds": {t.task or "default": t.seeds for t in tests},
        "scores": {t.task or "default": t.scores for t in tests},
    }


def decision_table(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["task", "A", "B", "decision", "mean A (seeds)", "mean B (seeds)"]
    rows = []
    for d in result["decisions"]:
        fmt = lambda v, n: "-" if v is None else f"{v:.2f} ({n})"  # noqa: E731
        rows.append(
            [
                d["task"].split("=", 1)[-1] or "default",
                d["a"],
                d["b"],
                d["decision"],
                fmt(d["mean_a"], d["seeds_a"]),
                fmt(d["mean_b"], d["seeds_b"]),
            ]
        )
    return header, rows


def status_sentence(result: Mapping[str, Any]) -> str:
    groups = result["groups_used"]
    most = max(groups.values()) if groups else 0
    tasks = len(groups)
    per_task = (
        f" (alpha/{tasks} = {result['alpha_per_task']:.4g} per task, Bonferroni)"
        if tasks > 1
        else ""
    )
    state = {
        "decided": f"every pair decided after {most} of {result['max_groups']} group(s)"
        + (" (stopped early)" if most < result["max_groups"] else ""),
        "budget spent": f"budget spent: all {result['max_groups']} groups ran",
        "interrupted": f"interrupted after {most} group(s); run the same command again to continue",
        "running": f"{most} group(s) done so far (if no roborl compare is running on this "
        "out=, run the same command again to continue)",
    }[result["status"]]
    return (
        f"AdaStop, {result['score']}, groups of n={result['n']} seeds per method, at most "
        f"K={result['max_groups']} groups: {state}. Family-wise error at most "
        f"alpha={result['family_wise_error']:g} over all {result['pairs']} pair(s){per_task}. "
        "'equal' means no difference was found within the budget (AdaStop accepts equality at "
        "its last group); 'undecided' pairs were still running. "
        f"{result['citation']}"
    )


def to_markdown(result: Mapping[str, Any]) -> str:
    header, rows = decision_table(result)
    lines = [
        "# roborl compare\n",
        status_sentence(result) + "\n",
        "## Decisions\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
        "## Methods\n",
        *[f"- **{lab}**: `{' '.join(ov)}`" for lab, ov in result["methods"].items()],
        "",
        "## Seeds used\n",
    ]
    for task, by_method in result["seeds"].items():
        for lab, seeds in by_method.items():
            lines.append(f"- {task.split('=', 1)[-1]} / {lab}: {len(seeds)} seeds {seeds}")
    return "\n".join(lines) + "\n"
