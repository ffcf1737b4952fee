"""`roborl report RUN_DIRS... [out=DIR] [refs=FILE] [metric=M]`: tables, plots, one HTML file.

The HTML report is self-contained (plots embedded as base64 PNGs) so it can be mailed or
attached to a review; the PNGs are written beside it for papers and slides.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.plugins.report.aggregate import (
    AGGREGATES,
    METRICS,
    aggregate,
    find_run_dirs,
    learning_curves,
    load_run,
    relabel,
    score_matrices,
)
from roborl.plugins.report.videos import video_section

HOW_TO_READ = (
    "How to read this: each method's score is summarised by the interquartile mean (IQM: the "
    "mean of the middle 50% of runs, robust to a lucky or a crashed seed), the median (rliable's: "
    "of the per-task means, so with one task it equals the mean) and the mean, each with a {ci}% stratified-bootstrap confidence interval (rliable; Agarwal et al., "
    "2021). In the interval plots the dot is the estimate and the bar its interval; "
    "widely overlapping bars warn that the runs may not separate the methods (overlap is "
    "not a test: `roborl compare` runs one). "
    "'final' scores the last evaluation of each run, 'best' its best one (a checkpoint "
    "chosen by return, which flatters every method). Scores are aggregated across tasks only "
    "when they are normalised; otherwise read the per-task plots, each in its task's own "
    "units. A performance profile gives, for every score τ, the fraction of runs scoring "
    "above τ: a curve that lies above another dominates it. Learning curves show the IQM "
    "across seeds with a {ci}% bootstrap band, against the run's own clock (env steps, "
    "gradient updates for offline runs, or robot time)."
)


def _fmt(cell: Mapping[str, float]) -> str:
    return f"{cell['point']:.2f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]"


def tables(result: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows): cross-task aggregates (when allowed), per-task IQM, per-task
    mean ± std of every metric."""
    out = []
    ci = round(100 * result["confidence"])
    header = ["algo", "metric", "which", *[f"{a.upper()} [{ci}% CI]" for a in AGGREGATES]]
    blocks = [(result["metric"], result["aggregates"]), *list(result["extra"].items())]
    rows = [
        [algo, metric, which, *[_fmt(cells[a]) for a in AGGREGATES]]
        for metric, by_which in blocks
        for which, by_algo in by_which.items()
        for algo, cells in by_algo.items()
    ]
    if rows:
        shared = result.get("shared_tasks") or []
        over = f"runs x {len(shared)} shared task(s)" if len(shared) > 1 else "runs"
        out.append((f"Aggregates over {over} (rliable, stratified bootstrap)", header, rows))
    m = result["per_task_metric"]
    task_rows = [
        [task, algo, which, *[_fmt(cells[a]) for a in AGGREGATES]]
        for which, by_task in result["per_task_aggregates"].items()
        for task, by_algo in by_task.items()
        for algo, cells in by_algo.items()
    ]
    out.append(
        (
            f"Per task: `{m}` (rliable, bootstrap over seeds)",
            ["task", "algo", "which", *[f"{a.upper()} [{ci}% CI]" for a in AGGREGATES]],
            task_rows,
        )
    )
    metric_cols: list[str] = []
    for by_env in result["per_task"].values():
        for cell in by_env.values():
            metric_cols.extend(k for k in cell if k != "runs" and k not in metric_cols)
    seed_rows = [
        [
            algo,
            env,
            str(cell["runs"]),
            *[
                f"{cell[k]['mean']:.2f} ± {cell[k]['std']:.2f}" if k in cell else "-"
                for k in metric_cols
            ],
        ]
        for algo, by_env in result["per_task"].items()
        for env, cell in by_env.items()
    ]
    out.append(
        ("Per task (mean ± std over seeds)", ["algo", "env", "runs", *metric_cols], seed_rows)
    )
    return out


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(r) + " |" for r in rows)
    return lines


def to_markdown(result: Mapping[str, Any], sections: Sequence[tuple[str, str]] = ()) -> str:
    """report.md; `sections` are (title, Markdown) blocks put first (compare's decisions)."""
    ci = round(100 * result["confidence"])
    lines = [
        "# roborl report\n",
        f"Primary metric: `{result['metric']}`; {result['reps']} bootstrap replications.\n",
        f"{result['note']}\n",
    ]
    for title, body in sections:
        lines += [f"## {title}\n", body, ""]
    for title, header, rows in tables(result):
        lines += [f"## {title}\n", *_md_table(header, rows), ""]
    images = result.get("images") or []
    if images:
        lines += ["## Plots\n", *[f"![{i}]({i})" for i in images], ""]
    lines += [HOW_TO_READ.format(ci=ci), ""]
    return "\n".join(lines)


CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #bbb;"
    "padding:3px 8px;font-size:14px}th{background:#f2f2f2}.note{background:#fff8e1;padding:.6em"
    " 1em;border-left:4px solid #f0b400}.how{background:#eef5ff;padding:.6em 1em;border-left:"
    "4px solid #3b82f6}figure{margin:1em 0}img{max-width:100%;height:auto}figcaption{color:#555;"
    "font-size:13px}.scroll{overflow-x:auto}"
)


def _md_inline(text: str) -> str:
    """`code` spans of our own sentences as <code>, the rest escaped."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def to_html(
    result: Mapping[str, Any],
    images: Sequence[tuple[str, bytes, str]],
    sections: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]], str]] = (),
) -> str:
    """One self-contained page: `images` are (name, PNG bytes, caption), embedded as data
    URIs; `sections` are (title, header, rows, sentence) tables put first."""
    ci = round(100 * result["confidence"])
    parts = [
        "<!doctype html><html lang='en'><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>roborl report</title><style>{CSS}</style><body>",
        "<h1>roborl report</h1>",
        f"<p>Primary metric: <code>{html.escape(result['metric'])}</code>; "
        f"{len(result['runs'])} runs; {result['reps']} bootstrap replications.</p>",
        f"<p class='note'>{_md_inline(result['note'])}</p>",
        f"<p class='how'>{_md_inline(HOW_TO_READ.format(ci=ci))}</p>",
    ]

    def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        parts.append(f"<h2>{_md_inline(title)}</h2><div class='scroll'><table><tr>")
        parts.extend(f"<th>{html.escape(h)}</th>" for h in header)
        parts.append("</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
        parts.append("</table></div>")

    for title, header, rows, sentence in sections:
        table(title, header, rows)
        if sentence:
            parts.append(f"<p>{_md_inline(sentence)}</p>")
    for title, header, rows in tables(result):
        table(title, header, rows)
    if images:
        parts.append("<h2>Plots</h2>")
    for name, data, caption in images:
        b64 = base64.b64encode(data).decode("ascii")
        parts.append(
            f"<figure><img src='data:image/png;base64,{b64}' alt='{html.escape(caption)}' "
            f"title='{html.escape(name)}'><figcaption>{_md_inline(caption)} "
            f"({html.escape(name)})</figcaption></figure>"
        )
    parts.extend(video_section(result["runs"]))  # each run's latest MP4 (roborl.core.video)
    parts.append("</body></html>")
    return "\n".join(parts)


# -- plots ---------------------------------------------------------------------------------


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


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    metric: str | None = None,
    reps: int = 2000,
    seed: int = 0,
    plots: bool = True,
    refs: str | Path | Mapping[str, Any] | None = None,
    md_sections: Sequence[tuple[str, str]] = (),
    html_sections: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]], str]] = (),
    labels: Mapping[str, str] | None = None,
    group_by: str | None = None,
) -> dict[str, Any]:
    """Aggregate, then write report.json, report.md, report.html and the PNG plots to `out`.

    `md_sections`/`html_sections` put a caller's tables first (`roborl compare`'s decisions).
    `labels` maps a name to run directories (a glob, or a folder holding them): those runs
    form one group under that name; `group_by` splits each algorithm by a config key.
    """
    labelled: dict[Path, str] = {}
    for name, pattern in (labels or {}).items():
        for run_dir in find_run_dirs(_expand(pattern)):
            labelled[run_dir.resolve()] = name
    paths = [*run_dirs, *labelled]
    records = [load_run(p) for p in find_run_dirs(paths)]
    relabel(records, labelled, group_by)
    result = aggregate(records, metric=metric, reps=reps, seed=seed, refs=refs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = plot_all(result, records, out, reps, seed) if plots else []
    result["images"] = [name for name, _, _ in images]
    atomic_write_json(out / "report.json", result)
    atomic_write_bytes(out / "report.md", to_markdown(result, md_sections).encode())
    atomic_write_bytes(out / "report.html", to_html(result, images, html_sections).encode())
    return result


def _expand(pattern: str) -> list[str]:
    import glob

    matches = sorted(glob.glob(pattern))
    if not matches:
        raise ConfigError(f"roborl report: label pattern {pattern!r} matches no path.")
    return matches


# -- command line -----------------------------------------------------------------------------


@dataclass
class ReportOptions:
    """`roborl report RUN_DIRS... [key=value ...]`."""

    out: str = field(default="report", metadata={"help": "output folder"})
    refs: str | None = field(
        default=None,
        metadata={
            "help": "YAML/JSON file: task -> {random: R, reference: R}; min-max normalises "
            "returns so they can be aggregated across tasks"
        },
    )
    metric: str | None = field(
        default=None,
        metadata={
            "choices": [None, *METRICS],
            "help": "primary metric; null: normalized_score if every run logged it, else "
            "normalized_return with refs=, else return",
        },
    )
    reps: int = field(default=2000, metadata=rng(10, None, "bootstrap replications"))
    seed: int = field(default=0, metadata=rng(0, None, "seed of the bootstrap"))
    plots: bool = field(default=True, metadata={"help": "write the PNG plots (and embed them)"})
    group_by: str | None = field(
        default=None,
        metadata={
            "help": "config key (dotted, from each run's config.yaml) that splits an "
            "algorithm's runs into groups, e.g. group_by=algo.fast_update"
        },
    )


LEGACY_FLAGS = {"--out": "out", "--metric": "metric", "--reps": "reps", "--seed": "seed",
                "--refs": "refs"}  # fmt: skip


def report_help() -> str:
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl report RUN_DIR_OR_FOLDER... [out=DIR] [refs=FILE] [metric=M] [reps=N]\n\n"
        "Aggregate run directories across seeds and methods: IQM, median and mean with\n"
        "stratified-bootstrap CIs (rliable), per task and, when scores are normalised, across\n"
        "tasks; performance profiles; learning curves on each run's own clock. Writes\n"
        "report.md, report.json, the PNGs and one self-contained report.html to out=.\n\n"
        + section("Keys", field_lines(ReportOptions))
        + "\nOlder flag spellings still work: --out DIR, --metric M, --reps N, --seed N, "
        "--refs FILE, --no-plots.\n"
        "refs=FILE example (YAML):  Hopper-v5: {random: -20.3, reference: 3234.3}\n"
        "Name groups yourself with --label NAME=GLOB (repeatable; those runs form the group\n"
        "NAME), e.g. roborl report --label 'fast=runs/a*' --label 'slow=runs/b*'.\n"
        "To decide whether one method beats another: roborl compare --help (AdaStop)."
    )


def parse_args(argv: Sequence[str]) -> tuple[ReportOptions, list[str], dict[str, str]]:
    """Run directories (arguments without '='), `--label NAME=GLOB` groups, then key=value
    options (or --flag value)."""
    from roborl.core.cli import command_options

    args: list[str] = []
    labels: dict[str, str] = {}
    it = iter(argv)
    for a in it:
        if a == "--label" or a.startswith("--label="):
            spec = a.split("=", 1)[1] if a.startswith("--label=") else next(it, "")
            name, sep, pattern = spec.partition("=")
            if not (name and sep and pattern):
                raise ConfigError(
                    f"roborl report: --label {spec!r} must be NAME=GLOB, e.g. "
                    "--label 'fast=runs/a*'."
                )
            labels[name] = pattern
        elif a in LEGACY_FLAGS:
            value = next(it, None)
            if value is None:
                raise ConfigError(f"roborl report: {a} needs a value.")
            args.append(f"{LEGACY_FLAGS[a]}={value}")
        elif a == "--no-plots":
            args.append("plots=false")
        elif a.startswith("--") and "=" in a and a.split("=", 1)[0] in LEGACY_FLAGS:
            key, value = a.split("=", 1)
            args.append(f"{LEGACY_FLAGS[key]}={value}")
        else:
            args.append(a)
    run_dirs = [a for a in args if "=" not in a and not a.startswith("-")]
    opts, _ = command_options(ReportOptions, [a for a in args if a not in run_dirs], "report")
    if not run_dirs and not labels:
        raise ConfigError(
            "roborl report: give one or more run directories (or folders holding them), "
            "e.g. roborl report runs/multirun out=report."
        )
    return opts, run_dirs, labels


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(report_help())
        return 0
    opts, run_dirs, labels = parse_args(argv)
    result = write_report(
        run_dirs, opts.out, opts.metric, opts.reps, opts.seed, plots=opts.plots, refs=opts.refs,
        labels=labels, group_by=opts.group_by,
    )  # fmt: skip
    print(to_markdown(result))
    print(
        f"roborl report: wrote {Path(opts.out) / 'report.html'} (self-contained), report.md, "
        "report.json" + (f" and {len(result['images'])} PNG plots" if result["images"] else "")
    )
    return 0


__all__ = ["ReportOptions", "main", "write_report"]
