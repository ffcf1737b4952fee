"""Run an exported ``policy.onnx`` with onnxruntime: the `runtime=onnx` of `roborl eval` and
`roborl deploy`.

`roborl export ... format=onnx` writes ``policy.onnx`` beside model.safetensors and records
its inputs in config.json (``onnx``): one per observation entry and, for policies that sample
(FISOR), one standard normal ``noise`` input. `OnnxPolicy` is a `Policy` like the torch one:
it takes one observation or a batch, feeds the graph (casting to the recorded dtypes and
drawing the noise from its own numpy generator) and returns the action in the env's units.
Nothing here needs torch or the algorithm's code, which is what a robot computer without the
training stack wants; only onnxruntime (``pip install "roborl[onnx]"``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.actor_graph import ACTION_OUTPUT, GraphInput, feed_dict
from roborl.core.errors import CheckpointError, ConfigError, MissingExtraError
from roborl.core.interfaces import Policy
from roborl.core.model_dir import CONFIG_FILE, read_model_config
from roborl.core.obs import add_batch_axis, as_numpy_obs, is_single
from roborl.core.spaces import space_from_dict

ONNX_FILE = "policy.onnx"
RUNTIMES = ("torch", "onnx")
"""`runtime=` values of `roborl eval` and `roborl deploy` (torch: the algorithm's own code)."""


def import_onnxruntime(what: str = "runtime=onnx") -> Any:
    """onnxruntime, or a one-line error naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError:
        raise MissingExtraError(
            f"{what} needs onnxruntime, which is not installed: install it with "
            '`pip install "roborl[onnx]"`.'
        ) from None
    return onnxruntime


def inference_session(source: str | os.PathLike[str] | bytes, threads: int = 1) -> Any:
    """An onnxruntime CPU session for a model file (or its bytes); a file that onnxruntime
    cannot load is a CheckpointError naming it. One intra-op thread by default: a policy of
    a few small layers runs fastest without a thread pool, beside a control loop."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no graph-optimisation chatter
    name = "the exported ONNX model" if isinstance(source, bytes) else str(source)
    if isinstance(source, bytes):
        model: Any = source
    else:
        model = str(source)
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf/... types
        detail = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"{name} could not be loaded by onnxruntime ({detail}); it is truncated, corrupted "
            "or not an ONNX model. Export it again with roborl export ... format=onnx."
        ) from None


class OnnxPolicy(Policy):
    """A `Policy` whose `act` runs an exported actor graph with onnxruntime."""

    def __init__(
        self,
        session: Any,
        inputs: Sequence[GraphInput],
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int | None = 0,
        source: str = "policy.onnx",
    ) -> None:
        self.session = session
        self.inputs = list(inputs)
        self.observation_space = observation_space
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)
        self.source = source
        _check_session(session, self.inputs, source)

    def act(self, obs: Any) -> np.ndarray:
        """One observation (the Policy contract) or a batch with a leading axis."""
        obs = as_numpy_obs(obs, self.observation_space)
        single = is_single(obs, self.observation_space)
        batch = add_batch_axis(obs) if single else obs
        n = len(next(iter(batch.values())) if isinstance(batch, Mapping) else batch)
        noise = {
            spec.name: self.rng.standard_normal((n, *spec.shape), dtype=np.float32)
            for spec in self.inputs
            if spec.noise
        }
        actions = self.run(batch, noise)
        return actions[0] if single else actions

    def run(self, batch: Any, noise: Mapping[str, np.ndarray]) -> np.ndarray:
        """Actions for a batch with the noise inputs given (tests compare it with torch)."""
        feed = feed_dict(self.inputs, batch, noise)
        feed = {
            spec.name: np.ascontiguousarray(feed[spec.name], dtype=spec.dtype)
            for spec in self.inputs
        }
        (actions,) = self.session.run([ACTION_OUTPUT], feed)
        return actions


def _check_session(session: Any, inputs: Sequence[GraphInput], source: str) -> None:
    """The model's inputs must be the ones config.json records (names and per-sample shapes)."""
    got = {i.name: list(i.shape)[1:] for i in session.get_inputs()}
    want = {spec.name: list(spec.shape) for spec in inputs}
    outputs = [o.name for o in session.get_outputs()]
    if got != want or outputs != [ACTION_OUTPUT]:
        raise CheckpointError(
            f"{source} does not match its {CONFIG_FILE}: the model takes {got} and returns "
            f"{outputs}, the config records inputs {want} and output [{ACTION_OUTPUT!r}]. "
            "The two files come from different exports; export again with format=onnx."
        )


def onnx_policy_from_model_dir(
    path: str | os.PathLike[str], seed: int | None = 0, threads: int = 1
) -> tuple[OnnxPolicy, dict[str, Any]]:
    """The exported folder's policy.onnx as a Policy, and config.json's data shaped like
    `algorithm_from_model_dir`'s (``config``, ``algo``, ``path``, ``runner.step``)."""
    path = Path(path)
    if path.is_dir() and (path / CONFIG_FILE).is_file() and not (path / ONNX_FILE).is_file():
        raise ConfigError(
            f"runtime=onnx: model folder {str(path)!r} has no {ONNX_FILE}; export it with "
            "roborl export checkpoint=PATH out=DIR format=onnx (or use runtime=torch)."
        )
    meta = read_model_config(path, needs=ONNX_FILE)
    spec = meta.get("onnx")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("inputs"), list):
        raise CheckpointError(
            f"{path / CONFIG_FILE} does not describe {ONNX_FILE} (no 'onnx' entry with its "
            "inputs); export the folder again with format=onnx."
        )
    inputs = [GraphInput.from_json(i) for i in spec["inputs"]]
    session = inference_session(path / ONNX_FILE, threads)
    policy = OnnxPolicy(
        session,
        inputs,
        space_from_dict(meta["observation_space"]),
        space_from_dict(meta["action_space"]),
        seed=seed,
        source=str(path / ONNX_FILE),
    )
    meta.setdefault("config", {})
    meta["runner"] = {"step": (meta.get("source") or {}).get("step")}
    return policy, meta
