"""Every way `roborl deploy` stops commanding ends with the hold, on both implementations of
the `Robot` seam where the cause applies (`robot` parameter):

- `ros2`: checked from an independent robot, `benchmarks/peers/stop_robot.py`, a plain rclpy
  node (no roborl import) that publishes JointState at 100 Hz, integrates the velocity it is
  sent (as forward_command_controller would, with no command timeout) and records every
  command;
- `mujoco`: the in-process MuJoCo cart-pole (`robot=mujoco`, an effort interface: the hold is
  zero), whose record of every command it applied (`robot.options.record`) is read the same
  way; its state stream dies and its e-stop fires through `robot.options.faults`.

For each stop cause the robot must have received exactly the commands deploy says it sent,
and the last one must be the hold (zero). Every wait is an event (a deploy event, the robot's
command count reaching deploy's); deadlines are hang guards, never timing assertions.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_server import event_process
from robot_helpers import install_plugin

from roborl.robots.nodes.processes import EventProcess as Proc

ROOT = Path(__file__).resolve().parents[2]
ROBOT = ROOT / "benchmarks" / "peers" / "stop_robot.py"
START = 120.0
HOLD = [0.0]
ROBOTS = ["ros2", "mujoco"]
#: The MuJoCo robot's faults, by the stop robot's stdin command they stand for.
FAULTS = {"estop": "estop_after", "mute": "mute_state_after"}


class Record:
    """The MuJoCo robot's command record, read like the stop robot's events (`named("cmd")`)."""

    def __init__(self, path: Path, dep: Proc | None = None) -> None:
        self.path, self.dep = path, dep

    def named(self, name: str) -> list[dict]:
        assert name == "cmd"
        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        return [json.loads(x) for x in lines if x.endswith("}")]

    def wait(self, pred, what: str, timeout: float) -> None:
        """Poll `pred` (a hang guard); fail early, with deploy's stderr, if deploy exited."""
        if self.dep is not None:
            self.dep.wait(pred, what, timeout)
            return
        end = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < end, what
            time.sleep(0.02)


@pytest.fixture
def procs():
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str]) -> Proc:
        p = event_process(args, env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def rclpy_env(ros_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    env = dict(ros_env, OMP_NUM_THREADS="1", STOP_RECORD=str(tmp_path / "mujoco_cmds.jsonl"))
    env.pop("RMW_IMPLEMENTATION", None)  # the wheels' default, rmw_fastrtps_cpp
    return env


@pytest.fixture(params=ROBOTS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which `Robot` implementation deploy commands: the ROS 2 driver or the MuJoCo robot."""
    return request.param


# A checkpoint-free algorithm whose policy commands 0.7 and, on its 40th call, hangs for 3 s
# (a stuck inference server, a GIL-holding library): what the supervisor thread is for.
HANG_PLUGIN = textwrap.dedent(
    """
    import os, time
    from dataclasses import dataclass
    import numpy as np
    from roborl.core.hookspecs import hookimpl
    from roborl.core.interfaces import Algorithm, Policy

    @dataclass
    class HangConfig:
        hang_s: float = 3.0

    class HangPolicy(Policy):
        def __init__(self, obs_space, act_space, hang_s):
            self.observation_space, self.action_space, self.hang_s = obs_space, act_space, hang_s
            self.calls = 0

        def act(self, obs):
            self.calls += 1
            if self.calls == 40 and os.environ.get("HANG_MODE") == "raise":
                raise RuntimeError("the policy failed (a test's injected error)")
            if self.calls == 40:
                time.sleep(self.hang_s)
                with open(os.environ["HANG_RETURNED"], "w") as fh:
                    fh.write(repr(time.monotonic()))
            return np.full(self.action_space.shape, 0.7, np.float32)

    class HangAlgo(Algorithm):
        name = "hang_test"
        Config = HangConfig
        checkpoint_free = True
        accepts_dict_obs = True  # it ignores the observation (camera tests give a Dict)

        def __init__(self, observation_space, action_space, config, device="cpu"):
            self.observation_space, self.action_space = observation_space, action_space
            self._policy = HangPolicy(observation_space, action_space, config.hang_s)

        def act(self, obs, deterministic=False):
            return self._policy.act(obs)

        def update(self, batch):
            return {}

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

        def policy(self):
            return self._policy

    @hookimpl
    def roborl_algorithms():
        return {"hang_test": HangAlgo}
    """
)


def _install_hang_plugin(tmp_path: Path) -> Path:
    """HANG_PLUGIN installed in a folder to put on PYTHONPATH; returns the folder."""
    return install_plugin(tmp_path, "hang_plugin", HANG_PLUGIN)


def _commands(robot: Proc | Record) -> list[dict]:
    return robot.named("cmd")


def _deploy(procs, env, *args: str, robot: str = "ros2") -> Proc:
    return procs(
        [sys.executable, "-m", "roborl.core.cli", "deploy", f"robot={robot}",
         "robot.connect_timeout_s=60", "rate_hz=50", "duration_s=300", *args],
        env,
    )  # fmt: skip


def _all_arrived(robot: Proc | Record, done: dict) -> list[dict]:
    """The commands the robot received, once deploy's last one has arrived. Deploy waits for
    the robot's acknowledgement before it exits, so its newest command arrives; an older one
    may not: the command writer is reliable KEEP_LAST, which on a starved machine can replace
    an unacknowledged sample by a newer one (seen in one of four -n 2 runs, the robot's last
    command still the hold). So the robot's list is a subsequence of deploy's, never longer,
    and after the deadline (a hang guard) it ends with deploy's last command."""
    try:
        robot.wait(lambda: len(_commands(robot)) >= done["commands"], "commands missing", 60)
    except AssertionError:
        pass  # an older command was replaced; the callers check the last one
    cmds = _commands(robot)
    assert 0 < len(cmds) <= done["commands"], (len(cmds), done)
    return cmds


def _start(
    procs, env, kind: str, *deploy_args: str, moving: bool = True, fault: str | None = None
) -> tuple[Proc | Record, Proc]:
    """The robot (`kind`) and a deploy commanding it; `fault` (estop, mute) once it moves."""
    if kind == "mujoco":
        record = Path(env["STOP_RECORD"])
        faults = [f"robot.options.faults.{FAULTS[fault]}=40"] if fault else []
        dep = _deploy(procs, env, f"robot.options.record={record}", *faults, *deploy_args,
                      robot="mujoco")  # fmt: skip
        robot: Proc | Record = Record(record, dep)
    else:
        robot = procs([sys.executable, str(ROBOT), "--rate", "100"], env)
        robot.wait_event("ready", START)
        dep = _deploy(procs, env, *deploy_args)
    dep.wait_event("deploy_start", START)
    if moving:  # the policy is commanding the robot (non-hold commands arrive)
        robot.wait(
            lambda: sum(c["data"] != HOLD for c in _commands(robot)) >= 20, "no motion", START
        )
    else:
        robot.wait(lambda: len(_commands(robot)) >= 20, "no commands", START)
    if fault and isinstance(robot, Proc):
        robot.send(fault)
    return robot, dep


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_ends_with_the_hold(rclpy_env, procs, balance_checkpoint, sig, kind) -> None:
    robot, dep = _start(
        procs, rclpy_env, kind, f"checkpoint={balance_checkpoint}",
        "robot.safety.max_state_age_s=5",
    )  # fmt: skip
    dep.proc.send_signal(sig)
    done = dep.wait_event("done", 120)
    cmds = _all_arrived(robot, done)
    assert cmds[-1]["data"] == HOLD, cmds[-3:]
    assert done["estop"] and done["interventions"]["estop"] == 1


def test_estop_topic_hold_is_sent_and_nothing_but_holds_follow(
    rclpy_env, procs, balance_checkpoint, kind
) -> None:
    """The robot's e-stop (a Bool on /estop; the MuJoCo robot's e-stop fault)."""
    robot, dep = _start(
        procs, rclpy_env, kind, f"checkpoint={balance_checkpoint}",
        "robot.safety.max_state_age_s=5", fault="estop",
    )  # fmt: skip
    ev = dep.wait_event("estop", 60)
    assert ev["commands_sent"] > ev["commands_at_estop"], ev  # the hold (re-sent while latched)
    dep.proc.send_signal(signal.SIGTERM)
    done = dep.wait_event("done", 120)
    cmds = _all_arrived(robot, done)
    after = cmds[ev["commands_at_estop"] :]
    assert after and all(c["data"] == HOLD for c in after), after


def test_stale_state_watchdog_ends_with_the_hold(
    rclpy_env, procs, balance_checkpoint, kind
) -> None:
    """The robot's state stream dies: the state watchdog holds and deploy exits (3)."""
    robot, dep = _start(procs, rclpy_env, kind, f"checkpoint={balance_checkpoint}", fault="mute")
    assert "state is" in dep.wait_event("watchdog_stop", 60)["cause"]
    done = dep.wait_event("done", 120)
    assert done["exit_code"] == 3
    cmds = _all_arrived(robot, done)
    assert cmds[-1]["data"] == HOLD, cmds[-3:]


def test_nan_policy_only_ever_sends_the_hold(rclpy_env, procs, nan_checkpoint, kind) -> None:
    robot, dep = _start(
        procs, rclpy_env, kind, f"checkpoint={nan_checkpoint}", "robot.safety.max_state_age_s=5",
        moving=False,
    )  # fmt: skip
    dep.proc.send_signal(signal.SIGTERM)
    done = dep.wait_event("done", 120)
    cmds = _all_arrived(robot, done)
    assert all(c["data"] == HOLD for c in cmds), [c["data"] for c in cmds if c["data"] != HOLD]
    assert done["interventions"]["nonfinite"] >= 20


def test_hung_policy_is_held_by_the_supervisor_while_it_hangs(
    rclpy_env, procs, tmp_path, kind
) -> None:
    """The policy hangs for 3 s; the supervisor thread sends the hold after
    max_policy_time_s (0.5 s) of silence, while the policy is still hung."""
    site = _install_hang_plugin(tmp_path)
    returned = tmp_path / "returned"
    env = dict(rclpy_env, PYTHONPATH=str(site), HANG_RETURNED=str(returned))
    robot, dep = _start(procs, env, kind, "algo=hang_test", "robot.safety.max_state_age_s=5")
    done = dep.wait_event("done", 120)  # the policy watchdog stops deploy once it returns
    assert done["exit_code"] == 3
    assert done["interventions"]["watchdog_supervisor"] >= 1
    cmds = _all_arrived(robot, done)
    back = float(returned.read_text())
    during = [c for c in cmds if c["t"] < back]
    assert during[-1]["data"] == HOLD, during[-3:]  # held while the policy still hung
    assert cmds[-1]["data"] == HOLD


def test_policy_exception_ends_with_the_hold(rclpy_env, procs, tmp_path, kind) -> None:
    """The policy raises on its 40th call: deploy stops with an error naming it, and the last
    command the robot receives is the hold (sent by the teardown, acknowledged before exit)."""
    site = _install_hang_plugin(tmp_path)
    env = dict(
        rclpy_env, PYTHONPATH=str(site), HANG_RETURNED=str(tmp_path / "r"), HANG_MODE="raise"
    )
    robot, dep = _start(procs, env, kind, "algo=hang_test", "robot.safety.max_state_age_s=5")
    assert dep.proc.wait(timeout=120) != 0
    assert "the policy failed" in dep.stderr()  # a plugin bug: its traceback is shown
    robot.wait(lambda: _commands(robot)[-1]["data"] == HOLD, "the hold never arrived", 60)
    moving = [c for c in _commands(robot) if c["data"] != HOLD]
    assert moving and moving[-1]["data"] == pytest.approx([0.7]), moving[-3:]  # it was moving


def test_camera_watchdog_ends_with_the_hold(rclpy_env, procs, tmp_path) -> None:
    """The robot's camera stops (its JointState keeps coming): the camera watchdog holds,
    naming the camera, deploy exits 3, and the hold is the last command the robot gets."""
    site = _install_hang_plugin(tmp_path)
    env = dict(rclpy_env, PYTHONPATH=str(site), HANG_RETURNED=str(tmp_path / "r"))
    robot = procs([sys.executable, str(ROBOT), "--rate", "100", "--camera-rate", "30"], env)
    robot.wait_event("ready", START)
    camera = "{name:wrist,topic:/camera/image_raw,width:8,height:8,max_age_s:0.5}"
    dep = _deploy(
        procs, env, "algo=hang_test", "algo.hang_s=0", "robot.safety.max_state_age_s=5",
        f"robot.cameras=[{camera}]",
    )  # fmt: skip
    dep.wait_event("deploy_start", START)
    robot.wait(lambda: sum(c["data"] != HOLD for c in _commands(robot)) >= 20, "no motion", START)
    robot.send("mute_camera")
    assert "wrist" in dep.wait_event("watchdog_stop", 60)["cause"]
    done = dep.wait_event("done", 120)
    assert done["exit_code"] == 3 and done["interventions"]["watchdog_camera"] >= 1, done
    cmds = _all_arrived(robot, done)
    assert cmds[-1]["data"] == HOLD, cmds[-3:]


def test_sigkill_of_deploy_leaves_sim_robot_holding(ros_env, procs, balance_checkpoint) -> None:
    """A killed deploy sends nothing; sim-robot's command timeout applies the hold."""
    env = dict(ros_env, OMP_NUM_THREADS="1")
    env.pop("RMW_IMPLEMENTATION", None)
    sim = procs(
        [sys.executable, "-m", "roborl.core.cli", "sim-robot", "env=inverted_pendulum",
         "rate_hz=25", "duration_s=300"],
        env,
    )  # fmt: skip
    sim.wait_event("sim_robot_start", START)
    dep = _deploy(procs, env, f"checkpoint={balance_checkpoint}", "rate_hz=25",
                  "robot.safety.max_state_age_s=5", "on_watchdog=hold")  # fmt: skip
    dep.wait_event("deploy_start", START)
    sim.wait(lambda: any(e.get("commands", 0) >= 20 for e in sim.named("status")),
             "sim-robot got no commands", START)  # fmt: skip
    assert not sim.named("command_timeout")
    dep.proc.kill()
    timeout = sim.wait_event("command_timeout", 60)
    assert timeout["timeout_s"] == 0.5


def test_killed_learner_leaves_the_actor_holding(rclpy_env, procs, tmp_path, kind) -> None:
    """collector=actor_learner: SIGKILL the learner while its actor drives the robot. The actor
    hears nothing for learner_timeout_s, holds, stops, and its final command (the last one the
    robot gets) is the hold; no non-hold command follows the first hold after the kill."""
    from roborl.robots.nodes.processes import free_port_pair

    if kind == "mujoco":  # the robot lives in the actor process
        record = Path(rclpy_env["STOP_RECORD"])
        robot_args = ["robot=mujoco", f"robot.options.record={record}"]
        robot: Proc | Record = Record(record)
    else:
        robot_args = ["robot=ros2"]
        robot = procs([sys.executable, str(ROBOT), "--rate", "100", "--clamp", "1e6"], rclpy_env)
        robot.wait_event("ready", START)
    run_dir = tmp_path / "run"
    learner = procs(
        [sys.executable, "-m", "roborl.core.cli", "train", "algo=sac", *robot_args,
         "collector=actor_learner", "total_steps=100000", "learning_starts=100",
         "algo.hidden_sizes=[16,16]", "algo.batch_size=32", "robot.connect_timeout_s=60",
         "robot.safety.max_state_age_s=5", "robot.terminate=null", "robot.reset.mode=wait",
         "progress=false", "eval_every=0", "actor_learner.learner_timeout_s=2",
         f"actor_learner.port={free_port_pair()}", f"hydra.run.dir={run_dir}"],
        rclpy_env,
    )  # fmt: skip
    robot.wait(
        lambda: sum(c["data"] != HOLD for c in _commands(robot)) >= 50, "no motion", START * 2
    )
    pid = int((run_dir / "actor" / "actor.pid").read_text())
    learner.proc.kill()
    learner.proc.wait()
    n_at_kill = len(_commands(robot))
    log = run_dir / "actor" / "actor.log"

    def actor_event(name: str) -> dict | None:
        for line in log.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("event") == name:
                return json.loads(line)
        return None

    robot.wait(lambda: actor_event("actor_closed"), "the actor did not stop", 120)
    try:  # the actor runs in a session of its own: make sure it is gone
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    lost, closed = actor_event("actor_learner_lost"), actor_event("actor_closed")
    assert lost is not None and lost["silent_s"] >= 2.0, lost  # rounded to ms
    cmds = _all_arrived(robot, {"commands": closed["commands_sent"]})
    assert cmds[-1]["data"] == HOLD, cmds[-3:]
    assert lost["commands_sent"] > n_at_kill  # it kept acting on its last weights meanwhile
    after_lost = cmds[lost["commands_sent"] - 1 :]  # from the hold it sent on losing the learner
    assert all(c["data"] == HOLD for c in after_lost), after_lost
