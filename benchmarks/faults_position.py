"""The position-arm rows of `benchmarks/faults.py`: each stop against an independent
position-controlled arm, and a second `roborl deploy` on a robot one already commands.

The arm is `benchmarks/peers/position_arm.py` (rclpy and message packages only, no roborl):
JointState at 200 Hz, it follows every JointTrajectory at up to 1 rad/s and logs each command
with where it stood when the command arrived; it starts at -2.73 rad, so a hold of zero would
be a 2.7 rad move. `roborl deploy` commands it over rclpy at 50 Hz through
`joint_trajectory_controller` (`robot.safety.max_delta` 0.002: the arm moves at up to
0.1 rad/s when the stop comes). Per fault it records the time to the first hold, the hold's
error (the largest distance between a command after the fault and where the arm stood as it
arrived) and how far the arm moved from the first hold to the end of the run. A command counts
as a hold when it is within 1 mrad of where the arm stood (the policy's commands are one
0.002 rad step away).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARM = ROOT / "benchmarks" / "peers" / "position_arm.py"
TRAJECTORY = ["robot.command.interface=trajectory",
              "robot.command.controller=joint_trajectory_controller"]  # fmt: skip
PACE_PLUGIN = (ROOT / "tests" / "robots" / "test_position_arm_stops.py").read_text()
PACE_PLUGIN = PACE_PLUGIN.split('PACE_PLUGIN = textwrap.dedent(\n    """')[1].split('"""')[0]
PACE_PLUGIN = PACE_PLUGIN.replace("\\\\n", "\\n")

# A plain rclpy client (no roborl): one lifecycle transition of /roborl_deploy.
LIFECYCLE_CLIENT = textwrap.dedent(
    """
    import sys, time, rclpy
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    rclpy.init()
    node = rclpy.create_node("unrelated_operator")
    client = node.create_client(ChangeState, "/roborl_deploy/change_state")
    client.wait_for_service(timeout_sec=60)
    ids = {"deactivate": Transition.TRANSITION_DEACTIVATE}
    log = sys.argv[2]  # the policy's log: deactivate just after a (2 s) call begins
    calls = len(open(log).read().split())
    while len(open(log).read().split()) == calls:
        time.sleep(0.005)
    print(repr(time.monotonic()), flush=True)  # the fault's instant: the request goes out now
    request = ChangeState.Request(transition=Transition(id=ids[sys.argv[1]]))
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=60)
    print(future.result().success, flush=True)
    """
)

# A command this far from where the arm stood asks for motion: the policy's steps are 0.002 rad
# (max_delta) from a position the 1 rad/s arm has reached; a hold is where it stands.
MOVING = 0.001
POSITION_FAULTS = ["estop_service", "estop_topic", "sigterm", "sighup", "stale_state",
                   "hung_policy", "nan_policy", "deactivate_slow_policy"]  # fmt: skip


def install_pace_plugin(tmp: Path) -> Path:
    site = tmp / "pace_site"
    info = site / "pace_plugin-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (site / "pace_plugin.py").write_text(textwrap.dedent(PACE_PLUGIN))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pace-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[roborl.plugins]\npace_plugin = pace_plugin\n")
    return site


def run_position_fault(fault: str, tmp: Path, env: dict[str, str], proc: Any, client: str) -> dict:
    """One stop against a fresh arm and deploy; `proc` is faults.py's Proc, `client` its
    e-stop service client script."""
    arm = proc([sys.executable, str(ARM), "--rate", "200", "--speed", "1.0"], env)
    arm.wait(lambda: arm.named("ready"))
    deploy_env = dict(env)
    source = [f"checkpoint={tmp / ('nan.pt' if fault == 'nan_policy' else 'balance.pt')}"]
    log = tmp / f"pace_{fault}.log"
    if fault in ("hung_policy", "deactivate_slow_policy"):
        deploy_env.update(PYTHONPATH=str(install_pace_plugin(tmp)), PACE_LOG=str(log))
        source = ["algo=pace_test", "algo.hang_s=3"] if fault == "hung_policy" else [
            "algo=pace_test", "algo.slow_after=30", "algo.slow_s=2",
            "robot.safety.max_policy_time_s=5"]  # fmt: skip
    age = "0.25" if fault == "stale_state" else "5"
    dep = proc([sys.executable, "-m", "roborl.core.cli", "deploy", "robot=ros2", *source,
                *TRAJECTORY, "robot.connect_timeout_s=60", "rate_hz=50", "duration_s=300",
                "robot.safety.max_delta=0.002", f"robot.safety.max_state_age_s={age}"],
               deploy_env)  # fmt: skip
    cmds = lambda: arm.named("cmd")  # noqa: E731
    arm.wait(lambda: len(cmds()) >= 50)
    time.sleep(0.5)
    t_fault = time.monotonic()
    if fault == "estop_service":
        call = subprocess.run([sys.executable, "-c", client, "true"], env=env, timeout=120,
                              capture_output=True, text=True)  # fmt: skip
        t_fault = float(call.stdout.splitlines()[0])
    elif fault == "estop_topic":
        arm.send("estop")
        arm.wait(lambda: arm.named("estop_sent"), 30)
        t_fault = arm.named("estop_sent")[0]["t"]
    elif fault in ("sigterm", "sighup"):
        dep.proc.send_signal(signal.SIGTERM if fault == "sigterm" else signal.SIGHUP)
    elif fault == "stale_state":
        arm.send("mute")
        arm.wait(lambda: arm.named("muted"), 30)
        t_fault = arm.named("muted")[0]["t"]
    elif fault == "nan_policy":
        t_fault = min(c["t"] for c in cmds())
    elif fault == "hung_policy":
        arm.wait(lambda: log.exists() and len(log.read_text().split()) >= 40, 60)
        t_fault = float(log.read_text().split()[38])  # the 40th call hangs after this return
    elif fault == "deactivate_slow_policy":
        arm.wait(lambda: log.exists() and len(log.read_text().split()) >= 31, 120)
        call = subprocess.run([sys.executable, "-c", LIFECYCLE_CLIENT, "deactivate", str(log)],
                              env=env, timeout=120, capture_output=True, text=True)  # fmt: skip
        t_fault = float(call.stdout.splitlines()[0])
    time.sleep(2.0)
    dep.stop()
    time.sleep(1.0)
    arm.send("quit")
    arm.wait(lambda: arm.named("final"), 20)
    arm.stop()
    got = cmds()
    after = [c for c in got if c["t"] >= t_fault and c["target"] is not None]
    held = [c for c in after if abs(c["target"] - c["pos"]) < MOVING]
    row: dict = {"robot": "position (trajectory)", "fault": fault, "commands": len(got)}
    if not held:
        row.update(time_to_hold_ms=None, commands_after_hold=None, displacement_after=None,
                   hold_error_rad=None, note="no hold received")  # fmt: skip
        return row
    first = held[0]
    later = [c for c in after if c["t"] >= first["t"]]
    final = arm.named("final")[0]["pos"] if arm.named("final") else later[-1]["pos"]
    row.update(
        time_to_hold_ms=round((first["t"] - t_fault) * 1e3, 1),
        commands_after_hold=sum(abs(c["target"] - c["pos"]) >= MOVING for c in later),
        displacement_after=round(abs(final - first["pos"]), 4),
        hold_error_rad=round(max(abs(c["target"] - c["pos"]) for c in later), 5),
    )
    if fault == "deactivate_slow_policy":
        returns = [float(x) for x in log.read_text().split()]
        in_flight = min((r for r in returns if r > t_fault), default=None)
        row["note"] = (
            "policy takes 2 s a call; the hold arrived "
            + (f"{(in_flight - first['t']) * 1e3:.0f} ms before the call returned"
               if in_flight is not None else "and the call never returned")
        )  # fmt: skip
    return row


def second_deploy(tmp: Path, env: dict[str, str], proc: Any) -> dict:
    """A second `roborl deploy` (same node name) on an arm that one already commands: it must
    refuse to start and the first keep the arm."""
    arm = proc([sys.executable, str(ARM), "--rate", "200", "--speed", "1.0"], env)
    arm.wait(lambda: arm.named("ready"))
    args = [sys.executable, "-m", "roborl.core.cli", "deploy", "robot=ros2",
            f"checkpoint={tmp / 'balance.pt'}", *TRAJECTORY, "robot.connect_timeout_s=60",
            "rate_hz=50", "duration_s=300", "robot.safety.max_delta=0.002",
            "robot.safety.max_state_age_s=5"]  # fmt: skip
    first = proc(args, env)
    arm.wait(lambda: len(arm.named("cmd")) >= 50)
    try:
        second = subprocess.run(args, env=env, timeout=120, capture_output=True, text=True)
        code, err = second.returncode, second.stderr
    except subprocess.TimeoutExpired as exc:  # it ran: the check missed the first deploy
        code, err = "none (still running after 120 s)", str(exc.stderr or "")
    alive = first.proc.poll() is None
    first.stop()
    arm.send("quit")
    arm.stop()
    why = next((ln for ln in err.splitlines() if "commands this robot" in ln), "")
    return {
        "robot": "position (trajectory)",
        "fault": "second_deploy (same node name)",
        "time_to_hold_ms": None,
        "commands_after_hold": None,
        "displacement_after": None,
        "note": f"second deploy exit code {code}, first still running: {alive}; "
        + (why[:160] if why else "no refusal message: " + " | ".join(err.splitlines()[-4:])),
    }
