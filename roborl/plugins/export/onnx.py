"""`roborl export ... format=onnx`: the policy's actor graph as ``policy.onnx``, checked
against the torch policy before anything is written.

The graph comes from `Algorithm.actor_graph()` (`roborl.core.actor_graph`): the deterministic
action in the env's units, with the algorithm's observation normalisation inside. It is
traced with torch's `torch.export`-based ONNX exporter (``dynamo=True``, the exporter torch
maintains; the TorchScript one is deprecated), opset 18, with a dynamic batch axis. Then
onnxruntime runs it on random observations drawn from the observation space, a batch at once,
and its actions must equal the torch policy's within `ATOL`; otherwise the export stops
with an error (a roborl bug, not the user's). Policies that sample (FISOR) take their noise
as an input, drawn for the check from torch's generator as the torch policy draws it.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import logging
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.actor_graph import ACTION_OUTPUT, ActorGraph
from roborl.core.errors import CheckpointError, MissingExtraError
from roborl.core.obs import as_numpy_obs, stack_obs
from roborl.core.onnx_policy import ONNX_FILE, OnnxPolicy, import_onnxruntime, inference_session

OPSET = 18
ATOL = 1e-5
"""ONNX actions must equal the torch policy's to this absolute tolerance."""
VERIFY_SAMPLES = 64
"""Random observations (one batch) the ONNX graph is checked on."""


def require_exporter() -> None:
    """onnx and onnxscript (torch's ONNX exporter) and onnxruntime (the check), or a one-line
    error naming the extra, before anything is traced or written."""
    for module in ("onnx", "onnxscript"):
        try:
            __import__(module)
        except ImportError:
            raise MissingExtraError(
                f"format=onnx needs {module}, which is not installed: install it with "
                '`pip install "roborl[onnx]"` (onnx, onnxscript, onnxruntime).'
            ) from None
    import_onnxruntime("format=onnx")


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter prints progress and warns about torchvision ops and pytree internals; a
    `roborl export` line is all the user should see (errors still raise)."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _dynamic_shapes(module: torch.nn.Module, count: int) -> tuple[Any, ...]:
    """A dynamic batch axis for every input, shaped like `forward`'s signature (positional
    parameters, or one `*entries` tuple as the pixel graph takes)."""
    batch = torch.export.Dim("batch")
    specs = tuple({0: batch} for _ in range(count))
    params = inspect.signature(module.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return (specs,)
    return specs


def to_onnx(graph: ActorGraph, metadata: Mapping[str, str] | None = None) -> bytes:
    """The graph as a serialised ONNX model (opset `OPSET`, batch axis dynamic), with
    `metadata` in its ``metadata_props``."""
    import onnx

    module = copy.deepcopy(graph.module).eval()  # the algorithm's own modules stay untouched
    example = graph.example_inputs(batch=2)  # not 1: export would fix a size-1 axis
    names = [spec.name for spec in graph.inputs]
    with torch.no_grad(), _quiet_exporter():
        program = torch.onnx.export(
            module,
            example,
            input_names=names,
            output_names=[ACTION_OUTPUT],
            opset_version=OPSET,
            dynamo=True,
            dynamic_shapes=_dynamic_shapes(module, len(names)),
            verbose=False,
        )
    proto = program.model_proto
    proto.producer_name = "roborl"
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def sample_observations(space: gym.Space, n: int, seed: int = 0) -> Any:
    """`n` observations drawn from `space` (seeded), stacked into one batch."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return as_numpy_obs(stack_obs([space.sample() for _ in range(n)]), space)


def max_difference(
    policy: Any, graph: ActorGraph, onnx_policy: OnnxPolicy, obs: Any, seed: int = 0
) -> float:
    """max |ONNX - torch| over a batch of observations; the torch policy and the graph's
    noise start from the same torch seed. NaN anywhere gives NaN."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        expected = np.asarray(policy.act(obs), dtype=np.float64)
        torch.manual_seed(seed)
        n = len(next(iter(obs.values())) if isinstance(obs, Mapping) else obs)
        noise = graph.draw_noise(n) if graph.draw_noise is not None else {}
    got = onnx_policy.run(obs, {k: v.numpy() for k, v in noise.items()})
    if got.shape != expected.shape:
        return float("nan")
    return float(np.max(np.abs(got.astype(np.float64) - expected)))


def export_onnx(algo: Any, algo_name: str) -> tuple[bytes, dict[str, Any]]:
    """Trace `algo`'s actor graph to ONNX and check it against `algo.policy()`.

    Returns the model's bytes and the ``onnx`` entry of config.json. Raises ConfigError when
    the algorithm has no exportable graph (with its reason), MissingExtraError without the
    onnx extra, CheckpointError when onnxruntime's actions differ from torch's.
    """
    require_exporter()
    import onnxruntime

    graph = algo.actor_graph()
    inputs = [spec.to_json() for spec in graph.inputs]
    outputs = [
        {
            "name": ACTION_OUTPUT,
            "shape": ["batch", *(int(d) for d in algo.action_space.shape)],
            "dtype": "float32",
        }
    ]
    metadata = {
        "roborl.algo": algo_name,
        "roborl.inputs": json.dumps(inputs),
        "roborl.outputs": json.dumps(outputs),
        "roborl.about": "deterministic action in the env's units; config.json beside this "
        "file holds the observation and action spaces",
    }
    model = to_onnx(graph, metadata)
    onnx_policy = OnnxPolicy(
        inference_session(model),
        graph.inputs,
        algo.observation_space,
        algo.action_space,
        source=f"the exported {ONNX_FILE}",
    )
    obs = sample_observations(algo.observation_space, VERIFY_SAMPLES)
    diff = max_difference(algo.policy(), graph, onnx_policy, obs)
    if not diff <= ATOL:
        raise CheckpointError(
            f"the ONNX graph of algo={algo_name} acts differently from its torch policy "
            f"(max |difference| {diff:.3g} > {ATOL:g} on {VERIFY_SAMPLES} random "
            "observations); this is a roborl bug in its actor_graph, nothing was written."
        )
    spec = {
        "file": ONNX_FILE,
        "opset": OPSET,
        "inputs": inputs,
        "outputs": outputs,
        "graph": ["deterministic action, scaled to the action bounds", *graph.notes],
        "exporter": f"torch {torch.__version__} (torch.onnx, dynamo=True)",
        "check": {
            "runtime": f"onnxruntime {onnxruntime.__version__}",
            "observations": VERIFY_SAMPLES,
            "max_abs_diff": diff,
            "atol": ATOL,
        },
    }
    return model, spec
