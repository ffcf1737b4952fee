"""`roborl scripted-human`: a ROS 2 node that plays the person of human-in-the-loop RL.

HIL-SERL's operator watches the robot and takes over when it heads the wrong way, steers it
back, and lets go. This node does the same with a scripted expert, so the intervention path
(teleop topic -> safety layer -> flagged transitions) runs without hardware or a person:

- it watches the robot's `sensor_msgs/JointState` (for `sim-robot env=tabletop...` that
  topic carries every slide joint of the scene: the gripper `gx`, `gy` and the blocks);
- the expert is found by name (`expert=`, `roborl.hil.experts`; each lives beside its task):
  `tabletop` is RoborlTabletop's own `expert_action()`, evaluated on a copy of the scene whose
  joints are set from those JointStates, its `progress()` the task error (the distance still
  to go); `fetch_push` is Fetch's push expert on the end effector, block and goal that
  `sim-robot env=fetch_push_pixels` publishes, the error being block to goal;
- takeover and release follow `roborl.hil.drift.DriftRule` (no progress over `window_s`;
  back on track, done, or `max_takeover_s`); a new episode (a jump of the scene state larger
  than `reset_jump`) also releases;
- it publishes on the robot config's intervention topic (`robot.intervention`: Joy with the
  dead-man button held while it intervenes and the expert's action on the mapped axes, or a
  Twist or TwistStamped that is non-zero only while it intervenes), inverting the config's
  axis mapping and scale, so the robot env decodes exactly the expert's action.

One JSON line per takeover and release on stdout (`event`: takeover / release), as the other
nodes print theirs.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.hil.drift import DriftRule
from roborl.hil.experts import JointStateExpert, expert_for, expert_names
from roborl.robots.nodes.common import (
    ROS_ARGS_HELP,
    announce,
    command_help,
    compose_options,
    emit_event,
    guard_command,
    stop_on_signals,
)

if TYPE_CHECKING:
    from roborl.robots.env.intervention import InterventionConfig
    from roborl.robots.transport.protocol import Transport

SCRIPTED_HUMAN_CONFIG = "roborl_scripted_human"
EXPERTS = expert_names()  # registered on `import roborl` (roborl/sim/registration.py)


@dataclass
class ScriptedHumanOptions:
    """`roborl scripted-human` options (the `robot` group gives topics and the teleop mapping)."""

    expert: str = field(
        default="tabletop",
        metadata={
            "choices": list(EXPERTS),
            "help": "scripted expert: RoborlTabletop's, or Fetch's push expert "
            "(sim-robot env=fetch_push_pixels)",
        },
    )
    task: int = field(default=0, metadata=rng(0, 5, "RoborlTabletop task index (0: reach red)"))
    rate_hz: float = field(default=20.0, metadata=rng(1e-3, None, "teleop messages per second"))
    tolerance: float = field(
        default=0.055, metadata=rng(0.0, None, "task error counted as done (no takeover)")
    )
    window_s: float = field(
        default=1.0, metadata=rng(1e-3, None, "drift: no progress over this many seconds")
    )
    min_progress: float = field(
        default=0.02, metadata=rng(0.0, None, "drift: error shrank by less than this")
    )
    recover: float = field(
        default=0.05, metadata=rng(0.0, None, "release once the error shrank by this")
    )
    max_takeover_s: float = field(
        default=5.0, metadata=rng(1e-3, None, "release after this long in control")
    )
    reset_jump: float = field(
        default=0.05, metadata=rng(1e-6, None, "a scene jump this large is a new episode")
    )
    state_timeout_s: float = field(
        default=0.5, metadata=rng(1e-3, None, "no JointState this long: stop intervening")
    )
    duration_s: float | None = field(
        default=None, metadata=rng(0.0, None, "stop after this many seconds (null: Ctrl-C)")
    )
    transport: str | None = field(
        default=None,
        metadata={"help": "auto, rclpy or dds (null: the robot config's transport)"},
    )
    node_name: str = field(default="scripted_human", metadata={"help": "ROS 2 node name"})


register_command_config(SCRIPTED_HUMAN_CONFIG, ScriptedHumanOptions, {"robot": "tabletop"})


class TeleopWriter:
    """Builds the teleop message the robot env decodes back into `action` (its inverse)."""

    def __init__(self, config: InterventionConfig) -> None:
        self.config = config

    def message(self, action: np.ndarray, intervening: bool, now: float | None = None) -> Any:
        """`now`: the stamp of a TwistStamped (the node's clock; None: wall time)."""
        from roborl.robots.transport import msgs

        c = self.config
        raw = c.inputs(action)
        if c.type == "joy":
            axes = [0.0] * (max(c.axes) + 1)
            for i, a in enumerate(c.axes):
                axes[a] = float(raw[i]) if intervening or c.button is not None else 0.0
            buttons = [0] * ((c.button or 0) + 1)
            if c.button is not None:
                buttons[c.button] = int(intervening)
            return msgs.Joy(axes=axes, buttons=buttons)
        twist = msgs.Twist()
        if intervening:
            for i, a in enumerate(c.axes):
                part, axis = a.split(".")
                setattr(getattr(twist, part), axis, float(raw[i]))
        if c.type == "twist_stamped":
            stamp = msgs.stamp_now(time.time() if now is None else now)
            return msgs.TwistStamped(header=msgs.Header(stamp=stamp), twist=twist)
        return twist


def scripted_human(argv: list[str]) -> int:
    """`roborl scripted-human [robot=NAME] [task=0] [window_s=1.0] [...] [--ros-args ...]`."""
    from roborl.robots.env.intervention import InterventionConfig
    from roborl.robots.transport import msgs
    from roborl.robots.transport.common import make_transport, split_ros_args

    if any(a in ("-h", "--help") for a in argv):
        print(
            command_help(
                "usage: roborl scripted-human [robot=NAME] [key=value ...] [--ros-args ...]\n\n"
                "Play the person of human-in-the-loop RL: watch /joint_states, take over on\n"
                "the robot config's intervention topic when the robot drifts from the\n"
                "scripted expert's path, release when it is back on track.\n" + ROS_ARGS_HELP,
                ScriptedHumanOptions,
                "Config group: robot=NAME (its state_topic, transport and intervention block; "
                "default tabletop), robot.KEY=VALUE.",
            )
        )
        return 0
    argv, ros_args = split_ros_args(argv)
    opts, composed = compose_options(
        argv, ScriptedHumanOptions, SCRIPTED_HUMAN_CONFIG, "scripted-human"
    )
    robot = composed["robot"]
    n_action = len((robot.get("command") or {}).get("joints") or robot.get("joints") or [])
    teleop = InterventionConfig.parse(robot.get("intervention") or {}, n_action)
    expert = expert_for(opts.expert, task=int(opts.task))
    if n_action != expert.n_action:
        raise ConfigError(
            f"the {opts.expert} expert commands {expert.commands}; robot command joints give "
            f"{n_action} (use robot={opts.expert} or a config like it)."
        )
    transport = make_transport(
        opts.transport or robot.get("transport", "auto"), opts.node_name, ros_args=ros_args
    )
    try:
        return _serve(opts, robot, teleop, expert, transport, msgs)
    finally:
        transport.close()


def _serve(
    opts: ScriptedHumanOptions,
    robot: dict[str, Any],
    teleop: Any,
    expert: JointStateExpert,
    transport: Transport,
    msgs: Any,
) -> int:
    from roborl.robots.env.intervention import Teleop

    latest: dict[str, Any] = {}
    lock = threading.Lock()

    def on_state(msg: Any) -> None:
        with lock:
            latest["msg"], latest["t"] = msg, time.monotonic()

    state_topic = robot.get("state_topic", "/joint_states")
    transport.subscribe(state_topic, msgs.JointState, on_state)
    publish = transport.publisher(teleop.topic, Teleop(teleop).msg_type)
    writer = TeleopWriter(teleop)
    rule = DriftRule(opts)
    stop = stop_on_signals()
    announce(
        transport,
        logging.INFO,
        event="scripted_human_start",
        node=transport.fully_qualified_name or opts.node_name,
        state_topic=state_topic,
        teleop_topic=teleop.topic,
        teleop_type=teleop.type,
        task=expert.instruction,
    )
    period = 1.0 / float(opts.rate_hz)
    t_end = time.monotonic() + float(opts.duration_s) if opts.duration_s else float("inf")
    counts = {"ticks": 0, "intervening_ticks": 0, "takeovers": 0}
    scene: np.ndarray | None = None
    next_tick = time.monotonic()
    while not stop[0] and time.monotonic() < t_end:
        with lock:
            msg, stamp = latest.get("msg"), latest.get("t", -np.inf)
        now = time.monotonic()
        action = np.zeros(expert.n_action)
        if msg is None or now - stamp > opts.state_timeout_s:
            if rule.intervening:
                emit_event(event="release", cause="no_state", error=None)
            rule.reset()
        else:
            blocks = expert.set_state(list(msg.name), list(msg.position))  # jump on a reset
            if scene is not None and np.max(np.abs(blocks - scene)) > opts.reset_jump:
                if rule.intervening:
                    emit_event(event="release", cause="new_episode", error=expert.error())
                rule.reset()
            scene = blocks
            error = expert.error()
            flip = rule.update(now, error)
            if flip is not None:
                counts["takeovers"] += flip[0] == "takeover"
                announce(
                    transport, logging.INFO, event=flip[0], cause=flip[1], error=round(error, 4)
                )
            action = expert.action()
        counts["ticks"] += 1
        counts["intervening_ticks"] += rule.intervening
        publish(writer.message(action, rule.intervening, transport.now()))
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
    publish(writer.message(np.zeros(expert.n_action), False, transport.now()))  # let go
    announce(transport, logging.INFO, event="scripted_human_stop", **counts)
    return 0


scripted_human_cmd = guard_command(
    scripted_human,
    "scripted-human",
    "a scripted person that takes over a robot over ROS 2 when it drifts (HIL testing)",
)
