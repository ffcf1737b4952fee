"""A deterministic policy as one torch module of tensor operations, for export (ONNX).

A `Policy.act` mixes numpy and torch: it converts observations, runs the actor and rescales
the action with `np.clip`. An exporter needs the same maths as tensor operations only, behind
named inputs. `Algorithm.actor_graph()` returns an `ActorGraph`:

- `module`: ``forward(*inputs) -> action``, every input and the action with a leading batch
  axis, the action in the env's units (scaled to the action space's bounds and clipped there,
  exactly as `ActionScaler.to_env`);
- `inputs`: one `GraphInput` per observation entry (a Box observation is ``obs``; a Dict
  observation gives ``obs.<key>`` per entry, camera frames as uint8) and one per noise tensor
  the policy draws (FISOR's diffusion samples), in `forward`'s order;
- `draw_noise`: draws those noise tensors from torch's global generator in the order the torch
  policy does, so the graph and `policy().act` agree under the same `torch.manual_seed`.

The graph's modules share the algorithm's weights; exporters copy what they trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

OBS_INPUT = "obs"
"""Name of the input of a Box observation; a Dict entry KEY is ``obs.KEY``."""
ACTION_OUTPUT = "action"


@dataclass(frozen=True)
class GraphInput:
    """One input of an actor graph: its name, per-sample shape and dtype, and what feeds it."""

    name: str
    shape: tuple[int, ...]
    """Per sample, without the batch axis."""
    dtype: str
    """numpy dtype name: ``float32`` or ``uint8`` (camera frames)."""
    key: str | None = None
    """The Dict observation entry this input takes; None for a Box observation or noise."""
    noise: bool = False
    """True: standard normal draws, not part of the observation."""

    def to_json(self) -> dict[str, Any]:
        """Plain data for config.json and the ONNX file's metadata."""
        return {
            "name": self.name,
            "shape": ["batch", *self.shape],
            "dtype": self.dtype,
            "feeds": "standard_normal" if self.noise else "observation",
            **({"key": self.key} if self.key is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphInput:
        """Inverse of `to_json`."""
        return cls(
            name=str(data["name"]),
            shape=tuple(int(d) for d in list(data["shape"])[1:]),
            dtype=str(data["dtype"]),
            key=data.get("key"),
            noise=data.get("feeds") == "standard_normal",
        )


@dataclass
class ActorGraph:
    """The deterministic policy as `module(*inputs) -> action` (see the module docstring)."""

    module: nn.Module
    inputs: list[GraphInput]
    draw_noise: Callable[[int], dict[str, torch.Tensor]] | None = None
    notes: list[str] = field(default_factory=list)
    """What the graph contains beyond the actor (obs normalisation, sample-and-select), for
    the export's config.json."""

    def example_inputs(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs of the right shapes and dtypes (for tracing), drawn with their own generator."""
        gen = torch.Generator().manual_seed(seed)
        out = []
        for spec in self.inputs:
            shape = (batch, *spec.shape)
            if spec.dtype == "uint8":
                out.append(torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8))
            else:
                out.append(torch.randn(shape, generator=gen))
        return tuple(out)


def observation_inputs(space: gym.Space) -> list[GraphInput]:
    """The graph inputs of an observation space, converted as the torch policies convert
    them: a Box observation is float32 (`obs_tensor`); the entries of a Dict stay uint8 when
    they are uint8 (camera frames) and are float32 otherwise (`roborl.core.obs.to_torch`)."""

    def shape(sub: gym.Space) -> tuple[int, ...]:
        return tuple(int(d) for d in sub.shape)

    if isinstance(space, gym.spaces.Dict):
        return [
            GraphInput(
                f"{OBS_INPUT}.{k}",
                shape(sub),
                "uint8" if np.dtype(sub.dtype) == np.uint8 else "float32",
                k,
            )
            for k, sub in space.spaces.items()
        ]
    return [GraphInput(OBS_INPUT, shape(space), "float32")]


def feed_dict(inputs: Sequence[GraphInput], obs: Any, noise: Mapping[str, Any]) -> dict[str, Any]:
    """Name -> value for a batch: observation entries from `obs` (an array, or a dict by
    key), noise tensors from `noise`."""
    feed = {}
    for spec in inputs:
        if spec.noise:
            feed[spec.name] = noise[spec.name]
        else:
            feed[spec.name] = obs if spec.key is None else obs[spec.key]
    return feed


class ScaleToBounds(nn.Module):
    """Actions in [-1, 1] -> the Box's bounds, clipped there: `ActionScaler.to_env` as tensor
    ops (``clip(a * scale + center, low, high)`` in float32)."""

    def __init__(self, action_space: gym.spaces.Box) -> None:
        super().__init__()
        low = np.asarray(action_space.low, dtype=np.float32)
        high = np.asarray(action_space.high, dtype=np.float32)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0))
        self.register_buffer("center", torch.as_tensor((high + low) / 2.0))
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    def forward(self, unit: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(unit * self.scale + self.center, self.low), self.high)


class MethodModule(nn.Module):
    """`module.<method>` as a module of its own, so a graph can hold e.g. an actor's
    `deterministic` (tanh of the mean) with the actor's weights registered."""

    def __init__(self, module: nn.Module, method: str) -> None:
        super().__init__()
        self.inner = module
        self.method = method

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.inner, self.method)(x)


class FlatActorGraph(nn.Module):
    """A Box observation -> flattened (and normalised) -> `unit_action` in [-1, 1] -> bounds.

    `obs_mean`/`obs_std` put the algorithm's observation normalisation into the graph
    (``(obs - mean) / std``, as IQL/RIQL compute it); None leaves observations as they are.
    """

    def __init__(
        self,
        unit_action: nn.Module,
        action_space: gym.spaces.Box,
        obs_mean: torch.Tensor | None = None,
        obs_std: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.unit_action = unit_action
        self.to_env = ScaleToBounds(action_space)
        self.normalise = obs_mean is not None
        if obs_mean is not None:
            assert obs_std is not None
            self.register_buffer("obs_mean", obs_mean.detach().clone().float().cpu())
            self.register_buffer("obs_std", obs_std.detach().clone().float().cpu())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        if self.normalise:
            x = (x - self.obs_mean) / self.obs_std
        return self.to_env(self.unit_action(x))


def flat_actor_graph(
    unit_action: nn.Module,
    observation_space: gym.Space,
    action_space: gym.spaces.Box,
    obs_mean: torch.Tensor | None = None,
    obs_std: torch.Tensor | None = None,
) -> ActorGraph:
    """The `ActorGraph` of a policy on flat Box observations (SAC family, IQL, BC)."""
    module = FlatActorGraph(unit_action, action_space, obs_mean, obs_std)
    notes = ["observation normalisation (obs - mean) / std"] if obs_mean is not None else []
    return ActorGraph(module, observation_inputs(observation_space), notes=notes)
