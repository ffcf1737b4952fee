"""`roborl report RUN_DIRS... [--out DIR] [--metric M] [--reps N] [--seed N]`: tables and plots."""

from __future__ import annotations

import argparse
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.errors import ConfigError
from roborl.plugins.report.aggregate import (
    AGGREGATES,
    METRIC_KEYS,
    aggregate,
    find_run_dirs,
    learning_curves,
    load_run,
    score_matrices,
)


def _fmt(cell: dict[str, float]) -> str:
    return f"{cell['point']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for the aggregate table and the per-task table."""
    out = []
    ci = round(100 * result["confidence"])
    header = ["algo", "metric", "which", *[f"{a.upper()} [{ci}% CI]" for a in AGGREGATES]]
    rows = []
    blocks = [(result["metric"], result["aggregates"]), *list(result["extra"].items())]
    for metric, by_which in blocks:
        for which, by_algo in by_which.items():
            for algo, cells in by_algo.items():
                rows.append([algo, metric, which, *[_fmt(cells[a]) for a in AGGREGATES]])
    out.append(("Aggregates over runs x tasks (rliable, stratified bootstrap)", header, rows))
    task_rows = []
    metric_cols: list[str] = []
    for by_env in result["per_task"].values():
        for cell in by_env.values():
            metric_cols.extend(k for k in cell if k != "runs" and k not in metric_cols)
    for algo, by_env in result["per_task"].items():
        for env, cell in by_env.items():
            vals = [
                f"{cell[k]['mean']:.2f} ± {cell[k]['std']:.2f}" if k in cell else "-"
                for k in metric_cols
            ]
            task_rows.append([algo, env, str(cell["runs"]), *vals])
    out.append(
        ("Per task (mean ± std over seeds)", ["algo", "env", "runs", *metric_cols], task_rows)
    )
    return out


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# roborl report\n\nPrimary metric: `{result['metric']}`; {result['reps']} "
        "bootstrap replications.\n"
    ]
    for title, header, rows in tables(result):
        lines.append(f"## {title}\n")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines.extend("| " + " | ".join(r) + " |" for r in rows)
        lines.append("")
    return "\n".join(lines)


def to_html(result: dict[str, Any], images: Sequence[str]) -> str:
    parts = [
        "<!doctype html><meta charset='utf-8'><title>roborl report</title>",
        "<style>table{border-collapse:collapse}td,th{border:1px solid #999;"
        "padding:3px 8px}</style>",
        f"<h1>roborl report</h1><p>Primary metric: <code>{html.escape(result['metric'])}"
        "</code></p>",
    ]
    for title, header, rows in tables(result):
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>")
        parts.extend(f"<th>{html.escape(h)}</th>" for h in header)
        parts.append("</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
        parts.append("</table>")
    parts.extend(f"<h2>{html.escape(i)}</h2><img src='{html.escape(i)}'>" for i in images)
    return "\n".join(parts)


def plot_all(result: dict[str, Any], records: Sequence[Any], out: Path, reps: int) -> list[str]:
    """aggregates.png, performance_profile.png and one learning_curve_<env>.png per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library as rly
    from rliable import plot_utils

    images = []
    metric = result["metric"]
    for which, by_algo in result["aggregates"].items():
        algos = list(by_algo)
        points = {a: np.array([by_algo[a][m]["point"] for m in AGGREGATES]) for a in algos}
        cis = {
            a: np.array(
                [
                    [by_algo[a][m]["ci_low"] for m in AGGREGATES],
                    [by_algo[a][m]["ci_high"] for m in AGGREGATES],
                ]
            )
            for a in algos
        }
        fig, _ = plot_utils.plot_interval_estimates(
            points,
            cis,
            metric_names=[m.upper() for m in AGGREGATES],
            algorithms=algos,
            xlabel=f"{which} {metric}",
        )
        name = f"aggregates_{which}.png"
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        images.append(name)
    matrices, _ = score_matrices(records, metric, "final")
    allv = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(allv.min(), allv.max(), 41)
    profiles, profile_cis = rly.create_performance_profile(matrices, taus, reps=min(reps, 1000))
    fig, ax = plt.subplots(figsize=(6, 4))
    plot_utils.plot_performance_profiles(
        profiles, taus, performance_profile_cis=profile_cis, ax=ax, xlabel=f"final {metric} (τ)"
    )
    ax.legend(list(profiles), loc="best")
    fig.savefig(out / "performance_profile.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    images.append("performance_profile.png")
    curves = learning_curves(records, "return", reps=min(reps, 500))
    by_env: dict[str, list[tuple[str, dict[str, np.ndarray]]]] = {}
    for (algo, env), c in curves.items():
        by_env.setdefault(env, []).append((algo, c))
    for env, items in sorted(by_env.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo, c in items:
            ax.plot(c["steps"], c["iqm"], label=f"{algo} (n={int(c['runs'])})")
            ax.fill_between(c["steps"], c["low"], c["high"], alpha=0.25)
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval return (IQM, 95% CI)")
        ax.set_title(env)
        ax.legend(loc="best")
        name = f"learning_curve_{env.replace('/', '-').replace(':', '-')}.png"
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        images.append(name)
    return images


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    metric: str | None = None,
    reps: int = 2000,
    seed: int = 0,
    plots: bool = True,
) -> dict[str, Any]:
    """Aggregate, then write report.json, report.md, report.html and the PNG plots to `out`."""
    records = [load_run(p) for p in find_run_dirs(run_dirs)]
    result = aggregate(records, metric=metric, reps=reps, seed=seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = plot_all(result, records, out, reps) if plots else []
    result["images"] = images
    atomic_write_json(out / "report.json", result)
    atomic_write_bytes(out / "report.md", to_markdown(result).encode())
    atomic_write_bytes(out / "report.html", to_html(result, images).encode())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="roborl report",
        description="Aggregate run directories across seeds and methods (IQM, mean, median "
        "with stratified bootstrap CIs; performance profiles; learning curves).",
    )
    parser.add_argument("run_dirs", nargs="+", help="run directories or folders holding them")
    parser.add_argument("--out", default="report", help="output folder (default: ./report)")
    parser.add_argument("--metric", choices=sorted(METRIC_KEYS), default=None)
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap replications")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-plots", action="store_true")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.reps < 10:
        raise ConfigError(f"roborl report: --reps {args.reps}; accepted: an integer >= 10.")
    result = write_report(
        args.run_dirs, args.out, args.metric, args.reps, args.seed, plots=not args.no_plots
    )
    print(to_markdown(result))
    print(
        f"roborl report: wrote {Path(args.out) / 'report.md'}, report.html, report.json"
        + (f" and {len(result['images'])} PNG plots" if result["images"] else "")
    )
    return 0


__all__ = ["main", "write_report"]
