"""`roborl actor`: the robot-side process of `collector=actor_learner`.

It owns the robot env (driver + safety layer) and runs the policy at the control rate, one
`env.step` per tick, with nothing between two ticks but inference, a non-blocking send of the
finished transitions and, when new weights arrived, loading them. It never computes a gradient.
It keeps acting with its last weights while the learner is slow, gone or restarting: sends
never block (ZeroMQ queues up to `send_hwm` chunks, then the actor drops and counts them) and
the sockets reconnect by themselves when a learner binds the address again.

It commands the robot only while it hears its learner: it waits for the first heartbeat or
weights before the first reset, and when neither arrives for `actor_learner.learner_timeout_s`
(the learner died, hangs or the network is gone) it sends the robot's hold command, stops
commanding and exits with an error; it never starts moving again by itself (restart it, or
resume the learner, which starts a new one). A learner that comes back within the timeout
simply carries on. Weights holding NaN/inf are refused (counted as `rejected_weights`, the
current ones stay). Before the first weights arrive it draws uniform random actions (the
learner's `learning_starts` phase). Every ~second it prints a JSON `actor_stats` event on stdout and
sends the same figures to the learner, which writes them to `<run_dir>/actor/metrics.jsonl`:
achieved control rate, tick period and policy latency p50/p99 (latency = from an observation
handed out to the next command's `step` call: inference, sends, weight loads).

    roborl actor config=<run_dir>/actor/config.json learner=HOST:PORT [keys=DIR] [log_dir=DIR]
    roborl actor keys dir=DIR      (make a CURVE keypair for the learner and the actor)

The learner writes `config.json` (the run's config) and starts this command itself for a local
run, with ephemeral keys; on a robot machine start it by hand with the learner's address and
`keys=DIR/actor` from `roborl actor keys` (required unless the learner is on loopback: an
actor that took weights from an impostor would move the robot as the impostor wishes).
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.cli import command_options, logs
from roborl.core.config import rng
from roborl.core.errors import ConfigError, RobotError
from roborl.core.stop_signals import STOP_SIGNALS
from roborl.robots.nodes.common import emit_event, guard_command
from roborl.robots.training.actor_learner import keys as keyring
from roborl.robots.training.actor_learner.actor_loop import Actor


@dataclass
class ActorOptions:
    """`roborl actor` keys."""

    config: str | None = field(
        default=None,
        metadata={
            "help": "the learner's <run_dir>/actor/config.json (robot, algo and run config) "
            "(required)"
        },
    )
    learner: str = field(default="127.0.0.1:5555", metadata={"help": "where the learner listens"})
    log_dir: str | None = field(
        default=None, metadata={"help": "also append the actor's stats to DIR/actor_stats.jsonl"}
    )
    send_every: int = field(
        default=10, metadata=rng(1, None, "transitions per message to the learner")
    )
    keys: str | None = field(
        default=None,
        metadata={
            "help": "the actor's CURVE keys (DIR/actor of `roborl actor keys dir=DIR`); "
            "required unless the learner is on loopback"
        },
    )


@dataclass
class KeysOptions:
    """`roborl actor keys` keys."""

    dir: str | None = field(
        default=None, metadata={"help": "a new folder for the two keypairs (required)"}
    )


def parse_args(argv: list[str]) -> ActorOptions:
    opts, _ = command_options(ActorOptions, argv, "actor")
    if not opts.config:
        raise ConfigError(
            "roborl actor needs config=PATH (the learner's <run_dir>/actor/config.json)."
        )
    return opts


def actor_help() -> str:
    from roborl.core.help import field_lines, section

    return (
        f"{__doc__}\n"
        + section("Keys", field_lines(ActorOptions))
        + "\n`roborl actor keys dir=DIR` writes DIR/learner (for actor_learner.keys=DIR on the "
        "learner's\nmachine) and DIR/actor (copy it to the robot machine: keys=DIR/actor); "
        "secret files are 0600.\n"
        + section("`roborl actor keys` keys", field_lines(KeysOptions))
        + logs.HELP
    )


def keys_main(argv: list[str]) -> int:
    """`roborl actor keys dir=DIR`: a learner keypair and an actor keypair, each side with the
    other's public key, so exactly this actor can join exactly this learner."""
    opts, _ = command_options(KeysOptions, argv, "actor keys")
    if not opts.dir:
        raise ConfigError("roborl actor keys: expected dir=DIR (a new folder for the keys).")
    root = Path(opts.dir).expanduser()
    if (root / keyring.LEARNER).exists() or (root / keyring.ACTOR).exists():
        raise ConfigError(
            f"roborl actor keys dir={root}: it already holds keys; pick a new folder (replacing "
            "keys would lock out the actor that has them)."
        )
    learner_dir, actor_dir = keyring.make_keys(root)
    print(
        f"learner keys: {learner_dir}  ->  roborl train ... actor_learner.keys={root}\n"
        f"actor keys:   {actor_dir}  ->  copy to the robot machine; roborl actor ... "
        f"keys={actor_dir}"
    )
    return 0


def actor_main(argv: list[str]) -> int:
    """Run the actor of a `collector=actor_learner` run beside the robot."""
    if any(a in ("-h", "--help") for a in argv):
        print(actor_help())
        return 0
    if argv[:1] == ["keys"]:
        return keys_main(argv[1:])
    opts = parse_args(argv)
    assert opts.config is not None
    try:
        payload = json.loads(Path(opts.config).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"roborl actor: cannot read config={opts.config!r} ({exc}).") from exc
    cfg = payload.get("config") if isinstance(payload, dict) else None
    if not isinstance(cfg, dict) or not cfg.get("robot") or not cfg.get("algo"):
        raise ConfigError(
            f"{opts.config}: expected {{'config': <run config with robot and algo>}}."
        )
    actor = Actor(cfg, opts.learner, opts.send_every, opts.log_dir or "", opts.keys or "")

    def on_signal(signum: int, frame: Any) -> None:
        actor.stop = True

    for signum in STOP_SIGNALS:  # Ctrl-C keeps the env's handler: e-stop first
        if signum != signal.SIGINT:
            signal.signal(signum, on_signal)
    try:
        actor.run()
    except RobotError as exc:
        emit_event(event="actor_error", error=str(exc))
        raise
    finally:
        try:
            actor._poll_weights()  # weights a learner pushed just before it stopped us
            actor._report({})  # the final totals and weights version, in the log too
            emit_event(event="actor_stop", **actor.totals)
        finally:  # the final hold, even when those weights do not fit (RobotError)
            actor.close()
            driver = getattr(actor.env.unwrapped, "driver", None)
            # After the final hold: how many commands went out, so a robot can check it got all.
            emit_event(event="actor_closed", commands_sent=getattr(driver, "sent", None))
            sys.stdout.flush()
    return 0


actor_cmd = guard_command(
    actor_main, "actor", "run a policy on the robot for a collector=actor_learner learner"
)
