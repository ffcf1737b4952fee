"""Every way `roborl deploy` stops commanding a position-controlled arm holds it where it
stands, checked from an independent arm: `benchmarks/peers/position_arm.py`, a plain rclpy
node (no roborl import) that publishes JointState at 200 Hz and follows every position it is
sent, as joint_trajectory_controller (JointTrajectory) or a position forward_command_controller
(Float64MultiArray) would, at a bounded speed, starting at -2.73 rad (zero is a place, not a
stop: a hold of zero would be a 2.7 rad move).

The causes that need no ROS operator run on the in-process MuJoCo arm too (`robot` parameter
`mujoco`: `robot=mujoco robot.options.model=position_arm`, a critically damped position servo
with the same joints and start), read from its record of every command it applied; its state
stream dies and its e-stop fires through `robot.options.faults`.

For each stop cause, every command the arm receives after the stop must be within 0.01 rad of
where the arm stood (its position as each command arrived, and the position it stood at when
the first one did), and a cleared e-stop moves nothing until activate. Waits are events or
command counts with hang guards; no assertion is about timing.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from robot_helpers import install_plugin
from ros_peers import PRELUDE, peer

from roborl.robots.nodes.processes import EventProcess as Proc

ROOT = Path(__file__).resolve().parents[2]
ARM = ROOT / "benchmarks" / "peers" / "position_arm.py"
START = 120.0
TOLERANCE = 0.01  # rad: the bound on how far a hold may be from where the arm stands
MAX_DELTA = 0.002  # rad per 50 Hz tick: the policy ramps the arm at up to 0.1 rad/s
MOVING = MAX_DELTA / 2  # a command this far from where the arm stands asks for motion
ROBOTS = ["ros2", "mujoco"]
MUJOCO_ARM = ["robot=mujoco", "robot.options.model=position_arm", "robot.terminate=null"]
#: The MuJoCo arm's faults, by the ROS arm's stdin command they stand for.
FAULTS = {"estop": "estop_after", "mute": "mute_state_after"}


class ArmRecord:
    """The MuJoCo arm's command record, read like the ROS arm's events (`named("cmd")`:
    receive time `t`, `target`, and `pos`, where the arm stood when the command arrived)."""

    def __init__(self, path: Path, dep: Proc) -> None:
        self.path, self.dep = path, dep

    def named(self, name: str) -> list[dict]:
        assert name == "cmd"
        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        rows = [json.loads(x) for x in lines if x.endswith("}")]
        return [{"t": r["t"], "target": r["data"][0], "pos": r["position"][0]} for r in rows]

    def wait(self, pred, what: str, timeout: float) -> None:
        self.dep.wait(pred, what, timeout)  # fails early, with deploy's stderr, if it exits


@pytest.fixture(params=ROBOTS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which `Robot` implementation deploy commands: the ROS 2 driver or the MuJoCo arm."""
    return request.param


INTERFACES = {
    "trajectory": ["robot.command.interface=trajectory",
                   "robot.command.controller=joint_trajectory_controller"],
    "forward": ["robot.command.controller=forward_position_controller",
                "robot.command.interface_name=position"],
}  # fmt: skip

# A plain rclpy operator (no roborl import): the e-stop service and lifecycle transitions of
# the deploy node named in argv[1], one stdin line each; prints when each call was made.
OPERATOR = PRELUDE + textwrap.dedent(
    """
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from std_srvs.srv import SetBool

    deploy = sys.argv[1]
    estop = node.create_client(SetBool, deploy + "/estop")
    change = node.create_client(ChangeState, deploy + "/change_state")
    ids = {"activate": Transition.TRANSITION_ACTIVATE,
           "deactivate": Transition.TRANSITION_DEACTIVATE}
    for client in (estop, change):  # discovered before "ready": a call goes out at once
        if not client.wait_for_service(timeout_sec=120):
            raise SystemExit(f"service {client.srv_name} never appeared")
    out(event="ready")
    for line in sys.stdin:
        word = line.strip()
        t = time.monotonic()
        if word in ("estop_on", "estop_off"):
            answer = call(estop, SetBool.Request(data=word == "estop_on"))
            out(event=word, t=t, success=answer.success, message=answer.message)
        elif word in ids:
            request = ChangeState.Request(transition=Transition(id=ids[word]))
            out(event=word, t=t, success=call(change, request).success)
    """
)

# A checkpoint-free policy that ramps toward `target` (the rate limit paces it) and, from its
# `slow_after`-th call, takes `slow_s` per call (an LLM-like policy), writing when each call
# returned; or hangs once for `hang_s` at call 40 (a stuck inference server).
PACE_PLUGIN = textwrap.dedent(
    """
    import os, time
    from dataclasses import dataclass
    import numpy as np
    from roborl.core.hookspecs import hookimpl
    from roborl.core.interfaces import Algorithm, Policy

    @dataclass
    class PaceConfig:
        target: float = 0.7
        slow_after: int = 0
        slow_s: float = 0.0
        hang_s: float = 0.0

    class PacePolicy(Policy):
        def __init__(self, obs_space, act_space, config):
            self.observation_space, self.action_space, self.config = obs_space, act_space, config
            self.calls = 0

        def act(self, obs):
            self.calls += 1
            c = self.config
            if c.slow_after and self.calls >= c.slow_after:
                time.sleep(c.slow_s)
            if c.hang_s and self.calls == 40:
                time.sleep(c.hang_s)
            with open(os.environ["PACE_LOG"], "a") as fh:
                fh.write(f"{time.monotonic()!r}\\n")
            return np.full(self.action_space.shape, c.target, np.float32)

    class PaceAlgo(Algorithm):
        name = "pace_test"
        Config = PaceConfig
        checkpoint_free = True

        def __init__(self, observation_space, action_space, config, device="cpu"):
            self._policy = PacePolicy(observation_space, action_space, config)

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
        return {"pace_test": PaceAlgo}
    """
)


@pytest.fixture
def rclpy_env(rclpy_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The shared rclpy_env, plus where the MuJoCo arm records its commands."""
    return dict(rclpy_env, ARM_RECORD=str(tmp_path / "mujoco_arm.jsonl"))


@pytest.fixture
def pace_env(rclpy_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """rclpy_env with PACE_PLUGIN installed as a distribution (entry point included)."""
    site = install_plugin(tmp_path, "pace_plugin", PACE_PLUGIN)
    return dict(rclpy_env, PYTHONPATH=str(site), PACE_LOG=str(tmp_path / "pace.log"))


def _commands(arm: Proc | ArmRecord) -> list[dict]:
    return arm.named("cmd")


def _moving(arm: Proc | ArmRecord) -> int:
    """How many commands asked for motion (a target away from where the arm stood)."""
    return _count_moving(_commands(arm))


def _start(
    procs,
    env,
    interface: str,
    *args: str,
    kind: str = "ros2",
    fault: str | None = None,
    moving: int = 20,
) -> tuple[Proc | ArmRecord, Proc]:
    """The arm (`kind`) and a deploy commanding it; `fault` (estop, mute) once it moved."""
    robot = ["robot=ros2"]
    if kind == "mujoco":
        record = Path(env["ARM_RECORD"])
        faults = [f"robot.options.faults.{FAULTS[fault]}=60"] if fault else []
        robot = [*MUJOCO_ARM, f"robot.options.record={record}", *faults]
    else:
        arm_proc = procs([sys.executable, str(ARM), "--rate", "200"], env, roborl=False)
        arm_proc.wait_event("ready", START)
    dep = procs(
        ["deploy", *robot, "robot.connect_timeout_s=60", "rate_hz=50", "duration_s=300",
         f"robot.safety.max_delta={MAX_DELTA}", *INTERFACES[interface], *args],
        env,
    )  # fmt: skip
    arm: Proc | ArmRecord = ArmRecord(record, dep) if kind == "mujoco" else arm_proc
    dep.wait_event("deploy_start", START)
    if moving:
        arm.wait(lambda: _moving(arm) >= moving, "the arm was never moved", START)
    else:
        arm.wait(lambda: len(_commands(arm)) >= 20, "no commands", START)
    if fault and isinstance(arm, Proc):
        arm.send(fault)
    return arm, dep


def _assert_held(after: list[dict]) -> None:
    """Every command after the stop is where the arm stood, and the arm stood still."""
    assert after, "no command reached the arm after the stop"
    stood = after[0]["pos"]
    for c in after:
        assert c["target"] is not None and abs(c["target"] - c["pos"]) < TOLERANCE, (c, after)
        assert abs(c["pos"] - stood) < TOLERANCE, (stood, c)
    assert abs(stood - -2.73) > 10 * MAX_DELTA  # the arm had moved: the hold tracks it


def _after(arm: Proc | ArmRecord, index: int, at_least: int) -> list[dict]:
    """The commands from the `index`-th on, once `at_least` of them arrived (the hold is
    re-sent every period while latched)."""
    arm.wait(lambda: len(_commands(arm)) >= index + at_least, "holds stopped coming", 60)
    return _commands(arm)[index:]


@pytest.mark.parametrize("interface", sorted(INTERFACES))
def test_estop_service_holds_where_the_arm_stands_and_clear_moves_nothing(
    rclpy_env, procs, balance_checkpoint, interface
) -> None:
    """SetBool(true) on ~/estop: the hold is the arm's position, re-sent while latched;
    SetBool(false) clears but only holds; lifecycle activate resumes motion."""
    arm, dep = _start(procs, rclpy_env, interface, f"checkpoint={balance_checkpoint}",
                      "robot.safety.max_state_age_s=5")  # fmt: skip
    operator = procs(peer(OPERATOR, "/roborl_deploy"), rclpy_env, roborl=False)
    operator.wait_event("ready", START)
    operator.send("estop_on")
    ev = dep.wait_event("estop", 60)
    _assert_held(_after(arm, ev["commands_at_estop"], 10))
    operator.send("estop_off")
    assert operator.wait_event("estop_off", 60)["success"]
    n = len(_commands(arm))
    _assert_held(_after(arm, n, 10))  # cleared: still nothing but holds
    operator.send("activate")
    assert operator.wait_event("activate", 60)["success"]
    arm.wait(lambda: _moving(arm) > _moving_before(arm, n) + 5, "activate did not resume", 60)


def _moving_before(arm: Proc, n: int) -> int:
    return _count_moving(_commands(arm)[:n])


def _count_moving(cmds: list[dict]) -> int:
    return sum(c["target"] is not None and abs(c["target"] - c["pos"]) > MOVING for c in cmds)


def test_estop_topic_holds_where_the_arm_stands(rclpy_env, procs, balance_checkpoint, kind) -> None:
    """The robot's e-stop (a Bool on /estop; the MuJoCo arm's e-stop fault)."""
    arm, dep = _start(procs, rclpy_env, "trajectory", f"checkpoint={balance_checkpoint}",
                      "robot.safety.max_state_age_s=5", kind=kind, fault="estop")  # fmt: skip
    ev = dep.wait_event("estop", 60)
    _assert_held(_after(arm, ev["commands_at_estop"], 10))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_holds_where_the_arm_stands(rclpy_env, procs, balance_checkpoint, sig, kind) -> None:
    arm, dep = _start(procs, rclpy_env, "forward", f"checkpoint={balance_checkpoint}",
                      "robot.safety.max_state_age_s=5", kind=kind)  # fmt: skip
    dep.proc.send_signal(sig)
    done = dep.wait_event("done", 120)
    assert done["estop"] and done["interventions"]["estop"] == 1, done
    _assert_held(_after(arm, done["commands_at_estop"], 1))
    arm.wait(lambda: len(_commands(arm)) >= done["commands"], "the final hold never came", 60)


def test_stale_state_watchdog_holds_the_last_sent_target(
    rclpy_env, procs, balance_checkpoint, kind
) -> None:
    """The arm's state stream dies: with no fresh measurement the hold is the last
    target sent (where the arm, which tracks it, stands), never zero."""
    arm, dep = _start(procs, rclpy_env, "trajectory", f"checkpoint={balance_checkpoint}",
                      kind=kind, fault="mute")  # fmt: skip
    stop = dep.wait_event("watchdog_stop", 60)
    assert "state is" in stop["cause"]
    done = dep.wait_event("done", 120)
    assert done["exit_code"] == 3
    _assert_held(_after(arm, stop["commands_sent"] - 1, 1))


def test_nan_policy_never_moves_the_arm(rclpy_env, procs, nan_checkpoint, kind) -> None:
    arm, _ = _start(procs, rclpy_env, "trajectory", f"checkpoint={nan_checkpoint}",
                    "robot.safety.max_state_age_s=5", kind=kind, moving=0)  # fmt: skip
    cmds = _commands(arm)
    assert all(abs(c["target"] - -2.73) < TOLERANCE for c in cmds), cmds[:5]
    assert all(abs(c["pos"] - -2.73) < TOLERANCE for c in cmds)


def test_hung_policy_is_held_where_the_arm_stands(pace_env, procs, kind) -> None:
    """The policy hangs for 3 s at its 40th call: the supervisor holds the arm in place
    while it hangs, and keeps re-sending the hold."""
    arm, dep = _start(procs, pace_env, "trajectory", "algo=pace_test", "algo.hang_s=3",
                      "robot.safety.max_state_age_s=5", kind=kind)  # fmt: skip
    done = dep.wait_event("done", 120)  # the policy watchdog stops deploy once it returns
    assert done["exit_code"] == 3 and done["interventions"]["watchdog_supervisor"] >= 1, done
    returns = [float(x) for x in Path(pace_env["PACE_LOG"]).read_text().split()]
    hung_from = returns[38]  # the 39th call returned, then the 40th hung
    during = [c for c in _commands(arm) if hung_from + 0.1 < c["t"] < returns[39]]
    assert len(during) >= 5, during  # the supervisor re-sends the hold while it hangs
    _assert_held(during)


def test_deactivate_holds_within_a_period_while_a_slow_policy_runs(pace_env, procs) -> None:
    """An LLM-like policy takes 2 s per call: lifecycle deactivate holds the arm at once,
    before the call in progress returns (it used to wait for it)."""
    arm, _dep = _start(procs, pace_env, "trajectory", "algo=pace_test", "algo.slow_after=30",
                      "algo.slow_s=2", "robot.safety.max_policy_time_s=5",
                      "robot.safety.max_state_age_s=5")  # fmt: skip
    log = Path(pace_env["PACE_LOG"])
    arm.wait(lambda: len(log.read_text().split()) >= 31, "the policy never slowed", 60)
    operator = procs(peer(OPERATOR, "/roborl_deploy"), pace_env, roborl=False)
    operator.wait_event("ready", START)
    calls = len(log.read_text().split())  # deactivate just after a 2 s call begins
    arm.wait(lambda: len(log.read_text().split()) > calls, "the policy stopped", 60)
    operator.send("deactivate")
    asked = operator.wait_event("deactivate", 60)
    assert asked["success"]
    arm.wait(lambda: [c for c in _commands(arm) if c["t"] > asked["t"]], "no hold", 60)
    after = [c for c in _commands(arm) if c["t"] > asked["t"]]
    returns = [float(x) for x in log.read_text().split()]
    in_flight_returned = min((r for r in returns if r > asked["t"]), default=time.monotonic())
    assert after[0]["t"] < in_flight_returned, (after[0], in_flight_returned)
    _assert_held(_after(arm, _commands(arm).index(after[0]), 5))


def test_arm_moved_by_hand_while_stopped_is_not_commanded_back(
    rclpy_env, procs, balance_checkpoint
) -> None:
    """A person moves the arm during the e-stop: the re-sent holds follow it, and after
    clear and activate the first command starts from where it now stands (the rate limit
    re-syncs to the measured position), not from the target before the stop."""
    arm, dep = _start(procs, rclpy_env, "trajectory", f"checkpoint={balance_checkpoint}",
                      "robot.safety.max_state_age_s=5")  # fmt: skip
    operator = procs(peer(OPERATOR, "/roborl_deploy"), rclpy_env, roborl=False)
    operator.wait_event("ready", START)
    operator.send("estop_on")
    dep.wait_event("estop", 60)
    arm.send("push -1.5")
    arm.wait_event("pushed", 30)
    n = len(_commands(arm))
    settled = _after(arm, n, 20)[10:]  # the holds now follow the arm where it was put
    _assert_held(settled)
    assert abs(settled[-1]["target"] - -1.5) < 5 * TOLERANCE, settled[-1]
    operator.send("estop_off")
    operator.wait_event("estop_off", 60)
    operator.send("activate")
    asked = operator.wait_event("activate", 60)
    n = len(_commands(arm))
    arm.wait(lambda: _moving(arm) > _moving_before(arm, n) + 3, "activate did not resume", 60)
    resumed = [c for c in _commands(arm)[n:] if c["t"] > asked["t"]]
    first = next(c for c in resumed if abs(c["target"] - c["pos"]) > MOVING)
    # From where the arm stands now, one rate-limited step: not back toward the old target.
    assert abs(first["target"] - first["pos"]) <= MAX_DELTA + TOLERANCE, first


def test_killed_learner_leaves_the_actor_holding_the_arm_where_it_stands(
    rclpy_env, procs, tmp_path
) -> None:
    """collector=actor_learner on the position arm: SIGKILL the learner while its actor drives
    the arm. After learner_timeout_s the actor holds (where the arm stands) and stops; every
    command from that hold on keeps the arm in place."""
    import json
    import os

    from roborl.robots.nodes.processes import free_port_pair

    arm = procs([sys.executable, str(ARM), "--rate", "200", "--speed", "1.0"], rclpy_env,
                roborl=False)  # fmt: skip
    arm.wait_event("ready", START)
    run_dir = tmp_path / "run"
    learner = procs(
        ["train", "algo=sac", "robot=ros2", "collector=actor_learner", "total_steps=100000",
         "learning_starts=100", "algo.hidden_sizes=[16,16]", "algo.batch_size=32",
         "robot.connect_timeout_s=60", "robot.safety.max_state_age_s=5",
         f"robot.safety.max_delta={MAX_DELTA}", *INTERFACES["trajectory"],
         "robot.terminate=null", "robot.reset.mode=wait", "progress=false", "eval_every=0",
         "actor_learner.learner_timeout_s=2", f"actor_learner.port={free_port_pair()}",
         f"hydra.run.dir={run_dir}"],
        rclpy_env,
    )  # fmt: skip
    arm.wait(lambda: _moving(arm) >= 50, "the arm was never moved", START * 2)
    pid = int((run_dir / "actor" / "actor.pid").read_text())
    learner.proc.kill()
    learner.proc.wait()
    log = run_dir / "actor" / "actor.log"

    def actor_event(name: str) -> dict | None:
        for line in log.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("event") == name:
                return json.loads(line)
        return None

    arm.wait(lambda: actor_event("actor_closed"), "the actor did not stop", 120)
    try:  # the actor runs in a session of its own: make sure it is gone
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    lost = actor_event("actor_learner_lost")
    assert lost is not None, "the actor never reported the learner lost"
    closed = actor_event("actor_closed")
    arm.wait(lambda: len(_commands(arm)) >= closed["commands_sent"], "commands missing", 60)
    _assert_held(_commands(arm)[lost["commands_sent"] - 1 :])
