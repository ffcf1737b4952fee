"""HIL-SERL's recipe on FetchPush end to end over ROS 2 (issue 33's one run over the wire).

The in-process benchmark (`hil_manipulation.py`) steps the sim as fast as it goes and sends the
scripted person's commands through the teleop channel code in-process. This run puts every
piece on ROS 2, real processes on loopback:

- `roborl sim-robot env=fetch_push_pixels cameras=[render]` serves FetchPush-v4 as a robot
  (JointState: end effector, fingers, block, goal; the env's camera as sensor_msgs/Image;
  Fetch's 4-D action on the command topic; `on_terminate=hold`: a finished task waits for the
  reset service), at `--rate` steps per second (Fetch's real time is 25);
- `roborl scripted-human robot=fetch_push_hil expert=fetch_push` is the person: Joy on /joy
  when the robot drifts;
- the sim does not end episodes (`end_on_success=false`, no step limit of its own): as on a
  robot, the classifier's confirmed verdict or the robot config's 50 steps end them;
- a referee (this process, rclpy) watches /joint_states and counts the episodes where the
  block reached the goal (FetchPush's own test), the person's or the policy's, without ending
  them (a success button that ended the episode would leave `reward.consecutive=2` no second
  frame to confirm);
- demos: `roborl demos record robot=fetch_push_hil` while the person drives (HIL-SERL's
  teleoperated demonstrations), successes only: here the referee does press the driver's
  `~/success` (std_srvs/Trigger), which ends a demo on the step the block reaches the goal;
- training: `roborl train algo=rlpd robot=fetch_push_hil collector=actor_learner demos=...
  reward=classifier` with the classifier `hil_manipulation.py` trained (the same renderer and
  camera key, `image`: make it with `hil_manipulation.py --prepare-only --px 48 --cameras front
  --algo rlpd --no-normalized-state`, one front view as sim-robot serves), the person on /joy.

Reported: the run's robot time, steps, updates, success and intervention rates against robot
time, and the reward's precision on the frames it fired on.

    OMP_NUM_THREADS=1 python benchmarks/hil_manipulation_ros.py \
        --classifier /tmp/hfull/classifier_relabelled --steps 3000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from hil import Referee, node, ros_env, stop, wait_line  # the ROS helpers of hil.py
from hil_manipulation import fired_precision

OUT = Path(__file__).parent / "results"


def block_on_goal() -> Any:
    """FetchPush's own success test on sim-robot's JointState: block within 5 cm of the goal
    (the error the scripted person's expert measures)."""
    from roborl.hil.experts import expert_for
    from roborl.sim.benchmarks.fetch_pixels import SUCCESS_DISTANCE

    expert = expert_for("fetch_push")

    def done(msg: Any) -> bool:
        expert.set_state(list(msg.name), list(msg.position))
        return expert.error() < SUCCESS_DISTANCE

    return done


def robot_args(a: argparse.Namespace) -> list[str]:
    return [
        "robot=fetch_push_hil", "robot.transport=rclpy", f"robot.rate_hz={a.rate}",
        f"robot.cameras.0.width={a.px}", f"robot.cameras.0.height={a.px}",
        "robot.cameras.0.max_age_s=2.0", "robot.safety.max_state_age_s=2.0",
        "robot.safety.max_policy_time_s=5.0", "robot.connect_timeout_s=90",
        "robot.reset.timeout_s=30",
    ]  # fmt: skip


def person(a: argparse.Namespace, env: dict[str, str], log: Path, demos: bool) -> Any:
    """scripted-human on /joy; for demos it keeps control until the task is done."""
    extra = ["window_s=0.1", "recover=10", "max_takeover_s=600"] if demos else [
        f"window_s={a.window_s}", f"max_takeover_s={a.max_takeover_s}"]  # fmt: skip
    proc = node(
        ["scripted-human", "robot=fetch_push_hil", "expert=fetch_push", "transport=rclpy",
         "tolerance=0.05", "reset_jump=0.02", *extra],
        env, log,
    )  # fmt: skip
    wait_line(log, "scripted_human_start", 120)
    return proc


def run_logged(args: list[str], env: dict[str, str], log: Path, timeout: float) -> None:
    """One `roborl` command, its output to `log`; raises with the log's tail if it fails."""
    with log.open("w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "roborl.core.cli", *args], env=env, stdout=f,
            stderr=subprocess.STDOUT, timeout=timeout,
        )  # fmt: skip
    if proc.returncode:
        raise SystemExit(f"roborl {args[0]} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")


def record_demos(a: argparse.Namespace, env: dict[str, str], work: Path) -> Path:
    out = work / "demos_ros.npz"
    if out.exists():
        return out
    h = person(a, env, work / "demo_person.log", demos=True)
    try:
        run_logged(
            ["demos", "record", *robot_args(a), "policy=random", f"episodes={a.demos}",
             "successes_only=true", f"out={out}"],
            env, work / "demos_ros.log", timeout=1800,
        )  # fmt: skip
    finally:
        stop(h)
    return out


def train(a: argparse.Namespace, env: dict[str, str], work: Path, demos: Path) -> Path:
    from roborl.robots.nodes.processes import free_port_pair

    run_dir = work / "run"
    h = person(a, env, work / "train_person.log", demos=False)
    try:
        run_logged(
            ["train", "algo=rlpd", *robot_args(a),
             f"algo.batch_size={a.batch}", f"algo.conv_channels={a.channels}",
             f"algo.conv_strided={a.strided}", "collector=actor_learner",
             f"actor_learner.port={free_port_pair()}", "actor_learner.timeout_s=300",
             f"demos={demos}",
             f"reward={{name:classifier,path:{a.classifier},consecutive:2,"
             f"threshold:{a.threshold}}}",
             f"total_steps={a.steps}", f"learning_starts={a.learning_starts}", "eval_every=0",
             f"log_every={a.log_every}", f"checkpoint_every={a.steps}", "progress=false",
             f"seed={a.seed}", f"hydra.run.dir={run_dir}"],
            env, work / "train.log", timeout=3 * 3600,
        )  # fmt: skip
    finally:
        stop(h)
    return run_dir


def curve(run_dir: Path, rate: float, every: int) -> list[dict[str, Any]]:
    """Per `every` steps of robot time: training episodes ended, the share the classifier paid
    for, and the learner's updates (from the run's metrics.jsonl)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    windows: dict[int, dict[str, Any]] = {}
    for r in rows:
        w = windows.setdefault(-(-r["step"] // every) * every, {"episodes": 0, "paid": 0})
        w["updates"] = max(w.get("updates", 0), r.get("updates") or 0)
        if "train/episode_return" in r:
            w["episodes"] += 1
            w["paid"] += r["train/episode_return"] > 0
    return [
        {"step": step, "robot_time_s": step / rate, **w,
         "paid_rate": w["paid"] / w["episodes"] if w["episodes"] else None}
        for step, w in sorted(windows.items())
    ]  # fmt: skip


def person_counts(log: Path) -> dict[str, Any]:
    """scripted-human's closing counts: ticks, ticks it intervened on, takeovers."""
    for line in reversed(log.read_text().splitlines()):
        if line.startswith("{") and "scripted_human_stop" in line:
            counts = json.loads(line)
            counts["intervening_share"] = counts["intervening_ticks"] / max(counts["ticks"], 1)
            return counts
    return {}


def markdown(result: dict[str, Any]) -> str:
    a, person = result["args"], result["person"]
    lines = [
        "# HIL-SERL recipe on FetchPush over ROS 2, end to end (issue 33)",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; wall {result['wall_s'] / 60:.1f} min.",
        "",
        f"`sim-robot env=fetch_push_pixels` at {a['rate']} steps/s ({a['px']} px camera), "
        "`scripted-human expert=fetch_push` on /joy, a referee counting true successes, "
        f"`roborl train algo=rlpd robot=fetch_push_hil collector=actor_learner`, {a['steps']} "
        f"steps, {a['demos']} demos recorded over ROS 2 while the person drove, reward = the "
        f"classifier `{a['classifier']}` (threshold {a['threshold']}, 2 consecutive frames).",
        "",
        f"- demos: {result['demos']}",
        f"- training episodes: {result['episodes']}; the referee saw the block reach the goal "
        f"{result['referee_calls']} times (the person's or the policy's doing)",
        f"- the person: {person.get('takeovers')} takeovers, intervening on "
        f"{person.get('intervening_share', float('nan')):.2f} of its "
        f"{person.get('ticks')} ticks",
        f"- the reward fired on {result['reward_fired']['fired_frames']} frames (no precision: "
        "the robot labels them with its success button, not pressed in training; the referee "
        "counts true successes)",
        f"- the actor's control rate: {result['actor_rate_hz']}",
        "",
        "| step | robot time (s) | learner updates | episodes ended | paid by the classifier |",
        "|---|---|---|---|---|",
    ]
    for p in result["curve"]:
        paid = "-" if p["paid_rate"] is None else f"{p['paid_rate']:.2f}"
        lines.append(
            f"| {p['step']} | {p['robot_time_s']:.0f} | {p['updates']} | {p['episodes']} | {paid} |"
        )
    lines += ["", "## Notes", "", *result.get("notes", [])]
    return "\n".join(lines) + "\n"


def render(path: Path) -> None:
    """Re-write RESULT.json's .md (after notes were added to the JSON)."""
    path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--classifier", type=Path,
        help="from hil_manipulation.py --prepare-only --px 48 --cameras front (one view)",
    )  # fmt: skip
    p.add_argument("--render", type=Path, default=None, help="only re-render RESULT.json's .md")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--demos", type=int, default=10)
    p.add_argument("--rate", type=float, default=25.0, help="steps/s (Fetch's real time: 25)")
    p.add_argument("--px", type=int, default=48)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--strided", type=int, default=2)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument("--window-s", type=float, default=0.4)
    p.add_argument("--max-takeover-s", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--domain", type=int, default=91)
    p.add_argument("--work", type=Path, default=Path("/tmp/roborl_hil_manipulation_ros"))
    p.add_argument("--name", default="hil_manipulation_ros")
    a = p.parse_args()
    if a.render:
        return render(a.render)
    if a.classifier is None:
        p.error("--classifier DIR is required (a classifier from hil_manipulation.py)")
    a.work.mkdir(parents=True, exist_ok=True)
    env = ros_env(a.domain)
    env["MUJOCO_GL"] = env.get("MUJOCO_GL", "egl")
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "CYCLONEDDS_URI",
                                           "ROS_AUTOMATIC_DISCOVERY_RANGE")})  # fmt: skip
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    t0 = time.time()
    sim = node(
        ["sim-robot", "env=fetch_push_pixels", f"env.kwargs.image_size={a.px}",
         "env.kwargs.end_on_success=false", "env.kwargs.max_episode_steps=1000000",
         "cameras=[render]", "transport=rclpy", f"rate_hz={a.rate}", "on_terminate=hold",
         f"seed={a.seed}"],
        env, a.work / "sim.log",
    )  # fmt: skip
    referee = None
    try:
        wait_line(a.work / "sim.log", "sim_robot_start", 120)
        referee = Referee(block_on_goal(), call=True)  # demos end on the success button
        demos = record_demos(a, env, a.work)
        referee.call = False  # training episodes end on the classifier or the step limit
        wrote = [x for x in (a.work / "demos_ros.log").read_text().splitlines() if "wrote" in x]
        demo_info = wrote[-1] if wrote else str(demos)
        calls_before = referee.calls
        run_dir = train(a, env, a.work, demos)
        calls = referee.calls - calls_before
    finally:
        if referee is not None:
            referee.close()
        stop(sim)
    curves = curve(run_dir, a.rate, a.log_every)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    hz = [r["actor/rate_hz"] for r in rows if "actor/rate_hz" in r]
    rates = f"median {np.median(hz):.2f} Hz, min {min(hz):.2f} Hz" if hz else "not logged"
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "wall_s": time.time() - t0,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "demos": demo_info,
        "referee_calls": calls,
        "episodes": sum(p["episodes"] for p in curves),
        "person": person_counts(a.work / "train_person.log"),
        "actor_rate_hz": rates,
        # The robot labels a fired frame with its success button, not pressed in training:
        # the labels say nothing about the task, so no precision (the referee counts instead).
        "reward_fired": {**(fired_precision(run_dir) or {"fired_frames": 0}), "precision": None},
        "curve": curves,
        "run_dir": str(run_dir),
    }
    (OUT / f"{a.name}.json").write_text(json.dumps(result, indent=1, default=str))
    (OUT / f"{a.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
