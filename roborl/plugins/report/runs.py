"""Read run directories (summary.json, metrics.jsonl, config.yaml) and refs=FILE into records.

Split from `aggregate.py` so that module holds only the statistics: this one knows the files
a run writes, how a run's clock is counted (env steps, gradient updates or robot time) and
how a task's random and reference scores normalise its returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError

METRIC_KEYS = {
    "return": "eval/return_mean",
    "normalized_score": "eval/normalized_score",
    "normalized_reward": "eval/normalized_reward",
    "normalized_cost": "eval/normalized_cost",
    "cost": "eval/cost_mean",
    "success_rate": "eval/success_rate",
}
ROBOT_RATE_HZ = 50.0  # roborl.robots.env's default control rate, when config.yaml has none


@dataclass
class RunRecord:
    """One run directory, reduced to what a report needs.

    `curves[metric] = (x, values)` where x counts the run's own clock (`x_label` names it).
    """

    path: Path
    algo: str
    env: str
    seed: int
    final: dict[str, float] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    x_label: str = "env steps"


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path is a run directory (has summary.json) or a folder searched for them."""
    paths = list(paths)
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"roborl report: {str(p)!r} does not exist; pass run directories.")
        if (p / "summary.json").exists():
            found.append(p)
        else:
            found.extend(sorted(s.parent for s in p.rglob("summary.json")))
    if not found:
        raise ConfigError(
            "roborl report: no run directories found (a run directory has summary.json and "
            f"metrics.jsonl); searched: {', '.join(map(str, paths))}."
        )
    return sorted(set(found))


def _clock(path: Path, summary: Mapping[str, Any]) -> tuple[str, float]:
    """(x label, divisor) of the run's clock: robot time, gradient updates or env steps."""
    env = str(summary.get("env") or "")
    if env.startswith("robot:"):
        rate = ROBOT_RATE_HZ
        cfg_path = path / "config.yaml"
        if cfg_path.exists():
            import yaml

            try:
                cfg = yaml.safe_load(cfg_path.read_text()) or {}
                rate = float(((cfg.get("robot") or {}).get("rate_hz")) or rate)
            except (yaml.YAMLError, TypeError, ValueError, AttributeError):
                pass
        return f"robot time (s; control steps at {rate:g} Hz)", rate
    if not summary.get("steps") and summary.get("updates"):
        return "gradient updates", 0.0  # an offline run: it stepped no env
    return "env steps", 1.0


def load_run(path: str | Path) -> RunRecord:
    """Read summary.json and the eval events of metrics.jsonl."""
    path = Path(path)
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"roborl report: {path}/summary.json is unreadable ({exc}).") from None
    evals: list[dict[str, Any]] = []
    metrics_path = path / "metrics.jsonl"
    if metrics_path.exists():
        for line in metrics_path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a crashed run
            if rec.get("eval/return_mean") is not None:
                evals.append(rec)
    x_label, divisor = _clock(path, summary)
    run = RunRecord(
        path=path,
        algo=str(summary.get("algo")),
        env=str(summary.get("env")),
        seed=int(summary.get("seed") or 0),
        x_label=x_label,
    )
    if evals:
        if divisor == 0.0:
            steps = np.array([e.get("updates", e["step"]) for e in evals], dtype=float)
        else:
            steps = np.array([e["step"] for e in evals], dtype=float) / divisor
        best_i = int(np.argmax([e["eval/return_mean"] for e in evals]))
        for name, key in METRIC_KEYS.items():
            vals = [e.get(key) for e in evals]
            if all(v is not None for v in vals):
                run.curves[name] = (steps, np.array(vals, dtype=float))
                run.final[name] = float(vals[-1])
                run.best[name] = float(vals[best_i])
    elif summary.get("final_eval_return") is not None:
        run.final["return"] = run.best["return"] = float(summary["final_eval_return"])
    return run


def relabel(
    records: Sequence[RunRecord],
    labels: Mapping[Path, str] | None = None,
    group_by: str | None = None,
) -> None:
    """Name each run's group: by an explicit label (`label=NAME=GLOB`), else by the
    algorithm plus the value of a config key of its config.yaml (`group_by=algo.lr`), so
    two variants of one algorithm get two rows instead of one."""
    for run in records:
        label = (labels or {}).get(run.path.resolve())
        if label is not None:
            run.algo = label
        elif group_by:
            run.algo = f"{run.algo} [{group_by}={_config_value(run.path, group_by)}]"


def _config_value(run_dir: Path, key: str) -> Any:
    import yaml

    path = run_dir / "config.yaml"
    try:
        node: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"roborl report: group_by={key} needs {path} ({exc}).") from None
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


# -- reference scores (refs=FILE) -----------------------------------------------------------


def load_refs(path: str | Path) -> dict[str, dict[str, float]]:
    """`{task: {random, reference}}` from a YAML or JSON file, checked.

    A task is the env id runs record in summary.json (`Hopper-v5`). `random` is what a uniform
    random policy scores (`roborl eval algo=random env=... episodes=100` measures it) and
    `reference` a declared good score (an expert's, a published baseline's); the normalised
    return is 100 * (R - random) / (reference - random).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"roborl report: refs={str(p)!r} is not a file (YAML or JSON).")
    try:
        data = yaml.safe_load(p.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"roborl report: refs={str(p)!r} is not valid YAML/JSON ({exc})."
        ) from None
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(
            f"roborl report: refs={str(p)!r} must map each task to its scores, e.g. "
            "'Hopper-v5: {random: -20.0, reference: 3234.3}'."
        )
    refs: dict[str, dict[str, float]] = {}
    for task, entry in data.items():
        if not isinstance(entry, Mapping) or not {"random", "reference"} <= set(entry):
            raise ConfigError(
                f"roborl report: refs={str(p)!r}: task {task!r} needs both 'random' and "
                f"'reference' scores; got {entry!r}."
            )
        try:
            lo, hi = float(entry["random"]), float(entry["reference"])
        except (TypeError, ValueError):
            raise ConfigError(
                f"roborl report: refs={str(p)!r}: task {task!r} has a non-numeric score "
                f"({entry!r}); accepted: numbers."
            ) from None
        if not (np.isfinite(lo) and np.isfinite(hi)) or hi == lo:
            raise ConfigError(
                f"roborl report: refs={str(p)!r}: task {task!r} has random={lo} and "
                f"reference={hi}; they must be finite and differ."
            )
        refs[str(task)] = {"random": lo, "reference": hi}
    return refs


def _normalise(value: float, ref: Mapping[str, float]) -> float:
    return 100.0 * (value - ref["random"]) / (ref["reference"] - ref["random"])


def apply_refs(records: Sequence[RunRecord], refs: Mapping[str, Mapping[str, float]]) -> None:
    """Add `normalized_return` (final, best, curve) to the runs of every task in `refs`."""
    for r in records:
        ref = refs.get(r.env)
        if ref is None or "return" not in r.final:
            continue
        r.final["normalized_return"] = _normalise(r.final["return"], ref)
        r.best["normalized_return"] = _normalise(r.best["return"], ref)
        if "return" in r.curves:
            x, y = r.curves["return"]
            r.curves["normalized_return"] = (
                x,
                100.0 * (y - ref["random"]) / (ref["reference"] - ref["random"]),
            )
