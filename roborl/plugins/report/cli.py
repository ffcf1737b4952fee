"""`roborl report RUN_DIRS... [out=DIR] [refs=FILE] [metric=M] [label.NAME=GLOB]`: tables,
plots, one HTML file.

This module is the command line and `write_report`, which runs the pieces in order: read the
run directories (`runs.py`), aggregate them (`aggregate.py`), draw the PNGs (`plots.py`) and
write report.json, report.md and the self-contained report.html (`render.py`); the PNGs are
written beside it for papers and slides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.plugins.report.aggregate import METRICS, aggregate
from roborl.plugins.report.plots import plot_all
from roborl.plugins.report.render import to_html, to_markdown
from roborl.plugins.report.runs import find_run_dirs, load_run, relabel


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


# The flag spellings of the first release, kept for one more (deprecation warning).
DEPRECATED = {"--out": "out", "--metric": "metric", "--reps": "reps", "--seed": "seed",
              "--refs": "refs", "--no-plots": "plots=false"}  # fmt: skip


def report_help() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, key_line, section

    return (
        "usage: roborl report RUN_DIR_OR_FOLDER... [out=DIR] [refs=FILE] [metric=M] [reps=N]\n"
        "                     [label.NAME=GLOB ...]\n\n"
        "Aggregate run directories across seeds and methods: IQM, median and mean with\n"
        "stratified-bootstrap CIs (rliable), per task and, when scores are normalised, across\n"
        "tasks; performance profiles; learning curves on each run's own clock. Writes\n"
        "report.md, report.json, the PNGs and one self-contained report.html to out=.\n\n"
        + section(
            "Keys",
            [
                *field_lines(ReportOptions),
                key_line(
                    "label.NAME",
                    "GLOB",
                    "the runs GLOB matches form one group named NAME "
                    "(repeatable), e.g. label.fast='runs/a*' label.slow='runs/b*'",
                ),
            ],
        )
        + "\nrefs=FILE example (YAML):  Hopper-v5: {random: -20.3, reference: 3234.3}\n"
        "Older spellings still work for one release: --out DIR, --metric M, --reps N, --seed N,\n"
        "--refs FILE, --no-plots, --label NAME=GLOB.\n"
        "To decide whether one method beats another: roborl compare --help (AdaStop).\n" + logs.HELP
    )


def parse_args(argv: Sequence[str]) -> tuple[ReportOptions, list[str], dict[str, str]]:
    """Run directories (arguments without '='), `label.NAME=GLOB` groups, then key=value
    options (the older `--flag value` spellings with a deprecation warning)."""
    import sys

    from roborl.core.cli import command_options, deprecated_flags
    from roborl.core.compose import override_key, override_value, parse_overrides

    args: list[str] = []
    it = iter(argv)
    for a in it:  # --label NAME=GLOB -> label.NAME=GLOB
        if a == "--label" or a.startswith("--label="):
            spec = a.split("=", 1)[1] if a.startswith("--label=") else next(it, "")
            name, sep, pattern = spec.partition("=")
            if not (name and sep and pattern):
                raise ConfigError(
                    f"roborl report: --label {spec!r} must be NAME=GLOB; write "
                    "label.NAME=GLOB, e.g. label.fast='runs/a*'."
                )
            print(
                f"roborl report: warning: '--label {spec}' is deprecated and goes in the next "
                f"release; write 'label.{name}={pattern}'.",
                file=sys.stderr,
            )
            args.append(f"label.{name}={pattern}")
        else:
            args.append(a)
    args = deprecated_flags(args, DEPRECATED, "report")
    run_dirs = [a for a in args if "=" not in a and not a.startswith("-")]
    given = [a for a in args if a.startswith("label.")]
    labels: dict[str, str] = {}
    for arg, ov in zip(given, parse_overrides(given, "report"), strict=True):
        name, value = override_key(ov)[len("label.") :], override_value(ov)
        if not name or "." in name or not isinstance(value, str) or not value:
            raise ConfigError(
                f"roborl report: {arg!r} must be label.NAME=GLOB, e.g. label.fast='runs/a*'."
            )
        labels[name] = value
    rest = [a for a in args if a not in run_dirs and a not in given]
    opts, _ = command_options(ReportOptions, rest, "report")
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
