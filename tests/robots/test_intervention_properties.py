"""Property tests of the intervention path (HIL-SERL's human takeover): a person's teleop
message (sensor_msgs/Joy or geometry_msgs/Twist, any values: NaN, inf, huge, too few axes)
replaces the policy's action, and for any valid config and any sequence of policy actions,
teleop messages, silences, stops and enables:

- the teleop reports a command exactly while the person intervenes (the dead-man button, or a
  mapped axis beyond the deadzone) with fresh input, and that command is the mapped axes times
  `scale`; a message it cannot read changes nothing;
- a person's command goes through the same checks, clamp and rate limit as a policy's: a twin
  safety layer fed the person's command *as the policy's action* sends the very same commands
  (no bypass), and `Decision.human` is set exactly when a person's command went out;
- every command sent is finite; a non-hold command lies inside the limits and within
  `max_delta` of the previous command sent; after a stop only holds go out until `enable`;
- on the robot env, what goes on the wire is the command a model of the safety layer expects,
  `info["executed_action"]` is that command and `info["intervened"]` is set exactly on the
  steps where a person's command went out; the robot collector stores the same action and
  flag for the learner.

"Intervened" means "the robot executed the person's command": a step where a person's command
was refused (NaN, inf) went out as a hold and is not flagged, so a hold never lands in the
demo buffer as a person's demonstration.

The env-level tests drive the real `RobotEnv`, `Ros2Driver`, `Teleop` and `RobotCollector`
over an in-memory transport (`tests/memory_robot.py`): no ROS traffic, messages delivered in
order at a chosen step.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from memory_robot import MemoryTransport, expected_command, person, robot_configs

from roborl.core.envs import SharedEnv
from roborl.core.errors import RobotError
from roborl.robots.env import intervention
from roborl.robots.env.driver import Ros2Driver
from roborl.robots.env.intervention import TWIST_FIELDS, InterventionConfig, Teleop
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.env.safety import SafetyConfig, SafetyLayer
from roborl.robots.training.collector import RobotCollector
from roborl.robots.transport import msgs

finite = st.floats(-5.0, 5.0, allow_nan=False)
wild = st.one_of(finite, st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300]))
TIMEOUT_S = 0.5
# No shrinking where each example opens a robot env: an unshrunk failing sequence is readable,
# and a failing run ends well inside the per-test timeout.
ENV_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


# -- strategies ------------------------------------------------------------------------------


@st.composite
def teleop_raw(draw, n: int, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """A valid `robot.intervention` block for `n` action dimensions."""
    kind = draw(st.sampled_from(["joy", "twist"]))
    if kind == "joy":
        axes: list[Any] = [draw(st.integers(0, 3)) for _ in range(n)]
        button = draw(st.one_of(st.none(), st.integers(0, 2)))
    else:
        axes, button = [draw(st.sampled_from(TWIST_FIELDS)) for _ in range(n)], None
    scale = draw(st.one_of(finite, st.lists(finite, min_size=n, max_size=n)))
    deadzone = draw(st.floats(0.0, 0.5))
    return {
        "type": kind, "axes": axes, "scale": scale, "button": button, "deadzone": deadzone,
        "timeout_s": timeout_s,
    }  # fmt: skip


def teleop_messages(kind: str):
    """Any message of the teleop's type: Joy with 0-5 axes (too few are refused) and 0-3
    buttons, Twist with any six values."""
    if kind == "joy":
        return st.builds(
            msgs.Joy,
            axes=st.lists(wild, max_size=5),
            buttons=st.lists(st.integers(0, 1), max_size=3),
        )
    vec = st.builds(msgs.Vector3, wild, wild, wild)
    return st.builds(msgs.Twist, linear=vec, angular=vec)


@st.composite
def safety_configs(draw, n: int) -> SafetyConfig:
    low = [draw(st.floats(-3.0, 0.0)) for _ in range(n)]
    high = [lo + draw(st.floats(0.1, 3.0)) for lo in low]
    max_delta = draw(st.one_of(st.none(), st.floats(0.01, 1.0)))
    hold = draw(st.sampled_from(["zero", "position"]))
    if hold == "zero":  # a velocity/effort range holds 0 (SafetyConfig refuses one that does not)
        high = [max(hi, draw(st.floats(0.0, 3.0))) for hi in high]
    return SafetyConfig(low=low, high=high, max_delta=max_delta, hold=hold)


# -- the teleop and the safety layer ---------------------------------------------------------


def tick_events(n: int, kind: str):
    act = st.tuples(
        st.just("tick"),
        st.lists(wild, min_size=n, max_size=n),
        st.one_of(st.none(), teleop_messages(kind), teleop_messages(kind)),
    )
    return st.lists(
        st.one_of(
            act,
            act,
            act,
            act,
            st.tuples(st.just("wait"), st.sampled_from([0.1, 0.3, 0.6, 5.0])),
            st.sampled_from([("estop",), ("clear",), ("enable",), ("disable",)]),
        ),
        max_size=30,
    )


@settings(max_examples=250, deadline=None)
@given(data=st.data())
def test_a_person_s_command_passes_the_same_checks_as_the_policy_s(data) -> None:
    """The intervention path through the real `Teleop` and `SafetyLayer`, against a twin
    layer fed the person's command as a policy action: equal outputs prove no bypass."""
    n = data.draw(st.integers(1, 3))
    config = InterventionConfig.parse(data.draw(teleop_raw(n)), n)
    safety_config = data.draw(safety_configs(n))
    arm = np.asarray(data.draw(st.lists(finite, min_size=n, max_size=n)))  # may be outside
    check_teleop_sequence(config, safety_config, arm, data.draw(tick_events(n, config.type)))


def _layer(config: SafetyConfig, arm: np.ndarray, sent: list) -> SafetyLayer:
    """A layer as RobotEnv sets one up, whose output appends (kind, command) to `sent`: the
    kind is "hold" unless the test marks a non-held decision as a "command"."""
    layer = SafetyLayer(SafetyConfig(**vars(config)))
    layer.bind_measurement(lambda: (arm.copy(), 0.0))
    if config.hold == "position":
        layer.set_last(arm)  # what RobotEnv does at connect
    kind = ["hold"]
    layer.bind_output(lambda c: sent.append((kind[0], np.array(c, dtype=np.float64))))
    layer.kind = kind  # type: ignore[attr-defined]
    layer.enable()
    return layer


def _emit(layer: SafetyLayer, decision: Any) -> bool:
    layer.kind[0] = "hold" if decision.held else "command"  # type: ignore[attr-defined]
    try:
        return layer.emit(decision.command)
    finally:
        layer.kind[0] = "hold"  # type: ignore[attr-defined]


def check_teleop_sequence(
    config: InterventionConfig, safety_config: SafetyConfig, arm: np.ndarray, events: list
) -> None:
    now = [100.0]
    fake_time = SimpleNamespace(monotonic=lambda: now[0])
    sent: list[tuple[str, np.ndarray]] = []
    twin_sent: list[tuple[str, np.ndarray]] = []
    safety = _layer(safety_config, arm, sent)
    twin = _layer(safety_config, arm, twin_sent)
    low, high, d = safety.low, safety.high, safety_config.max_delta
    reference = arm.copy() if safety_config.hold == "position" else safety.hold_command()
    stopped, humans = False, 0
    latest: tuple[np.ndarray, bool] | None = None  # the newest usable message, as modelled
    heard_at = -np.inf
    with mock.patch.object(intervention, "time", fake_time), np.errstate(all="ignore"):
        teleop = Teleop(config)
        for event in events:
            before = len(sent)
            name = event[0]
            if name == "tick":
                msg = event[2]
                if msg is not None:
                    teleop.on_message(msg)
                    decoded = person(config, msg)
                    if decoded is not None:
                        latest, heard_at = decoded, now[0]
                human = teleop.command()
                fresh = now[0] - heard_at <= config.timeout_s
                if latest is None or not latest[1] or not fresh:
                    assert human is None, (human, latest)
                else:
                    assert human is not None
                    np.testing.assert_array_equal(human, latest[0])
                policy = np.asarray(event[1])
                decision = safety.filter(policy, 0.0, human=human)
                twin_decision = twin.filter(policy if human is None else human, 0.0)
                if decision is None:
                    assert twin_decision is None and safety.estopped
                    continue
                humans += human is not None
                assert twin_decision is not None
                assert decision.held == twin_decision.held
                np.testing.assert_array_equal(decision.command, twin_decision.command)
                assert decision.human == (human is not None and not decision.held)
                assert _emit(safety, decision) == _emit(twin, twin_decision)
            elif name == "wait":
                now[0] += event[1]
            elif name in ("estop", "clear", "disable"):
                for layer in (safety, twin):
                    if name == "estop":
                        layer.trigger_estop("test")
                    elif name == "clear":
                        layer.reset_estop()
                    else:
                        layer.disable("test")
                stopped = True
            elif not safety.estopped:  # enable
                safety.enable()
                twin.enable()
                stopped = False
                if safety_config.hold == "position":
                    reference = arm.copy()  # enable re-syncs to where the arm stands
            for kind, command in sent[before:]:
                assert np.all(np.isfinite(command)), command
                if kind == "command":
                    assert not stopped, "a command followed a stop before enable"
                    assert np.all(command >= low) and np.all(command <= high), command
                    if d is not None:
                        assert np.all(np.abs(command - reference) <= d + 1e-9), (
                            command,
                            reference,
                        )
                else:
                    np.testing.assert_array_equal(command, safety.hold_command())
                reference = command.copy()
    assert [k for k, _ in sent] == [k for k, _ in twin_sent]
    for (_, ours), (_, theirs) in zip(sent, twin_sent):
        np.testing.assert_array_equal(ours, theirs)
    assert safety.interventions["human"] == humans


# -- the robot env and the collector ---------------------------------------------------------


@st.composite
def robot_setups(draw, timeout_s: float = 1e6) -> dict[str, Any]:
    """A robot config with an intervention block (any interface, with and without
    `max_delta`, an arm that may stand outside the limits) and the arm's position."""
    cfg, arm = draw(
        robot_configs(
            st.just(1000),
            lambda n: teleop_raw(n, timeout_s).map(lambda t: {**t, "topic": "/teleop"}),
        )
    )
    return {"cfg": cfg, "arm": arm}


def robot_events(n: int, kind: str):
    policy = st.one_of(
        st.lists(wild, min_size=n, max_size=n),
        st.lists(wild, min_size=n, max_size=n),
        st.lists(finite, min_size=n + 1, max_size=n + 1),  # the wrong shape: a hold
    )
    step = st.tuples(st.just("step"), policy, st.one_of(st.none(), teleop_messages(kind)))
    return st.lists(
        st.one_of(step, step, step, step, st.sampled_from([("estop",), ("clear",), ("activate",)])),
        max_size=25,
    )


def _open(cfg: dict, arm: list[float]) -> tuple[RobotEnv, MemoryTransport]:
    transport = MemoryTransport(cfg["joints"], arm)
    env = RobotEnv(cfg, driver=Ros2Driver(cfg, transport=transport))
    return env, transport


def _model_step(env: RobotEnv, policy: Any, prev: np.ndarray, latest: Any) -> tuple:
    """(command, held, intervened) the docs promise for one step."""
    active = latest is not None and latest[1]
    chosen = latest[0] if active else policy
    s = env.safety
    command, held = expected_command(
        chosen, prev, s.hold_command(), s.low, s.high, s.config.max_delta
    )
    return command, held, bool(active and not held)


def _hold_value(cfg: dict, arm: list[float]) -> np.ndarray:
    low, high = np.asarray(cfg["safety"]["low"]), np.asarray(cfg["safety"]["high"])
    if cfg["command"]["interface_name"] == "position":
        return np.asarray(arm, dtype=np.float64)
    return np.clip(np.zeros_like(low), low, high)


@settings(max_examples=40, deadline=None, phases=ENV_PHASES)
@given(data=st.data())
def test_the_robot_env_sends_and_reports_what_the_safety_layer_allows(data) -> None:
    """`RobotEnv.step` with a teleop: the wire carries the expected command, the step's info
    reports it as executed and flags exactly the person's steps; after an e-stop (over the
    e-stop topic) or a clear, only holds reach the robot until `activate`."""
    setup = data.draw(robot_setups())
    cfg, arm = setup["cfg"], setup["arm"]
    events = data.draw(robot_events(len(cfg["joints"]), cfg["intervention"]["type"]))
    check_robot_sequence(cfg, arm, events)


def test_a_pinned_takeover_is_clamped_held_and_stopped() -> None:
    """A person past the limit (clamped, rate-limited), a NaN from the gamepad (a hold, not
    flagged), the release, an e-stop and a clear (only holds), then activate."""
    check_robot_sequence(*_pinned_robot())


def _pinned_robot() -> tuple[dict, list[float], list]:
    cfg = {
        "name": "ros2", "transport": "dds", "joints": ["a"],
        "command": {"controller": "ctl", "joints": ["a"], "interface_name": "velocity"},
        "safety": {"low": [-1.0], "high": [1.0], "max_delta": 0.3,
                   "max_state_age_s": 1e6, "max_policy_time_s": 1e6},
        "rate_hz": 1000.0, "max_episode_steps": 1000, "connect_timeout_s": 30.0,
        "reset": {"mode": "wait", "wait_s": 0.0},
        "intervention": {"topic": "/teleop", "type": "joy", "axes": [0], "button": 0,
                         "timeout_s": 1e6},
    }  # fmt: skip
    joy = msgs.Joy
    events = [
        ("step", [0.1], joy(axes=[5.0], buttons=[1])),  # a person past the limit: 0.3
        ("step", [0.1], None),  # still held down: 0.6
        ("step", [0.1], joy(axes=[float("nan")], buttons=[1])),  # NaN: a hold, not flagged
        ("step", [0.9], joy(axes=[0.0], buttons=[0])),  # released: the policy, from 0 by 0.3
        ("estop",),
        ("step", [0.9], joy(axes=[1.0], buttons=[1])),  # refused: e-stop latched
        ("clear",),
        ("step", [0.9], None),  # refused: cleared, not activated
        ("activate",),
        ("step", [0.9], None),  # the person again, from the hold
    ]
    return cfg, [0.0], events


def check_robot_sequence(cfg: dict, arm: list[float], events: list) -> None:
    env, transport = _open(cfg, arm)
    config = env.teleop.config
    send_teleop = transport.callbacks["/teleop"]
    hold = _hold_value(cfg, arm)
    low, high = env.safety.low, env.safety.high
    d = cfg["safety"]["max_delta"]
    latest: tuple[np.ndarray, bool] | None = None
    stopped = False
    try:
        with np.errstate(all="ignore"):
            env.reset()
            assert transport.commands, "reset sends the hold"
            prev = transport.commands[-1].copy()  # what the rate limit starts from
            for event in events:
                before = len(transport.commands)
                name = event[0]
                if name == "step":
                    if event[2] is not None:
                        send_teleop(event[2])
                        decoded = person(config, event[2])
                        latest = decoded if decoded is not None else latest
                    if stopped:
                        try:
                            env.step(np.asarray(event[1]))
                        except RobotError:
                            pass
                        else:
                            raise AssertionError("a step after a stop went through")
                    else:
                        command, held, intervened = _model_step(env, event[1], prev, latest)
                        _, _, _, _, info = env.step(np.asarray(event[1]))
                        np.testing.assert_array_equal(transport.commands[-1], command)
                        assert info["executed_action"].dtype == np.float32
                        np.testing.assert_array_equal(
                            info["executed_action"], command.astype(np.float32)
                        )
                        assert info["held"] == held
                        assert info["intervened"] == intervened
                        if not held:
                            assert np.all(command >= low) and np.all(command <= high)
                            if d is not None:
                                assert np.all(np.abs(command - prev) <= d + 1e-9)
                elif name == "estop":
                    transport.callbacks["/estop"](msgs.Bool(data=True))
                    stopped = True
                elif name == "clear":
                    env.reset_estop()
                    stopped = True
                elif not env.safety.estopped:  # activate
                    env.activate()
                    stopped = False
                new = transport.commands[before:]
                assert all(np.all(np.isfinite(c)) for c in new), new
                if stopped:  # nothing but holds after a stop, until activate
                    assert all(np.array_equal(c, hold) for c in new), (new, hold)
                if new:
                    prev = new[-1].copy()
                if name == "activate" and env.safety.config.hold == "position":
                    prev = hold.copy()  # activate re-syncs to where the arm stands
    finally:
        env.close()
    assert np.array_equal(transport.commands[-1], hold)  # the final stop


class Recorded(SharedEnv):
    """The run's shared robot env, noting per step the command on the wire before and after
    (the collector only sees `info`; the test checks it against the wire)."""

    def __init__(self, env: gym.Env, transport: MemoryTransport) -> None:
        super().__init__(env)
        self.transport = transport
        self.before: list[np.ndarray] = []
        self.after: list[np.ndarray] = []

    def step(self, action: Any) -> Any:
        self.before.append(self.transport.commands[-1].copy())
        out = super().step(action)
        self.after.append(self.transport.commands[-1].copy())
        return out


@settings(max_examples=25, deadline=None, phases=ENV_PHASES)
@given(data=st.data())
def test_the_collector_stores_what_was_sent_and_who_sent_it(data) -> None:
    """The learner's transitions (`RobotCollector`, as `train robot=` runs it): each stored
    action is the command that went on the wire, not the policy's proposal, and
    `extras["intervened"]` is set exactly on the steps that sent a person's command."""
    setup = data.draw(robot_setups())
    cfg, arm = setup["cfg"], setup["arm"]
    n = len(cfg["joints"])
    kind = cfg["intervention"]["type"]
    script = data.draw(
        st.lists(
            st.tuples(st.lists(wild, min_size=n, max_size=n), st.one_of(st.none(), teleop_messages(kind))),
            min_size=1,
            max_size=15,
        )
    )  # fmt: skip
    cfg["max_episode_steps"] = len(script)
    robot, transport = _open(cfg, arm)
    env = Recorded(robot, transport)
    send_teleop = transport.callbacks["/teleop"]
    latest: list[Any] = [None]
    flags: list[bool] = []
    commands: list[np.ndarray] = []
    steps = iter(script)

    def act(obs: Any, deterministic: bool) -> np.ndarray:
        policy, msg = next(steps)
        if msg is not None:
            send_teleop(msg)
            decoded = person(robot.teleop.config, msg)
            latest[0] = decoded if decoded is not None else latest[0]
        prev = transport.commands[-1].copy()
        command, _, intervened = _model_step(robot, policy, prev, latest[0])
        commands.append(command)
        flags.append(intervened)
        return np.asarray([policy])

    ctx = SimpleNamespace(
        robot_env=env, run=SimpleNamespace(seed=0, total_steps=10**6), step=0,
        np_rng=np.random.default_rng(0),
    )  # fmt: skip
    collector = RobotCollector(ctx)  # type: ignore[arg-type]
    try:
        with np.errstate(all="ignore"):
            collector.start(None)  # type: ignore[arg-type]
            chunk = collector.collect(SimpleNamespace(act=act), random=False)  # type: ignore[arg-type]
    finally:
        env.release()
    assert len(chunk) == len(script)
    assert chunk.actions.dtype == np.float32
    np.testing.assert_array_equal(chunk.actions, np.asarray(env.after).astype(np.float32))
    np.testing.assert_array_equal(chunk.actions, np.asarray(commands).astype(np.float32))
    assert chunk.extras["intervened"].tolist() == flags
    rate = collector.metrics()["robot/intervention_rate"]
    assert rate == sum(flags) / len(script)
