"""The action format and the policy plumbing, with crafted replies (no model needed)."""

from __future__ import annotations

import json
import logging

import gymnasium as gym
import numpy as np
import pytest
from cli_server import run_roborl

from roborl.core.errors import ConfigError
from roborl.plugins.llm.policy import ActionCodec, LLMConfig, LLMPolicy, PromptRenderer

BOX = gym.spaces.Box(np.array([-1.0, -0.5], np.float32), np.array([1.0, 2.0], np.float32))
DISC = gym.spaces.Discrete(3)
OBS = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float64)


class Replies:
    """A backend that hands back the given raw replies (to drive `LLMPolicy.act`)."""

    def __init__(self, replies: list[str | None]) -> None:
        self.replies = replies
        self.prompts: list[str] = []

    def generate(self, prompts: list[str], codec: ActionCodec) -> list[str | None]:
        self.prompts = list(prompts)
        return self.replies[: len(prompts)]


def test_box_schema_carries_bounds_and_length() -> None:
    schema = ActionCodec(BOX, LLMConfig()).json_schema()
    action = schema["properties"]["action"]
    assert action["minItems"] == action["maxItems"] == 2
    assert [i["minimum"] for i in action["prefixItems"]] == [-1.0, -0.5]
    assert [i["maximum"] for i in action["prefixItems"]] == [1.0, 2.0]
    assert schema["required"] == ["action"]
    json.dumps(schema)  # serialisable for the HTTP body


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty reply"),
        (None, "empty reply"),
        ("   ", "empty reply"),
        ('{"action": [0.1, ', "not JSON"),
        ("move left", "not JSON"),
        ('{"act": 3}', "no 'action' list"),
        ('{"action": [0.1]}', "has 1 numbers"),
        ('{"action": [0.1, "x"]}', "non-numbers"),
        ('{"action": [0.1, NaN]}', "NaN or infinity"),
        ('{"action": [1.5, 0.0]}', "action[0]=1.5 is outside the bounds [-1, 1]"),
        ('{"action": [0.0, -0.6]}', "action[1]=-0.6 is outside"),
    ],
)
def test_box_invalid_replies_have_reasons(text: str | None, reason: str) -> None:
    action, why = ActionCodec(BOX, LLMConfig()).parse(text)
    assert action is None
    assert reason in why


def test_box_valid_reply_parses_to_space_dtype() -> None:
    action, why = ActionCodec(BOX, LLMConfig()).parse(' {"action":[-1.0, 2]} ')
    assert why == ""
    assert action.dtype == np.float32 and BOX.contains(action)
    np.testing.assert_allclose(action, [-1.0, 2.0])


def test_discrete_choices_and_invalid() -> None:
    codec = ActionCodec(gym.spaces.Discrete(3, start=-1), LLMConfig())
    assert codec.choices == ["-1", "0", "1"]
    assert int(codec.parse("1")[0]) == 1
    for bad in ("2", "left", "", None):
        action, why = codec.parse(bad)
        assert action is None and why


def test_fallbacks_are_in_the_space() -> None:
    assert np.allclose(ActionCodec(BOX, LLMConfig()).fallback(), [0.0, 0.75])
    zeros = ActionCodec(BOX, LLMConfig(fallback="zeros")).fallback()
    assert np.allclose(zeros, [0.0, 0.0]) and BOX.contains(zeros)
    assert int(ActionCodec(DISC, LLMConfig(fallback_index=2)).fallback()) == 2
    assert int(ActionCodec(DISC, LLMConfig(fallback_index=7)).fallback()) == 0


def test_unsupported_action_space_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Box and Discrete"):
        ActionCodec(gym.spaces.MultiBinary(3), LLMConfig())


def test_policy_holds_on_invalid_replies_by_default(caplog: pytest.LogCaptureFixture) -> None:
    """An invalid reply is no command: all NaN, which the robot safety layer holds on."""
    replies = ['{"action": [0.5, 1.0]}', "", "{oops"]
    policy = LLMPolicy(OBS, BOX, LLMConfig(), backend=Replies(replies))
    with caplog.at_level(logging.WARNING, logger="roborl.llm"):
        actions = policy.act(np.zeros((3, 4)))
    np.testing.assert_allclose(actions[0], [0.5, 1.0])
    assert np.isnan(actions[1:]).all()
    assert policy.n_invalid == 2 and policy.metrics()["llm/invalid_rate"] == pytest.approx(2 / 3)
    assert sum("rejected" in r.message and "holding" in r.message for r in caplog.records) == 2
    # a discrete space has no NaN: its hold is llm.fallback_index
    disc = LLMPolicy(OBS, DISC, LLMConfig(fallback_index=2), backend=Replies(["9"]))
    assert int(disc.act(np.zeros(4))) == 2 and disc.n_invalid == 1


def test_safety_layer_turns_the_hold_into_its_hold_command() -> None:
    """What deploy/RobotEnv do with the policy's hold: the hold command, counted nonfinite."""
    from roborl.robots.env.safety import SafetyConfig, SafetyLayer

    policy = LLMPolicy(OBS, BOX, LLMConfig(), backend=Replies(["nope"]))
    layer = SafetyLayer(SafetyConfig(low=[-1.0, -0.5], high=[1.0, 2.0]))
    decision = layer.filter(policy.act(np.zeros(4)), state_age_s=0.0)
    assert decision is not None and decision.held
    np.testing.assert_array_equal(decision.command, layer.hold_command())
    assert layer.interventions["nonfinite"] == 1


def test_policy_falls_back_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    replies = ['{"action": [0.5, 1.0]}', "", '{"action": [9, 0]}', "{oops"]
    cfg = LLMConfig(on_invalid="fallback")
    policy = LLMPolicy(OBS, BOX, cfg, backend=Replies(replies))
    with caplog.at_level(logging.WARNING, logger="roborl.llm"):
        actions = policy.act(np.zeros((4, 4)))
    assert actions.shape == (4, 2) and all(BOX.contains(a) for a in actions)
    np.testing.assert_allclose(actions[0], [0.5, 1.0])
    for i in (1, 2, 3):
        np.testing.assert_allclose(actions[i], [0.0, 0.75])  # the centre fallback
    assert policy.metrics()["llm/invalid_rate"] == pytest.approx(0.75)
    assert policy.last_reasons[0] == ""
    assert "empty reply" in policy.last_reasons[1]
    assert "outside the bounds" in policy.last_reasons[2]
    assert "not JSON" in policy.last_reasons[3]
    assert sum("rejected" in r.message for r in caplog.records) == 3


def test_single_observation_gives_one_action() -> None:
    backend = Replies(["1"])
    policy = LLMPolicy(OBS, DISC, LLMConfig(), backend=backend)
    action = policy.act(np.array([0.1, 0.2, 0.3, 0.4]))
    assert action.shape == () and int(action) == 1
    assert len(backend.prompts) == 1 and "0.100" in backend.prompts[0]
    # a vectorised env with one sub-env is a batch of one, not a single observation
    assert policy.act(np.zeros((1, 4))).shape == (1,)
    with pytest.raises(ConfigError, match="matches neither"):
        policy.act(np.zeros((2, 2, 4)))


def test_single_observation_through_evaluate() -> None:
    """The eval loop passes one unbatched observation per step (the Policy contract)."""
    from roborl.core.evaluate import evaluate

    env = gym.make("CartPole-v1")
    policy = LLMPolicy(env.observation_space, env.action_space, LLMConfig(), backend=Replies(["0"]))
    result = evaluate(policy.act, env, episodes=1, seed=0, reset_policy=policy.reset)
    env.close()
    assert result["length_mean"] >= 5
    assert policy.metrics()["llm/invalid_rate"] == 0.0


def test_history_is_per_env_row() -> None:
    backend = Replies(["0", "1"])
    policy = LLMPolicy(OBS, DISC, LLMConfig(history=2), backend=backend)
    policy.act(np.array([[1.0, 0, 0, 0], [2.0, 0, 0, 0]]))
    policy.act(np.zeros((2, 4)))
    assert "obs [1.000" in backend.prompts[0] and "obs [2.000" not in backend.prompts[0]
    assert "obs [2.000" in backend.prompts[1] and "-> action [1" in backend.prompts[1]
    policy.reset()
    policy.act(np.zeros((2, 4)))
    assert "Previous steps" not in backend.prompts[0]


def test_renderer_names_fields_and_rejects_bad_templates() -> None:
    cfg = LLMConfig(instruction="Balance the pole.")
    codec = ActionCodec(DISC, cfg)
    text = PromptRenderer(OBS, codec, cfg, field_names=["x", "v", "theta", "omega"]).render(
        np.array([0.1, 0.2, 0.3, 0.4])
    )
    assert "theta = 0.300" in text and "Balance the pole." in text and "{0, 1, 2}" in text
    bad = LLMConfig(prompt_template="{observation} {unknown}")
    with pytest.raises(ConfigError, match="prompt_template"):
        PromptRenderer(OBS, codec, bad).render(np.zeros(4))


@pytest.mark.parametrize(
    ("prefix", "lo", "hi", "chars", "can_end"),
    [
        ("", -3.0, 3.0, ["-", "0", "1", "2", "3"], False),
        ("3", -3.0, 3.0, ["."], True),
        ("3.", -3.0, 3.0, ["0"], False),
        ("0", 0.2, 0.3, ["."], False),
        ("0.", 0.2, 0.3, ["2", "3"], False),
        ("0.25", 0.2, 0.3, ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"], True),
        ("0.255", 0.2, 0.3, [], True),  # llm.decimals=3 reached
        ("1", 10.0, 400.0, list("0123456789"), False),
    ],
)
def test_transformers_number_mask(
    prefix: str, lo: float, hi: float, chars: list[str], can_end: bool
) -> None:
    """The transformers backend's Box decoding can only write numbers that end within bounds."""
    from roborl.plugins.llm.backends import number_options

    assert number_options(prefix, lo, hi, 3) == (chars, can_end)


def test_eval_without_checkpoint_needs_a_checkpoint_free_algo() -> None:
    """`roborl eval algo=sac env=...` (no checkpoint) is a clear error, not a random policy."""

    proc = run_roborl(["eval", "algo=sac", "env=inverted_pendulum"], timeout=120)
    assert proc.returncode != 0
    assert "needs checkpoint=PATH" in proc.stderr and "algo=llm" in proc.stderr
