"""The report's text: its tables as Markdown and as one self-contained HTML page.

Split from `cli.py` so the command line only parses and writes files: this module turns an
`aggregate` result (and the PNGs `plots.py` drew) into report.md and report.html. The HTML
embeds its plots as base64 PNGs so it can be mailed or attached to a review.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from roborl.plugins.report.aggregate import AGGREGATES
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
