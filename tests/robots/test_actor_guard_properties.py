"""Property tests of the actor's command guard (`roborl actor`, `collector=actor_learner`):
what stands between the learner's messages and the robot is the actor's weight check (kind,
parse, NaN/inf, names and shapes) and the robot env's safety layer. For any sequence of learner
messages (finite weights of any magnitude, weights holding NaN or inf, weights of the wrong
shape or with missing tensors, garbage bytes, unknown kinds, three-frame messages,
heartbeats), any policy output (NaN, inf, huge, the wrong length, no batch axis) and any
teleop input, the real `Actor` loop over a real `RobotEnv`:

- sends only finite commands; every command a step sends is either inside the limits and
  within `max_delta` of the previous command sent, or the hold;
- never acts with weights holding NaN/inf (counted as `rejected_weights`, its version stays),
  counts every malformed message, and loads exactly the newest well-formed finite weights of
  each drain whose version differs from its own;
- ends every run in a hold, whether it stops in order, on weights that do not fit its
  algorithm (a `RobotError` naming them) or on a policy output it cannot index: after the
  last command a step sent, only holds reach the robot;
- streams to the learner, for each step, the command that went on the wire (never the
  policy's proposal) and `intervened` exactly on the steps that sent a person's command.

Everything runs in this process: the actor's sockets are replaced by an in-memory inbox and
outbox (the guard is the code that reads them), the robot is `tests/memory_robot.py`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import zmq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from memory_robot import MemoryTransport, expected_command, person, robot_configs

from roborl.core.errors import RobotError
from roborl.robots.env.driver import Ros2Driver
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.nodes.processes import free_port_pair
from roborl.robots.training.actor_learner import wire
from roborl.robots.training.actor_learner.actor_loop import Actor
from roborl.robots.transport import msgs

finite = st.floats(-5.0, 5.0, allow_nan=False)
wild = st.one_of(finite, st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300]))
ALGO = {"name": "sac", "hidden_sizes": [8, 8]}
# No shrinking for these: each example builds an actor and a robot; an unshrunk failing
# sequence of a few ticks is readable, and the run ends well inside the per-test timeout.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


class Inbox:
    """The actor's SUB socket: frames the test queued, then `zmq.Again` (nothing waiting)."""

    def __init__(self) -> None:
        self.messages: deque[list[bytes]] = deque()

    def recv_multipart(self, flags: int = 0) -> list[bytes]:
        if not self.messages:
            raise zmq.Again()
        return self.messages.popleft()

    def poll(self, timeout: int = 0) -> int:
        return int(bool(self.messages))

    def close(self, linger: int = 0) -> None:
        pass


class Outbox:
    """The actor's PUSH socket: keeps every message the actor sends to the learner."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
        self.sent.append([bytes(f) for f in frames])

    def close(self, linger: int = 0) -> None:
        pass


# -- strategies ------------------------------------------------------------------------------

# Weights that do not fit end the run: rarer, so that most runs go on to act.
WEIGHTS = ("good",) * 4 + ("huge",) * 2 + ("nan", "inf", "garbage", "shape", "missing")
OTHER = ("heartbeat", "unknown_kind", "three_frames")


def learner_messages():
    """One message spec: weights of some kind and version, or another frame."""
    weights = st.tuples(st.sampled_from(WEIGHTS), st.integers(0, 3), st.floats(-2.0, 2.0))
    other = st.tuples(st.sampled_from(OTHER), st.just(0), st.just(0.0))
    return st.one_of(weights, other)


@st.composite
def setups(draw) -> dict[str, Any]:
    joy_block = {"topic": "/joy", "type": "joy", "button": 0, "timeout_s": 1e6}
    robot, arm = draw(
        robot_configs(st.integers(2, 6), lambda n: st.just({**joy_block, "axes": list(range(n))}))
    )
    n = len(robot["joints"])
    policy = st.one_of(
        st.none(),
        st.none(),  # the real policy, with whatever weights it holds
        st.lists(wild, min_size=n, max_size=n).map(lambda v: np.asarray([v])),
        st.lists(finite, min_size=n + 1, max_size=n + 1).map(lambda v: np.asarray([v])),
        st.just(np.asarray(0.5)),  # no batch axis: the loop cannot index it and ends
    )
    joy = st.one_of(
        st.none(),
        st.builds(
            msgs.Joy,
            axes=st.lists(wild, min_size=n, max_size=n),
            buttons=st.lists(st.integers(0, 1), min_size=1, max_size=1),
        ),
    )
    ticks = st.lists(
        st.tuples(st.lists(learner_messages(), max_size=3), policy, joy), min_size=1, max_size=14
    )
    return {"robot": robot, "arm": arm, "ticks": draw(ticks)}


# -- the model of the guard ------------------------------------------------------------------


def build_message(spec: tuple, template: dict[str, torch.Tensor]) -> tuple[list[bytes], Any]:
    """(frames, what the actor must make of them): for weights ("load", version, tensors),
    ("reject",), ("garbage",) or ("fatal", version); else ("heard",) or ("malformed",)."""
    kind, version, exponent = spec
    if kind == "heartbeat":
        return [wire.HEARTBEAT, wire.encode_heartbeat(0)], ("heard",)
    if kind == "unknown_kind":
        return [b"orders", wire.encode_heartbeat(0)], ("malformed",)
    if kind == "three_frames":
        return [wire.WEIGHTS, b"", b""], ("malformed",)
    if kind == "garbage":
        return [wire.WEIGHTS, b"\x08\x00\x00\x00\x00\x00\x00\x00{not json"], ("garbage",)
    tensors = {k: v.clone() for k, v in template.items()}
    first = next(k for k, v in tensors.items() if v.is_floating_point())
    if kind in ("good", "huge"):
        factor = 10.0 ** (exponent * (20 if kind == "huge" else 1))
        tensors = {k: v * factor if v.is_floating_point() else v for k, v in tensors.items()}
    elif kind in ("nan", "inf"):
        tensors[first].view(-1)[version % tensors[first].numel()] = float(kind)
    elif kind == "shape":
        tensors[first] = torch.zeros((*tensors[first].shape, 1))
    elif kind == "missing":
        del tensors[first]
    frames = [wire.WEIGHTS, wire.encode_weights(tensors, version)]
    if kind in ("shape", "missing"):
        return frames, ("fatal", version)
    finite_all = all(bool(torch.isfinite(v).all()) for v in tensors.values())
    return frames, (("load", version, tensors) if finite_all else ("reject",))


class Model:
    """What the actor's counters and version must read after each drain of its inbox."""

    def __init__(self) -> None:
        self.version = -1
        self.loaded: dict[str, torch.Tensor] | None = None
        self.counts = {"weight_loads": 0, "rejected_weights": 0, "dropped_malformed": 0}
        self.fatal = False
        self.pending: list[tuple[list[bytes], Any]] = []  # queued, not yet read by the actor

    def queue(self, outcomes: list[tuple[list[bytes], Any]]) -> None:
        self.pending.extend(outcomes)

    def drain(self) -> None:
        """The actor read its inbox (one read takes everything queued)."""
        outcomes, self.pending = self.pending, []
        newest = None
        for frames, outcome in outcomes:
            if len(frames) != 2 or frames[0] not in wire.LEARNER_KINDS:
                self.counts["dropped_malformed"] += 1
            elif frames[0] == wire.WEIGHTS:
                newest = outcome
        if newest is None:
            return
        if newest[0] == "garbage":
            self.counts["dropped_malformed"] += 1
        elif newest[0] == "reject":
            self.counts["rejected_weights"] += 1
        elif newest[1] == self.version:
            return  # the weights it acts with already: not even read
        elif newest[0] == "fatal":
            self.fatal = True
        else:
            self.version, self.loaded = newest[1], newest[2]
            self.counts["weight_loads"] += 1


class Scripted(gym.Wrapper):
    """The actor's robot env: before each step it notes the command on the wire and checks
    the actor's weights against the model; after it, it records what the step sent, then
    queues the next tick's learner messages and teleop input (or stops the actor)."""

    def __init__(self, env: RobotEnv, transport: MemoryTransport, setup: dict) -> None:
        super().__init__(env)
        self.transport = transport
        self.setup = setup
        self.tick = 0
        self.actor: Actor | None = None
        self.inbox = Inbox()
        self.model = Model()
        self.template: dict[str, torch.Tensor] = {}
        self.steps: list[dict[str, Any]] = []  # per step: prev, command, index, held, flag
        self.latest: Any = None

    def deliver(self, tick: int) -> None:
        """Queue tick `tick`'s learner messages and hand its teleop message to the robot."""
        messages, _, joy = self.setup["ticks"][tick]
        outcomes = [build_message(spec, self.template) for spec in messages]
        for frames, _ in outcomes:
            self.inbox.messages.append(frames)
        self.model.queue(outcomes)
        if joy is not None:
            self.transport.callbacks["/joy"](joy)
            decoded = person(self.env.unwrapped.teleop.config, joy)
            self.latest = decoded if decoded is not None else self.latest

    def policy_output(self) -> Any:
        return self.setup["ticks"][self.tick][1]

    def step(self, action: Any) -> Any:
        actor, model = self.actor, self.model
        assert actor is not None
        assert not self.inbox.messages  # the actor reads its inbox before every step
        model.drain()
        assert actor.version == model.version
        for key, count in model.counts.items():
            assert actor.totals[key] == count, (key, actor.totals, model.counts)
        prev = self.transport.commands[-1].copy()
        safety = self.env.unwrapped.safety
        active = self.latest is not None and self.latest[1]
        chosen = self.latest[0] if active else action
        with np.errstate(all="ignore"):
            command, held = expected_command(
                chosen, prev, safety.hold_command(), safety.low, safety.high,
                safety.config.max_delta,
            )  # fmt: skip
        out = super().step(action)
        sent = self.transport.commands[-1].copy()
        np.testing.assert_array_equal(sent, command)
        assert out[4]["held"] == held and out[4]["intervened"] == (active and not held)
        self.steps.append(
            {"prev": prev, "command": sent, "index": len(self.transport.commands) - 1,
             "held": held, "intervened": bool(active and not held)}
        )  # fmt: skip
        self.tick += 1
        if self.tick < len(self.setup["ticks"]):
            self.deliver(self.tick)
        else:
            actor.stop = True
        return out


def make_actor(setup: dict) -> tuple[Actor, Scripted]:
    robot = setup["robot"]
    transport = MemoryTransport(robot["joints"], setup["arm"])
    env = Scripted(RobotEnv(robot, driver=Ros2Driver(robot, transport=transport)), transport, setup)
    cfg = {"robot": robot, "algo": ALGO, "actor_learner": {"learner_timeout_s": 1e6}}
    actor = Actor(cfg, f"127.0.0.1:{free_port_pair()}", 3, "", env=env)
    actor.sub.close(0)
    actor.push.close(0)
    actor.sub, actor.push = env.inbox, Outbox()  # type: ignore[assignment]
    env.actor = actor
    env.template = {k: v.clone() for k, v in wire.policy_tensors(actor.algo.state_dict()).items()}
    real_act = actor.algo.act

    def act(obs: Any, deterministic: bool = False) -> Any:
        scripted = env.policy_output()
        return real_act(obs, deterministic=deterministic) if scripted is None else scripted

    actor.algo.act = act  # type: ignore[method-assign]
    # Heard once before the first reset (the actor waits for its learner), then tick 0's.
    env.inbox.messages.append([wire.HEARTBEAT, wire.encode_heartbeat(0)])
    env.deliver(0)
    return actor, env


def run_actor(setup: dict) -> tuple[Actor, Scripted, BaseException | None]:
    actor, env = make_actor(setup)
    error: BaseException | None = None
    try:
        with np.errstate(all="ignore"):
            actor.run()
    except (RobotError, IndexError) as exc:
        error = exc
    finally:
        actor.close()  # what `roborl actor` does on the way out: the robot holds
    return actor, env, error


def check_run(setup: dict) -> None:
    actor, env, error = run_actor(setup)
    robot = setup["robot"]
    commands = env.transport.commands
    low, high = np.asarray(robot["safety"]["low"]), np.asarray(robot["safety"]["high"])
    if robot["command"]["interface_name"] == "position":
        hold = np.asarray(setup["arm"], dtype=np.float64)
    else:
        hold = np.clip(np.zeros_like(low), low, high)
    d = robot["safety"]["max_delta"]
    assert commands, "the final stop sends the hold"
    assert all(np.all(np.isfinite(c)) for c in commands)
    step_at = {s["index"]: s for s in env.steps}
    for i, command in enumerate(commands):
        s = step_at.get(i)
        if s is None or s["held"]:
            np.testing.assert_array_equal(command, hold)  # resets, stops, the final stop
            continue
        assert np.all(command >= low) and np.all(command <= high), command
        if d is not None:
            assert np.all(np.abs(command - s["prev"]) <= d + 1e-9), (command, s["prev"])
    np.testing.assert_array_equal(commands[-1], hold)
    last = env.steps[-1]["index"] if env.steps else -1
    assert all(np.array_equal(c, hold) for c in commands[last + 1 :])

    model = env.model
    if not env.inbox.messages:  # read before the run ended (or the actor stopped on it)
        model.drain()
    # Ended by weights that do not fit, by an output without a batch axis, or in order.
    if model.fatal:
        assert isinstance(error, RobotError) and "learner weights" in str(error), error
    elif error is not None:
        assert isinstance(error, IndexError), error
    else:
        assert env.tick == len(setup["ticks"])
    for key, count in model.counts.items():
        assert actor.totals[key] == count, (key, actor.totals, model.counts)
    assert actor.version == model.version
    acting = wire.policy_tensors(actor.algo.state_dict())
    assert all(bool(torch.isfinite(v).all()) for v in acting.values() if v.is_floating_point())
    if model.loaded is not None:
        for key, value in model.loaded.items():
            assert torch.equal(acting[key], value), key

    # The learner's transitions: what went on the wire, flagged where a person drove.
    chunks = [
        wire.decode_chunk(frames[1], actor.obs_space, actor.act_space)[0]
        for frames in actor.push.sent  # type: ignore[attr-defined]
        if frames[0] == wire.CHUNK
    ]
    actions = [row for c in chunks for row in c.actions]
    flags = [bool(flag) for c in chunks for flag in c.extras["intervened"]]
    streamed = env.steps[: len(actions)]
    for row, s in zip(actions, streamed):
        np.testing.assert_array_equal(row, s["command"].astype(np.float32))
    assert flags == [s["intervened"] for s in streamed]
    if error is None:  # a run that ended in order streamed every step
        assert len(actions) == len(env.steps)


@settings(
    max_examples=30,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(setup=setups())
def test_no_learner_message_or_policy_output_moves_the_robot_unsafely(setup: dict) -> None:
    """The real actor loop, any learner messages, policy outputs and teleop input: every
    command is finite and inside the safety layer's bounds or the hold, bad weights are never
    acted with, every run ends in a hold, and the learner gets what was sent."""
    check_run(setup)


def _pinned(ticks: list, interface: str = "velocity", max_delta: float | None = 0.2) -> dict:
    robot = {
        "name": "ros2", "transport": "dds", "joints": ["a"],
        "command": {"controller": "ctl", "joints": ["a"], "interface_name": interface},
        "safety": {"low": [-1.0], "high": [1.0], "max_delta": max_delta,
                   "max_state_age_s": 1e6, "max_policy_time_s": 1e6},
        "rate_hz": 1000.0, "max_episode_steps": 4, "connect_timeout_s": 30.0,
        "reset": {"mode": "wait", "wait_s": 0.0},
        "intervention": {"topic": "/joy", "type": "joy", "axes": [0], "button": 0,
                         "timeout_s": 1e6},
    }  # fmt: skip
    return {"robot": robot, "arm": [0.3], "ticks": ticks}


NAN = np.asarray([[np.nan]])
pressed = msgs.Joy(axes=[np.inf], buttons=[1])


@pytest.mark.parametrize(
    "setup",
    [
        # NaN weights, then huge finite ones (outputs at the limits, rate-limited), then NaN
        # and out-of-range outputs, a person's inf: the hold, never the value
        _pinned([([("nan", 1, 0.0)], None, None), ([("huge", 2, 1.5)], None, None),
                 ([], np.asarray([[50.0]]), None), ([], NAN, None), ([], None, pressed),
                 ([("inf", 3, 0.0)], None, None)]),
        # weights that do not fit the algorithm, mid-episode: a RobotError, then only holds
        _pinned([([], np.asarray([[0.9]]), None), ([("shape", 1, 0.0)], None, None),
                 ([], None, None)], interface="position"),
        # an output without a batch axis ends the loop; the robot holds
        _pinned([([], np.asarray([[0.9]]), None), ([], np.asarray(0.5), None)], max_delta=None),
        # garbage, an unknown kind and three frames are dropped; good weights load once
        _pinned([([("garbage", 0, 0.0), ("unknown_kind", 0, 0.0), ("good", 1, 0.0)], None,
                  None), ([("three_frames", 0, 0.0), ("good", 1, 0.3)], None, None)]),
    ],
)  # fmt: skip
def test_pinned_learner_and_policy_faults_end_in_a_hold(setup: dict) -> None:
    """Sequences the property must never miss, each a fault a learner or policy can
    produce."""
    check_run(setup)


def test_the_final_hold_goes_out_when_the_last_weights_do_not_fit(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`roborl actor` reads the weights a learner pushed just before it stopped; weights that
    do not fit raise there, and the hold that follows (`Actor.close`) used to be skipped."""
    import json

    from roborl.robots.training.actor_learner import actor as actor_module

    closed: list[bool] = []

    class LastWeightsDoNotFit:
        totals: dict[str, int] = {}
        env = gym.Env()

        def __init__(self, *args: Any) -> None:
            pass

        def run(self) -> None:
            pass

        def _poll_weights(self) -> None:
            raise RobotError("learner weights do not fit this algorithm")

        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(actor_module, "Actor", LastWeightsDoNotFit)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"config": {"robot": {"name": "ros2"}, "algo": "sac"}}))
    with pytest.raises(RobotError, match="learner weights"):
        actor_module.actor_main([f"config={config}"])
    assert closed == [True]
