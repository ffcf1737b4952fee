"""The report's figures (matplotlib, imported only when a report draws): interval plots of the
aggregates, per-task intervals, performance profiles and learning curves.

Split from `cli.py`: `plot_all` writes the PNGs and hands them to the HTML page
(`render.to_html`), which embeds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.checkpoint import atomic_write_bytes
from roborl.plugins.report.aggregate import learning_curves, score_matrices


def _colors(algos: Sequence[str]) -> dict[str, Any]:
    """One colour per method, the same in every figure of a report."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {a: cmap(i % 10) for i, a in enumerate(sorted(algos))}


def _interval_axes(
    ax: Any,
    by_algo: Mapping[str, Mapping[str, float]],
    colors: Mapping[str, Any],
    show_labels: bool,
) -> None:
    """One metric: per method a bar from ci_low to ci_high and a dot at the estimate."""
    from matplotlib.ticker import MaxNLocator

    algos = list(by_algo)
    for y, algo in enumerate(algos):
        c = by_algo[algo]
        ax.plot([c["ci_low"], c["ci_high"]], [y, y], color=colors[algo], lw=8, alpha=0.45,
                solid_capstyle="butt")  # fmt: skip
        ax.plot([c["point"]], [y], "o", color=colors[algo], ms=7, mec="black", mew=0.8)
    lo = min(by_algo[a]["ci_low"] for a in algos)
    hi = max(by_algo[a]["ci_high"] for a in algos)
    pad = 0.08 * (hi - lo) if hi > lo else max(abs(hi) * 0.05, 1.0)
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(-0.6, len(algos) - 0.4)
    ax.set_yticks(range(len(algos)))
    ax.set_yticklabels(algos)
    ax.tick_params(axis="y", length=0, labelleft=show_labels)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(axis="x", alpha=0.3)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def plot_aggregates(
    by_algo: Mapping[str, Mapping[str, Mapping[str, float]]],
    colors: Mapping[str, Any],
    xlabel: str,
    title: str,
) -> Any:
    """rliable-style interval estimates: one panel per aggregate (IQM, median, mean)."""
    import matplotlib.pyplot as plt

    names = ("iqm", "median", "mean")
    fig, axes = plt.subplots(1, 3, figsize=(10, 1.0 + 0.55 * len(by_algo)), layout="constrained")
    for i, (ax, name) in enumerate(zip(axes, names)):
        _interval_axes(ax, {a: by_algo[a][name] for a in by_algo}, colors, i == 0)
        ax.set_title(name.upper() if name == "iqm" else name.capitalize(), fontsize=11)
    fig.supxlabel(xlabel, fontsize=10)
    fig.suptitle(title, fontsize=11)
    return fig


def plot_per_task(
    by_task: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
    colors: Mapping[str, Any],
    xlabel: str,
    title: str,
) -> Any:
    """Per-task IQM with its interval, one panel per task, each on its task's own scale."""
    import matplotlib.pyplot as plt

    tasks = list(by_task)
    rows = max(len(by_task[t]) for t in tasks)
    fig, axes = plt.subplots(
        len(tasks), 1, figsize=(7, 0.4 + (0.9 + 0.42 * rows) * len(tasks)),
        layout="constrained", squeeze=False,
    )  # fmt: skip
    for ax, task in zip(axes[:, 0], tasks):
        _interval_axes(ax, {a: c["iqm"] for a, c in by_task[task].items()}, colors, True)
        ax.set_title(task, fontsize=10, loc="left")
        ax.set_xlabel(xlabel, fontsize=9)
    fig.suptitle(title, fontsize=11)
    return fig


def plot_profile(
    matrices: Mapping[str, np.ndarray], colors: Mapping[str, Any], xlabel: str, reps: int, seed: int
) -> Any:
    """rliable's performance profile, drawn so each legend entry is its curve's line."""
    import matplotlib.pyplot as plt
    from rliable import library as rly

    allv = np.concatenate([m.ravel() for m in matrices.values()])
    lo, hi = float(allv.min()), float(allv.max())
    if hi <= lo:
        lo, hi = lo - 1.0, hi + 1.0
    taus = np.linspace(lo, hi, 81)
    saved = np.random.get_state()
    np.random.seed(seed)  # rliable resamples with NumPy's global generator
    try:
        profiles, cis = rly.create_performance_profile(dict(matrices), taus, reps=reps)
    finally:
        np.random.set_state(saved)
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for algo in matrices:
        ax.plot(taus, profiles[algo], color=colors[algo], lw=2, label=algo)
        ax.fill_between(taus, cis[algo][0], cis[algo][1], color=colors[algo], alpha=0.2, lw=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def plot_curves(
    items: Sequence[tuple[str, Mapping[str, Any]]], colors: Mapping[str, Any], env: str, ci: int
) -> Any:
    """Learning curves of one task; one panel per clock when the runs count differently."""
    import matplotlib.pyplot as plt

    labels = sorted({c["x_label"] for _, c in items})
    fig, axes = plt.subplots(
        1, len(labels), figsize=(6.5 * len(labels), 4), layout="constrained", squeeze=False
    )
    for ax, label in zip(axes[0], labels):
        for algo, c in items:
            if c["x_label"] != label:
                continue
            ax.plot(c["steps"], c["iqm"], color=colors[algo], lw=2,
                    label=f"{algo} (n={int(c['runs'])})")  # fmt: skip
            ax.fill_between(c["steps"], c["low"], c["high"], color=colors[algo], alpha=0.2, lw=0)
        ax.set_xlabel(label)
        ax.set_ylabel(f"eval return (IQM, {ci}% CI)")
        ax.set_title(env)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", frameon=False)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)


def plot_all(
    result: Mapping[str, Any], records: Sequence[Any], out: Path, reps: int, seed: int = 0
) -> list[tuple[str, bytes, str]]:
    """Write the PNGs to `out`; returns (file name, bytes, caption) for the HTML."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images: list[tuple[str, bytes, str]] = []
    ci = round(100 * result["confidence"])

    def save(fig: Any, name: str, caption: str) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        data = buf.getvalue()
        atomic_write_bytes(out / name, data)
        images.append((name, data, caption))

    colors = _colors({r.algo for r in records})
    metric = result["metric"]
    for which, by_algo in result["aggregates"].items():
        fig = plot_aggregates(
            by_algo, colors, f"{which} {metric}",
            f"Aggregates over {', '.join(result['shared_tasks'])} ({ci}% CIs)",
        )  # fmt: skip
        save(fig, f"aggregates_{which}.png",
             f"IQM, median and mean of the {which} `{metric}` with {ci}% CIs")  # fmt: skip
    ptm = result["per_task_metric"]
    for which, by_task in result["per_task_aggregates"].items():
        if not by_task:
            continue
        fig = plot_per_task(by_task, colors, f"{which} {ptm}", f"Per-task IQM ({ci}% CIs)")
        save(fig, f"per_task_{which}.png",
             f"IQM of the {which} `{ptm}` per task with {ci}% CIs, each task on its own scale")  # fmt: skip
    if result["cross_task"]:
        matrices, _ = score_matrices(records, metric, "final", result["shared_tasks"])
        fig = plot_profile(matrices, colors, f"final {metric} (τ)", min(reps, 1000), seed)
        save(fig, "performance_profile.png",
             f"Performance profile of the final `{metric}` with {ci}% CI bands")  # fmt: skip
    curves = learning_curves(records, "return", reps=min(reps, 500), seed=seed)
    by_env: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for (algo, env), c in curves.items():
        by_env.setdefault(env, []).append((algo, c))
    for env, items in sorted(by_env.items()):
        save(plot_curves(items, colors, env, ci), f"learning_curve_{_slug(env)}.png",
             f"Learning curves on {env}: IQM across seeds, {ci}% bootstrap band")  # fmt: skip
    return images
