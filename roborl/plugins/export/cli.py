"""`roborl export checkpoint=PATH out=DIR [push=REPO_ID] [private=false]`."""

from __future__ import annotations

import copy
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.checkpoint import check_finite_state
from roborl.core.errors import CheckpointError, ConfigError, RoborlError
from roborl.core.model_dir import (
    CARD_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    algorithm_from_model_dir,
    is_model_dir,
    save_model_dir,
)
from roborl.core.onnx_policy import ONNX_FILE
from roborl.plugins.export.card import final_return, model_card, run_dir_of, training_command
from roborl.plugins.export.hub import is_host_key, sanitize_value

VERIFY_SAMPLES = 16
FORMATS = ("safetensors", "onnx")


@dataclass
class ExportOptions:
    """`roborl export` keys."""

    checkpoint: str | None = field(
        default=None, metadata={"help": "a .pt file or a run directory (its checkpoints/last.pt)"}
    )
    out: str | None = field(default=None, metadata={"help": "folder to write (created)"})
    push: str | None = field(
        default=None,
        metadata={"help": "Hugging Face Hub repo id (NAMESPACE/NAME) to upload the folder to"},
    )
    private: bool = field(
        default=True,
        metadata={"help": "push= creates a private repo; private=false publishes it"},
    )
    format: str = field(
        default="safetensors",
        metadata={
            "choices": list(FORMATS),
            "help": f"onnx: also write {ONNX_FILE} (the deterministic actor, checked against "
            "torch), which eval/deploy run with runtime=onnx; needs roborl[onnx]",
        },
    )


def export_help() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl export checkpoint=PATH out=DIR [format=onnx] [push=NAMESPACE/NAME] "
        "[private=false]\n\n"
        f"Write the checkpoint's policy as {WEIGHTS_FILE} + {CONFIG_FILE} + a model card\n"
        f"({CARD_FILE}) that anyone can load without unpickling: roborl eval model=DIR,\n"
        "roborl deploy model=DIR. Optimiser state and replay buffers are left out.\n"
        f"format=onnx adds {ONNX_FILE} (deterministic actor, observation normalisation\n"
        "included), run by onnxruntime with roborl eval|deploy model=DIR runtime=onnx.\n"
        "push= uploads to a private repo (private=false: public); the uploaded config.json has\n"
        "no secrets, absolute paths, hosts or robot/deployment settings.\n\n"
        + section("Keys", field_lines(ExportOptions))
        + logs.HELP
    )


def same_actions(a: Any, b: Any, space: gym.Space, samples: int = VERIFY_SAMPLES) -> bool | None:
    """Do two algorithms' deterministic policies act identically on sampled observations?

    Each pair of calls starts from the same torch seed, so policies that sample inside their
    deterministic action (FISOR's sample-and-select) are compared on the same draws. None when
    the policy cannot act on synthetic observations (e.g. it needs real images with an
    instruction), so the comparison says nothing.
    """
    space = copy.deepcopy(space)
    space.seed(0)
    pa, pb = a.policy(), b.policy()
    pa.reset()
    pb.reset()

    def act(policy: Any, obs: Any, seed: int) -> np.ndarray:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return np.asarray(policy.act(obs))

    for i in range(samples):
        obs = space.sample()
        try:
            x = act(pa, obs, i)
        except Exception:
            return None
        if not np.array_equal(x, act(pb, obs, i)):
            return False
    return True


def sanitize_command(command: str | None) -> str | None:
    """The training command for the card: override values without paths, hosts or secrets."""
    if command is None:
        return None
    from roborl.core.secrets import REDACTED, is_secret_key

    words = []
    for word in shlex.split(command):
        key, eq, value = word.partition("=")
        if eq:
            leaf = key.lstrip("+~").rsplit(".", 1)[-1]
            secret = is_secret_key(leaf) or (is_host_key(leaf) and value)
            value = REDACTED if secret else sanitize_value(value)
            word = f"{key}={value}"
        words.append(shlex.quote(word))
    return " ".join(words)


def export(
    host: Any,
    checkpoint: str,
    out: str | Path,
    push: str | None = None,
    private: bool = True,
    format: str = "safetensors",
) -> dict[str, Any]:
    """Export `checkpoint` to `out` (and push it); returns what was written.

    `format="onnx"` adds policy.onnx (`roborl.plugins.export.onnx`); it is traced and checked
    before anything is written, so a refusal or a missing extra leaves `out` as it was.
    """
    if format not in FORMATS:
        raise ConfigError(
            f"format={format!r} is not accepted: expected one of {', '.join(FORMATS)}."
        )
    from roborl.core.policy_source import PolicySource, load_policy

    source = PolicySource("export", checkpoint=str(checkpoint), accepts_model=False)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={str(out)!r} is a file; give a folder to write into.")
    if out.is_dir() and any(out.iterdir()) and not is_model_dir(out):
        raise ConfigError(
            f"out={str(out)!r} is a folder with other files in it; give a new or empty folder "
            "(or a previous export, which is replaced)."
        )
    loaded = load_policy(source, host, "cpu")
    algo, ckpt = loaded.algorithm, loaded.metadata
    assert algo is not None
    check_finite_state(ckpt["state"], "export")  # never publish diverged weights
    if type(algo).checkpoint_free:
        raise ConfigError(
            f"algo={ckpt['algo']} acts from its config alone (no learned weights to export); "
            "share its config instead."
        )
    onnx_model, onnx_spec = None, None
    if format == "onnx":
        from roborl.plugins.export.onnx import export_onnx

        onnx_model, onnx_spec = export_onnx(algo, ckpt["algo"])
    ckpt_path = Path(ckpt["path"])
    run_dir = run_dir_of(ckpt_path)
    runner = ckpt.get("runner") or {}
    config = dict(ckpt.get("config") or {})
    source = {
        "checkpoint": ckpt_path.name,
        "run": run_dir.name if run_dir else None,
        "step": runner.get("step"),
        "updates": runner.get("updates"),
        "best_eval_return": runner.get("best_eval_return"),
        "last_eval_return": runner.get("last_eval_return"),
    }
    from roborl.core.checkpoint import atomic_write_bytes

    out.mkdir(parents=True, exist_ok=True)
    if onnx_model is not None:  # before config.json, which records it
        atomic_write_bytes(out / ONNX_FILE, onnx_model)
        (out / ONNX_FILE).chmod(0o644)
    else:  # a previous export's graph would not match the new weights
        (out / ONNX_FILE).unlink(missing_ok=True)
    meta = save_model_dir(
        out,
        algo=ckpt["algo"],
        algo_config=ckpt["algo_config"],
        observation_space=ckpt["observation_space"],
        action_space=ckpt["action_space"],
        state=ckpt["state"],
        config=config,
        source=source,
        versions=ckpt.get("versions"),
        extra={"onnx": onnx_spec} if onnx_spec else None,
    )
    loaded, _ = algorithm_from_model_dir(host, out, "cpu")
    if onnx_model is not None:  # the written pair loads: file readable, inputs as recorded
        from roborl.core.onnx_policy import onnx_policy_from_model_dir

        onnx_policy_from_model_dir(out)
    verified = same_actions(algo, loaded, algo.observation_space)
    if verified is False:
        raise CheckpointError(
            f"the export in {out} does not reproduce the checkpoint's actions; this is a roborl "
            f"bug for algo={ckpt['algo']} (its state has parts the export format misses)."
        )
    summary = None
    if run_dir is not None and (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
    result = final_return(run_dir, ckpt_path, config, runner.get("step"))
    card = model_card(
        meta,
        command=sanitize_command(training_command(run_dir)),
        result=result,
        summary=summary,
        files=[WEIGHTS_FILE, CONFIG_FILE, CARD_FILE, *([ONNX_FILE] if onnx_model else [])],
    )
    atomic_write_bytes(out / CARD_FILE, card.encode())
    (out / CARD_FILE).chmod(0o644)
    url = None
    if push:
        from roborl.plugins.export.hub import push as push_folder

        url = push_folder(out, push, private)
    return {"out": out, "verified": verified, "result": result, "url": url, "onnx": onnx_spec}


def main(argv: list[str]) -> int:
    from roborl.core.cli import command_options, error_line
    from roborl.core.plugins import get_host

    if any(a in ("-h", "--help") for a in argv):
        print(export_help())
        return 0
    try:
        opts, _ = command_options(ExportOptions, argv, "export")
        if not opts.checkpoint or not opts.out:
            raise ConfigError(
                "roborl export: checkpoint=PATH and out=DIR are required "
                "(e.g. roborl export checkpoint=runs/.../checkpoints/last.pt out=exported/sac)."
            )
        done = export(get_host(), opts.checkpoint, opts.out, opts.push, opts.private, opts.format)
    except RoborlError as exc:
        print(error_line("export", exc), file=sys.stderr)
        return exc.exit_code
    out = done["out"]
    size_kb = (out / WEIGHTS_FILE).stat().st_size / 1024
    check = {
        True: "its actions match the checkpoint's",
        None: "not compared with the checkpoint (its policy needs real observations)",
    }[done["verified"]]
    print(
        f"roborl export: wrote {out}/ ({WEIGHTS_FILE} {size_kb:.0f} kB, {CONFIG_FILE}, "
        f"{CARD_FILE}); {check}. Load it with: roborl eval model={out}"
    )
    if done["onnx"]:
        onnx_check = done["onnx"]["check"]
        onnx_kb = (out / ONNX_FILE).stat().st_size / 1024
        print(
            f"roborl export: wrote {out}/{ONNX_FILE} ({onnx_kb:.0f} kB); onnxruntime's actions "
            f"match torch's within {onnx_check['max_abs_diff']:.2g} on "
            f"{onnx_check['observations']} "
            f"random observations. Run it with: roborl eval model={out} runtime=onnx"
        )
    if done["url"]:
        print(f"roborl export: pushed to {done['url']}")
    return 0
