"""The model card (README.md) of an exported policy, from what its run directory recorded.

Everything in the card is read, not guessed: algorithm, env and seed from the checkpoint's
config; the final return from the run's last evaluation (`metrics.jsonl`, or `eval.json` when
`roborl eval` evaluated this very checkpoint, which has every episode's return); versions from
`summary.json` and the checkpoint; the training command from Hydra's `.hydra/overrides.yaml`.
The card starts with the Hugging Face Hub's metadata block (library, tags, model-index) so a
pushed folder shows its result on the Hub.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t (a table to 30 df, then the Cornish-Fisher series)."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(mean: float, std: float, n: int) -> tuple[float, float]:
    """95% t-interval of the mean of `n` episodes; `std` is the population std (np.std),
    as roborl's evaluations report it. One episode has no interval: (mean, mean)."""
    if n < 2:
        return mean, mean
    half = t_quantile(n - 1) * std * math.sqrt(n / (n - 1)) / math.sqrt(n)
    return mean - half, mean + half


def run_dir_of(checkpoint: str | Path) -> Path | None:
    """`RUN/checkpoints/x.pt` -> `RUN`, when RUN looks like a run directory."""
    path = Path(checkpoint)
    run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return run if (run / "config.yaml").is_file() or (run / "summary.json").is_file() else None


def training_command(run_dir: Path | None) -> str | None:
    """`roborl train <overrides>` as Hydra recorded them for this run, or None."""
    if run_dir is None:
        return None
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    overrides = yaml.safe_load(path.read_text()) or []
    return " ".join(["roborl", "train", *(shlex.quote(str(o)) for o in overrides)])


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def final_return(
    run_dir: Path | None, checkpoint: str | Path, config: Mapping[str, Any], step: int | None
) -> dict[str, Any] | None:
    """The checkpoint's evaluation return with a 95% CI, and where it came from."""
    if run_dir is None:
        return None
    report = _read_json(run_dir / "eval.json")
    if report and report.get("returns") and _same_file(report.get("checkpoint"), checkpoint):
        returns = [float(r) for r in report["returns"]]
        n = len(returns)
        mean = sum(returns) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in returns) / n)
        low, high = mean_ci(mean, std, n)
        return {
            "mean": mean, "std": std, "low": low, "high": high, "episodes": n,
            "step": step, "source": f"`roborl eval` of this checkpoint (eval.json, seed {report.get('seed')})",
        }  # fmt: skip
    from roborl.core.run_dir import read_metrics

    evals = [r for r in read_metrics(run_dir) if r.get("eval/return_mean") is not None]
    if step is not None:
        evals = [r for r in evals if r.get("step") == step] or evals
    if not evals:
        return None
    last = evals[-1]
    n = int(config.get("eval_episodes") or 0)
    mean, std = float(last["eval/return_mean"]), float(last.get("eval/return_std") or 0.0)
    low, high = mean_ci(mean, std, n) if n else (mean, mean)
    return {
        "mean": mean, "std": std, "low": low, "high": high, "episodes": n or None,
        "step": last.get("step"), "source": "the run's last evaluation (metrics.jsonl)",
    }  # fmt: skip


def _same_file(a: Any, b: str | Path) -> bool:
    if not a:
        return False
    try:
        return Path(str(a)).resolve() == Path(b).resolve()
    except OSError:
        return False


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def model_card(
    meta: Mapping[str, Any],
    *,
    command: str | None,
    result: Mapping[str, Any] | None,
    summary: Mapping[str, Any] | None,
    files: Sequence[str],
) -> str:
    """README.md: Hub metadata, then what the policy is, how well it did, how to load it."""
    algo = str(meta["algo"])
    config = meta.get("config") or {}
    env_id = (config.get("env") or {}).get("id") or "unknown env"
    seed = config.get("seed")
    source = meta.get("source") or {}
    versions = {**(meta.get("versions") or {}), **((summary or {}).get("versions") or {})}
    name = f"{algo}-{env_id}".replace("/", "-")
    header: dict[str, Any] = {
        "library_name": "roborl",
        "tags": ["reinforcement-learning", "robotics", "roborl", algo, env_id],
    }
    if result is not None:
        header["model-index"] = [
            {
                "name": name,
                "results": [
                    {
                        "task": {
                            "type": "reinforcement-learning",
                            "name": "reinforcement-learning",
                        },
                        "dataset": {"name": env_id, "type": env_id},
                        "metrics": [
                            {
                                "type": "mean_reward",
                                "value": f"{_fmt(result['mean'])} +/- {_fmt(result['std'])}",
                                "name": "mean_reward",
                                "verified": False,
                            }
                        ],
                    }
                ],
            }
        ]
    lines = ["---", yaml.safe_dump(header, sort_keys=False).strip(), "---", ""]
    lines += [
        f"# {algo} on {env_id}",
        "",
        f"A deterministic policy trained with roborl's `{algo}` on `{env_id}`, "
        "exported as safetensors weights and JSON. Loading it runs no pickle.",
        "",
        "| | |",
        "|---|---|",
        f"| Algorithm | `{algo}` |",
        f"| Environment | `{env_id}` |",
        f"| Seed | {seed} |",
        f"| Env steps | {source.get('step')} |",
        f"| Gradient updates | {source.get('updates')} |",
    ]
    if summary:
        lines.append(f"| Wall time | {summary.get('wall_time_s')} s |")
        if summary.get("git_sha"):
            lines.append(f"| roborl commit | `{summary['git_sha']}` |")
    lines += ["", "## Final return", ""]
    if result is None:
        lines.append("Not recorded: the checkpoint has no run directory with evaluations.")
    else:
        n = result.get("episodes")
        ci = (
            f"95% CI [{_fmt(result['low'])}, {_fmt(result['high'])}] (Student-t over {n} "
            "deterministic episodes)"
            if n and n > 1
            else "no interval (one episode, or the episode count was not recorded)"
        )
        lines.append(
            f"**{_fmt(result['mean'])}** (std {_fmt(result['std'])}), {ci}, at env step "
            f"{result.get('step')}; from {result['source']}."
        )
    lines += ["", "## Training command", ""]
    if command:
        lines += ["```bash", command, "```"]
    else:
        lines.append("Not recorded (the run did not start from `roborl train`).")
    lines += ["", "## Versions", "", "| package | version |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(versions.items())]
    lines += [
        "",
        "## Load it",
        "",
        "```bash",
        "pip install roborl",
        "roborl eval model=THIS_FOLDER episodes=10",
        "roborl deploy model=THIS_FOLDER ...   # as a ROS 2 node",
    ]
    if "policy.onnx" in files:
        lines += [
            'pip install "roborl[onnx]"',
            "roborl eval model=THIS_FOLDER runtime=onnx   # policy.onnx with onnxruntime",
        ]
    lines += ["```", "", "## Files", ""]
    lines += [f"- `{f}`" for f in files]
    lines += [
        "",
        "`config.json` holds the algorithm's config, the observation and action spaces, the "
        "training run's config and the layout of the weights; `model.safetensors` holds the "
        "tensors. Optimiser states are not included (a loaded model starts a fresh optimiser).",
        "",
    ]
    if "policy.onnx" in files:
        lines += [
            "`policy.onnx` is the deterministic actor alone (observation normalisation "
            "included), for onnxruntime or any ONNX runtime; its input and output names and "
            "shapes are in `config.json` under `onnx` and in the file's metadata.",
            "",
        ]
    return "\n".join(lines)
