"""Loading a real OpenVLA-style checkpoint from a local folder as a roborl `Policy`.

OpenVLA (Kim et al., 2024; `openvla/openvla-7b` on the Hugging Face hub) ships its model code
with the weights, so it loads with ``trust_remote_code=True``. Its remote code was written for
**transformers 4.40.1** (with ``timm==0.9.10`` and ``tokenizers==0.19.1``); newer transformers
releases change the Prismatic processor and may fail to load it. Install those versions in a
separate environment for OpenVLA-7B. It needs a GPU (about 15 GB in bf16); weights must
already be on disk (roborl never downloads at run time).

The policy follows OpenVLA's own inference path: the prompt
"In: What action should the robot take to {instruction}?\\nOut:", 7 action tokens decoded
greedily and un-normalised with the dataset statistics named by ``unnorm_key``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.errors import CheckpointError
from roborl.core.interfaces import Policy
from roborl.plugins.vla_rl.tokenizer import PROMPT

TESTED_TRANSFORMERS = "4.40.1"


def check_openvla_folder(path: str | Path) -> Path:
    """Fail early, naming what is missing, before importing anything heavy."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(f"OpenVLA checkpoint folder {str(folder)!r} does not exist.")
    config = folder / "config.json"
    if not config.is_file():
        raise CheckpointError(
            f"{str(folder)!r} has no config.json: expected a Hugging Face model folder such as "
            "a local copy of openvla/openvla-7b."
        )
    try:
        data = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{config} is not valid JSON ({exc}).") from None
    if "auto_map" not in data:
        raise CheckpointError(
            f"{config} has no auto_map: OpenVLA checkpoints carry their model code "
            "(trust_remote_code); this folder does not look like one."
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise CheckpointError(f"{str(folder)!r} holds no weight files (*.safetensors or *.bin).")
    return folder


class OpenVLAPolicy(Policy):
    """obs = {"image": HxWx3 uint8, "instruction": str} -> 7-DoF end-effector action."""

    def __init__(self, path: str | Path, unnorm_key: str, device: str = "cuda:0") -> None:
        folder = check_openvla_folder(path)
        import torch
        import transformers
        from transformers import AutoModelForVision2Seq, AutoProcessor

        if transformers.__version__ != TESTED_TRANSFORMERS:
            import warnings

            warnings.warn(
                f"OpenVLA's remote code was tested with transformers {TESTED_TRANSFORMERS}; "
                f"this is {transformers.__version__}.",
                stacklevel=2,
            )
        self.processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
        self.model = AutoModelForVision2Seq.from_pretrained(
            folder, torch_dtype=torch.bfloat16, trust_remote_code=True, low_cpu_mem_usage=True
        ).to(device)
        self.device = device
        self.unnorm_key = unnorm_key
        self.observation_space = gym.spaces.Dict({})
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        import torch
        from PIL import Image

        prompt = PROMPT.format(instruction=str(obs["instruction"]).lower())
        inputs = self.processor(prompt, Image.fromarray(np.asarray(obs["image"]))).to(
            self.device, dtype=torch.bfloat16
        )
        action = self.model.predict_action(**inputs, unnorm_key=self.unnorm_key, do_sample=False)
        return np.asarray(action, dtype=np.float32)
