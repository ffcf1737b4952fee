"""An LLM as a zero-shot policy: text rendering of the state in, a validated action out.

The model never acts through free-text scraping alone: every backend asks for a structured
reply (a JSON object ``{"action": [...]}`` with per-dimension bounds for a Box action space, one
of the listed integers for a Discrete one), and every reply is still parsed and validated here.
A reply that does not parse, has the wrong length, is non-finite or out of bounds, or is empty,
and a request that got no answer within ``llm.timeout_s`` (openai backend: retries and backoff
included), is logged with its reason, counted in ``llm/invalid_rate`` and replaced according to
``llm.on_invalid``:

- ``hold`` (default): for a Box action space an all-NaN action. It is not a command: the robot
  safety layer (`roborl.robots.env.safety.SafetyLayer.filter`) turns any non-finite action into its
  configured hold command and counts it (``nonfinite``), so `roborl deploy`, `RobotEnv` and
  `roborl sim-robot` hold. Without a safety layer (a plain Gymnasium sim env) a NaN action
  reaches the simulator: use ``fallback`` there. A Discrete space has no NaN; its hold is
  ``llm.fallback_index``.
- ``fallback``: the ``llm.fallback`` action (``center`` of the bounds, or ``zeros``), an
  active command.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.config import rng
from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import Algorithm, Policy

log = logging.getLogger("roborl.llm")


class LLMServerError(RobotError):
    """The LLM server did not answer in time or answered with an error."""


class LLMLateError(LLMServerError):
    """No usable answer within ``llm.timeout_s``: the policy step holds (``llm.on_invalid``)."""


DEFAULT_TEMPLATE = (
    "You control a {task_kind}. {instruction}\n"
    "Observation:\n{observation}\n"
    "{history}"
    "Answer with the action as {action_format}.\n"
    "Action: "
)


@dataclass
class LLMConfig:
    """Configuration of the LLM policy (algo=llm; also settable as llm.KEY on the CLI)."""

    # `local_only` fields reach the network, a secret or files outside a model folder: a
    # model folder or checkpoint cannot set them (roborl.core.model_dir.local_algo_config).
    model: str = field(
        default="",
        metadata={
            "local_only": "path",
            "help": "a Hugging Face model folder or hub id (backend=openai: the served model name)",
        },
    )
    backend: str = field(
        default="transformers", metadata={"choices": ["vllm", "openai", "transformers"]}
    )
    instruction: str = "Keep the system stable and move towards the goal."
    prompt_template: str = DEFAULT_TEMPLATE
    history: int = field(default=0, metadata=rng(0, 64, "previous steps shown in the prompt"))
    max_tokens: int = field(default=64, metadata=rng(1, 4096))
    temperature: float = field(default=0.0, metadata=rng(0.0, 5.0))
    decimals: int = field(default=3, metadata=rng(0, 8))
    on_invalid: str = field(
        default="hold",
        metadata={
            "choices": ["hold", "fallback"],
            "help": "invalid or late reply: hold (NaN, the safety layer's hold) or fallback",
        },
    )
    fallback: str = field(default="center", metadata={"choices": ["center", "zeros", "index"]})
    fallback_index: int = 0
    # openai backend
    base_url: str = field(
        default="http://127.0.0.1:8000/v1",
        metadata={"local_only": "network", "help": "the OpenAI-compatible server"},
    )
    api_key_env: str = field(
        default="OPENAI_API_KEY",
        metadata={"local_only": "secret", "help": "the environment variable holding the key"},
    )
    api_key: str = field(
        default="EMPTY",
        repr=False,
        metadata={"local_only": "secret", "help": "prefer api_key_env; redacted when saved"},
    )
    timeout_s: float = field(
        default=5.0,
        metadata=rng(0.01, 3600.0, "cap on one step's request, retries and backoff included"),
    )
    retries: int = field(default=2, metadata=rng(0, 20))
    backoff_s: float = field(default=0.5, metadata=rng(0.0, 60.0))
    min_server_version: str = "0.12.0"
    # vllm backend
    enforce_eager: bool = True
    max_model_len: int = field(default=2048, metadata=rng(64, 1_000_000))
    gpu_memory_utilization: float = field(default=0.5, metadata=rng(0.01, 1.0))
    dtype: str = "auto"
    seed: int = 0


# -- the action format ----------------------------------------------------------------------


class ActionCodec:
    """The structured-output spec of an action space and the validator of replies."""

    def __init__(self, space: gym.Space, config: LLMConfig) -> None:
        self.space = space
        self.config = config
        if isinstance(space, gym.spaces.Discrete):
            self.discrete = True
            self.choices = [str(int(space.start) + i) for i in range(int(space.n))]
        elif isinstance(space, gym.spaces.Box):
            self.discrete = False
            self.low = np.broadcast_to(space.low, space.shape).astype(np.float64).ravel()
            self.high = np.broadcast_to(space.high, space.shape).astype(np.float64).ravel()
        else:
            raise ConfigError(
                f"algo=llm: action space {space} is not supported; the LLM policy accepts "
                "gymnasium Box and Discrete action spaces."
            )

    def json_schema(self) -> dict[str, Any]:
        """JSON schema of a Box action: {"action": [n numbers within bounds]}."""
        items = []
        for lo, hi in zip(self.low, self.high):
            item: dict[str, Any] = {"type": "number"}
            if math.isfinite(lo):
                item["minimum"] = float(lo)
            if math.isfinite(hi):
                item["maximum"] = float(hi)
            items.append(item)
        n = len(items)
        return {
            "type": "object",
            "properties": {
                "action": {
                    "type": "array",
                    "prefixItems": items,
                    "items": False,
                    "minItems": n,
                    "maxItems": n,
                }
            },
            "required": ["action"],
            "additionalProperties": False,
        }

    def describe(self) -> str:
        if self.discrete:
            return f"one integer from {{{', '.join(self.choices)}}}"
        bounds = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in zip(self.low, self.high))
        return f'JSON {{"action": [{len(self.low)} numbers]}} with bounds {bounds}'

    def fallback(self) -> np.ndarray:
        if self.discrete:
            idx = int(self.config.fallback_index)
            if not self.space.contains(np.int64(idx)):
                idx = int(self.space.start)
            return np.asarray(idx, dtype=self.space.dtype)
        if self.config.fallback == "zeros":
            a = np.clip(np.zeros_like(self.low), self.low, self.high)
        else:
            lo = np.where(np.isfinite(self.low), self.low, 0.0)
            hi = np.where(np.isfinite(self.high), self.high, 0.0)
            a = (lo + hi) / 2.0
        return a.reshape(self.space.shape).astype(self.space.dtype)

    def hold(self) -> np.ndarray:
        """The action for an invalid or late reply under ``llm.on_invalid=hold``.

        Box: all NaN, which the robot safety layer replaces by its hold command (and counts as
        ``nonfinite``). Discrete: the ``llm.fallback_index`` choice (an integer has no NaN)."""
        if self.discrete:
            return self.fallback()
        dtype = self.space.dtype if np.issubdtype(self.space.dtype, np.floating) else np.float64
        return np.full(self.space.shape, np.nan, dtype=dtype)

    def invalid_action(self) -> np.ndarray:
        return self.hold() if self.config.on_invalid == "hold" else self.fallback()

    def parse(self, text: str | None) -> tuple[np.ndarray | None, str]:
        """(action, "") for a valid reply, else (None, reason)."""
        if text is None or not text.strip():
            return None, "empty reply"
        text = text.strip()
        if self.discrete:
            token = text.split()[0].strip(".,;\"'")
            if token not in self.choices:
                return None, f"reply {text[:60]!r} is not one of {self.choices}"
            return np.asarray(int(token), dtype=self.space.dtype), ""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"reply {text[:60]!r} is not JSON ({exc.msg})"
        values = obj.get("action") if isinstance(obj, dict) else obj
        if not isinstance(values, list):
            return None, f"reply {text[:60]!r} has no 'action' list"
        if len(values) != len(self.low):
            return None, f"reply has {len(values)} numbers, the action space needs {len(self.low)}"
        try:
            a = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            return None, f"reply {text[:60]!r} holds non-numbers"
        if not np.all(np.isfinite(a)):
            return None, "reply holds NaN or infinity"
        bad = np.nonzero((a < self.low) | (a > self.high))[0]
        if bad.size:
            i = int(bad[0])
            return None, (
                f"action[{i}]={a[i]:g} is outside the bounds [{self.low[i]:g}, {self.high[i]:g}]"
            )
        return a.reshape(self.space.shape).astype(self.space.dtype), ""


# -- prompt rendering -----------------------------------------------------------------------


class PromptRenderer:
    """Renders observations with a format-string template; named fields when the env has them."""

    def __init__(
        self,
        observation_space: gym.Space,
        codec: ActionCodec,
        config: LLMConfig,
        field_names: Sequence[str] | None = None,
        task_kind: str = "robot",
    ) -> None:
        self.config = config
        self.codec = codec
        self.observation_space = observation_space
        self.field_names = list(field_names) if field_names else None
        self.task_kind = task_kind

    def observation_text(self, obs: np.ndarray) -> str:
        flat = np.asarray(obs, dtype=np.float64).ravel()
        d = self.config.decimals
        names = self.field_names
        if names is None or len(names) != flat.size:
            names = [f"obs[{i}]" for i in range(flat.size)]
        return "\n".join(f"{n} = {v:.{d}f}" for n, v in zip(names, flat))

    def render(self, obs: np.ndarray, history: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> str:
        hist = ""
        if history:
            d = self.config.decimals
            lines = []
            for o, a in history:
                o_txt = ", ".join(f"{v:.{d}f}" for v in np.ravel(o))
                a_txt = ", ".join(f"{v:.{d}f}" for v in np.ravel(a))
                lines.append(f"obs [{o_txt}] -> action [{a_txt}]")
            hist = "Previous steps:\n" + "\n".join(lines) + "\n"
        try:
            return self.config.prompt_template.format(
                task_kind=self.task_kind,
                instruction=self.config.instruction,
                observation=self.observation_text(obs),
                history=hist,
                action_format=self.codec.describe(),
            )
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"llm.prompt_template could not be formatted ({exc!r}); it may use the fields "
                "{task_kind}, {instruction}, {observation}, {history} and {action_format}."
            ) from None


# -- the policy -----------------------------------------------------------------------------


class LLMPolicy(Policy):
    """A `Policy` whose actions come from a language model backend, validated per reply."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: LLMConfig,
        backend: Any | None = None,
        field_names: Sequence[str] | None = None,
        task_kind: str = "robot",
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.codec = ActionCodec(action_space, config)
        self.renderer = PromptRenderer(
            observation_space, self.codec, config, field_names, task_kind
        )
        if backend is None:
            from roborl.plugins.llm.backends import make_backend

            backend = make_backend(config)
        self.backend = backend
        # one history per env row: a vectorised env's rows are different episodes
        self.histories: list[deque[tuple[np.ndarray, np.ndarray]]] = []
        self.n_replies = 0
        self.n_invalid = 0
        self.n_late = 0
        self.last_reasons: list[str] = []
        self.last_replies: list[str | None] = []

    def reset(self) -> None:
        self.histories = []

    def _history(self, row: int) -> deque[tuple[np.ndarray, np.ndarray]]:
        while len(self.histories) <= row:
            self.histories.append(deque(maxlen=max(self.config.history, 1)))
        return self.histories[row]

    def prompts(self, obs_batch: np.ndarray) -> list[str]:
        """One prompt per row of a batch of observations."""
        if self.config.history > 0:
            return [
                self.renderer.render(o, list(self._history(i))) for i, o in enumerate(obs_batch)
            ]
        return [self.renderer.render(o) for o in obs_batch]

    def decode(self, replies: Sequence[str | None], late: str = "") -> np.ndarray:
        """Validated actions for raw replies; invalid ones (all of them when `late` gives why
        the answer came too late) hold or fall back (``llm.on_invalid``) and are counted."""
        actions = []
        self.last_reasons = []
        self.last_replies = list(replies)
        then = "holding" if self.config.on_invalid == "hold" else "using the fallback action"
        for i, text in enumerate(replies):
            action, reason = (None, late) if late else self.codec.parse(text)
            self.n_replies += 1
            if action is None:
                self.n_invalid += 1
                self.n_late += bool(late)
                log.warning("llm reply %d rejected: %s; %s", i, reason, then)
                action = self.codec.invalid_action()
            self.last_reasons.append(reason)
            actions.append(action)
        return np.stack(actions)

    def is_single(self, obs: np.ndarray) -> bool:
        """One observation (no leading batch axis) or a batch of them."""
        shape = getattr(self.observation_space, "shape", None)
        if shape is None:  # Dict/Tuple spaces are not flattened here
            raise ConfigError(
                f"algo=llm: observation space {self.observation_space} is not supported; "
                "the LLM policy renders Box and Discrete observations."
            )
        if obs.ndim == len(shape):
            return True
        if obs.ndim == len(shape) + 1:
            return False
        raise ConfigError(
            f"algo=llm: observation of shape {obs.shape} matches neither the observation space "
            f"shape {shape} nor a batch of it (N, {', '.join(map(str, shape))})."
        )

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Action for one observation, or actions (leading axis) for a batch of them."""
        obs = np.asarray(obs)
        single = self.is_single(obs)
        batch = obs[None] if single else obs
        late = ""
        try:
            replies = self.backend.generate(self.prompts(batch), self.codec)
        except LLMLateError as exc:  # no answer within llm.timeout_s: hold, do not crash
            replies, late = [None] * len(batch), f"late reply ({exc})"
        if len(replies) != len(batch):
            raise RobotError(
                f"the LLM backend returned {len(replies)} replies for {len(batch)} prompts."
            )
        actions = self.decode(replies, late)
        if self.config.history > 0:
            for i in range(len(batch)):
                self._history(i).append((batch[i].copy(), actions[i].copy()))
        return actions[0] if single else actions

    @property
    def invalid_rate(self) -> float:
        return self.n_invalid / self.n_replies if self.n_replies else 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "llm/invalid_rate": self.invalid_rate,
            "llm/replies": float(self.n_replies),
            "llm/late_replies": float(self.n_late),
        }


class LLMAlgorithm(Algorithm):
    """Zero-shot LLM policy as an algorithm: nothing to learn, `train` only evaluates.

    `roborl eval algo=llm ...`, `roborl dataset collect policy=llm ...` and `roborl deploy
    algo=llm ...` build it from config (no checkpoint) and call `policy().act`.
    """

    name = "llm"
    Config = LLMConfig
    loop = "custom"
    checkpoint_free = True  # `roborl eval algo=llm ...` builds it from config alone

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: LLMConfig,
        device: Any = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not config.model:
            raise ConfigError(
                "algo=llm needs llm.model=PATH (a Hugging Face model folder or, for "
                "backend=openai, the served model name; with model=DIR or checkpoint=, give "
                "algo.model=PATH: a saved llm.model is used only when it lies inside the model "
                "folder); `roborl llm prepare-model` writes a small one under "
                "~/.cache/roborl/models."
            )
        self._policy: LLMPolicy | None = None

    def policy(self) -> LLMPolicy:
        if self._policy is None:
            self._policy = LLMPolicy(self.observation_space, self.action_space, self.config)
        return self._policy

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return self.policy().act(obs)

    def close(self) -> None:
        """Release the backend (a vLLM engine holds its KV cache until shut down)."""
        if self._policy is not None:
            close = getattr(self._policy.backend, "close", None)
            if close is not None:
                close()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        return None

    def train(self, ctx: Any) -> None:
        ctx.evaluate(self)
        ctx.log(self.policy().metrics())
