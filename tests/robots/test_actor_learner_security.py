"""The actor-learner link under attack and failure (issue 31): CURVE keys keep a rogue ZeroMQ
peer out of the learner's buffer and away from its weights; 1,000 malformed, oversized or
non-finite frames are dropped and counted while the learner keeps running; a learner bound
off loopback without keys refuses to start; an actor whose learner goes silent holds the
robot and stops, refusing NaN weights while it still hears one.

Everything runs in this process on loopback with real ZeroMQ sockets; the robot is a real
`RobotEnv` and `Ros2Driver` over an in-memory transport that records every command. Waits are
hang guards only: assertions are on counters and recorded commands, never on durations.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import zmq
from cli_server import run_roborl
from robot_helpers import wait_until

from roborl.core.errors import ConfigError
from roborl.core.loops.collectors import Chunk
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.nodes.processes import free_port_pair
from roborl.robots.training.actor_learner import keys as keyring
from roborl.robots.training.actor_learner import wire
from roborl.robots.training.actor_learner.actor_loop import Actor, LearnerLostError
from roborl.robots.training.actor_learner.learner import ActorLearnerCollector
from roborl.robots.training.actor_learner.settings import ActorLearnerConfig, learner_spaces
from roborl.robots.transport.protocol import Transport

ROBOT = {
    "name": "ros2",
    "transport": "dds",
    "joints": ["slider", "hinge"],
    "command": {"joints": ["slider"], "interface_name": "effort"},
    "safety": {"low": [-3.0], "high": [3.0], "max_policy_time_s": 5.0},
    "rate_hz": 50.0,
    "max_episode_steps": 20,
    "terminate": {},
    "reset": {"mode": "wait", "wait_s": 0.0},
}
HANG_GUARD_S = 60.0


def _spaces():
    return learner_spaces(ROBOT, ActorLearnerConfig())


def _ctx(tmp_path: Path, **link) -> SimpleNamespace:
    config = {"robot": ROBOT, "actor_learner": {"spawn": False, "timeout_s": 30.0, **link}}
    return SimpleNamespace(
        config=config, run=SimpleNamespace(eval_every=0), run_dir=tmp_path,
        config_dict=lambda: config, step=0, updates=0, resume_checkpoint=None,
    )  # fmt: skip


def _chunk(n: int = 4, reward: float = 1.0) -> Chunk:
    rng = np.random.default_rng(0)
    return Chunk(
        rng.normal(size=(n, 4)),
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.full(n, reward, np.float32),
        rng.normal(size=(n, 4)),
        np.zeros(n, np.float32),
        None,
        [],
        {"intervened": np.zeros(n, bool)},
    )


def _status(spaces=None) -> bytes:
    if spaces is None:
        spaces = wire.spaces_record(*_spaces())
    return wire.encode_status({"pid": 1, "spaces": spaces, "metrics": {"rate_hz": 50.0}})


def _peer(ctx: zmq.Context, kind: int, address: str, side=None, server_key=None) -> zmq.Socket:
    """A ZeroMQ peer of the learner: the real actor's keys (`side`), a keypair the learner
    does not know (`server_key` only), or no keys at all."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if side is not None:
        keyring.secure_client([sock], side)
    elif server_key is not None:
        public, secret = zmq.curve_keypair()
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = (
            public, secret, server_key,
        )  # fmt: skip
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(address)
    return sock


def _received_rewards(collector: ActorLearnerCollector) -> set[float]:
    return {float(r) for chunk, _ in collector.pending for r in chunk.rewards}


# -- authentication ------------------------------------------------------------------------------


def test_rogue_peers_get_nothing_in_and_no_weights_out(tmp_path: Path) -> None:
    """With keys, only the pinned actor's frames reach the buffer and only it gets weights:
    a peer without keys fails the CURVE handshake, a peer with a keypair of its own (even
    knowing the learner's public key) is refused by the ZAP handler, and both are counted."""
    learner_dir, actor_dir = keyring.make_keys(tmp_path / "keys")
    actor_keys = keyring.load_side(actor_dir, keyring.ACTOR, "keys")
    port = free_port_pair()
    push_at, pub_at = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"
    zctx = zmq.Context()
    actor_push = _peer(zctx, zmq.PUSH, push_at, side=actor_keys)
    actor_sub = _peer(zctx, zmq.SUB, pub_at, side=actor_keys)
    actor_push.send_multipart([wire.STATUS, _status()])
    rogues = [
        (_peer(zctx, zmq.PUSH, push_at), _peer(zctx, zmq.SUB, pub_at)),
        (
            _peer(zctx, zmq.PUSH, push_at, server_key=actor_keys.peer_public),
            _peer(zctx, zmq.SUB, pub_at, server_key=actor_keys.peer_public),
        ),
    ]
    collector = ActorLearnerCollector(_ctx(tmp_path / "run", port=port, keys=str(learner_dir)))
    try:
        algo = SimpleNamespace(state_dict=lambda: {"actor": {"w": torch.ones(3)}})
        for push, _ in rogues:  # valid frames, from peers without the pinned key
            for frames in [[wire.STATUS, _status()]] + [
                [wire.CHUNK, wire.encode_chunk(_chunk(reward=7.0), 0)]
            ] * 20:
                try:  # never blocks: a peer whose handshake fails may have nowhere to queue
                    push.send_multipart(frames, flags=zmq.NOBLOCK)
                except zmq.Again:
                    break
        actor_push.send_multipart([wire.CHUNK, wire.encode_chunk(_chunk(reward=1.0), 0)])
        wait_until(
            lambda: collector._receive(0.05) is not None and 1.0 in _received_rewards(collector),
            HANG_GUARD_S,
            "the pinned actor's chunk",
            interval=0.01,
        )
        wait_until(
            lambda: (
                collector._receive(0.05) is not None
                and collector.counters()["actor/rejected_peers"] >= 2
            ),
            HANG_GUARD_S,
            "both rogues refused",
            interval=0.01,
        )

        def weights_at_actor() -> bool:
            collector._publish(algo)
            if actor_sub.poll(100):
                frames = actor_sub.recv_multipart()
                return frames[0] == wire.WEIGHTS
            return False

        wait_until(weights_at_actor, HANG_GUARD_S, "weights at the pinned actor", interval=0.01)
        for _ in range(10):  # more pushes while the rogues keep trying
            collector._publish(algo)
            collector._receive(0.05)
        assert all(sub.poll(200) == 0 for _, sub in rogues)  # no weights out, no heartbeat
        assert _received_rewards(collector) == {1.0}  # nothing of the rogues got in
        counters = collector.counters()
        assert counters["actor/rejected_peers"] >= 2, counters  # wrong key and no key
        assert collector.pinned is not None and collector.pinned.refused >= 1
    finally:
        collector.close()
        for sock in [actor_push, actor_sub, *(s for pair in rogues for s in pair)]:
            sock.close(0)
        zctx.term()


def test_spawned_actor_keys_are_ephemeral_private_and_pinned(tmp_path: Path) -> None:
    """`make_keys` writes secret files 0600 in 0700 folders; the two sides fit each other."""
    learner_dir, actor_dir = keyring.make_keys(tmp_path / "k")
    learner = keyring.load_side(tmp_path / "k", keyring.LEARNER, "actor_learner.keys")
    actor = keyring.load_side(actor_dir, keyring.ACTOR, "keys")
    assert learner.peer_public == actor.public and actor.peer_public == learner.public
    for secret in (learner_dir / "learner.key_secret", actor_dir / "actor.key_secret"):
        assert secret.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o700
    with pytest.raises(ConfigError, match=r"actor_learner\.keys=.*roborl actor keys dir=DIR"):
        keyring.load_side(tmp_path / "nowhere", keyring.LEARNER, "actor_learner.keys")


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.168.1.20", "*", "gpu-box"])
def test_non_loopback_bind_without_keys_is_refused(tmp_path: Path, bind: str) -> None:
    """One paragraph naming the bind address, the missing key and how to make keys; nothing
    is bound (the port stays free)."""
    port = free_port_pair()
    with pytest.raises(ConfigError) as info:
        ActorLearnerCollector(_ctx(tmp_path, port=port, bind=bind))
    message = str(info.value)
    assert f"actor_learner.bind={bind!r}" in message and "actor_learner.keys" in message
    assert "roborl actor keys dir=DIR" in message and "\n" not in message
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # still free


def test_actor_refuses_a_remote_learner_without_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"learner=10\.1\.2\.3:5555.*keys=DIR"):
        Actor({"robot": ROBOT, "algo": {"name": "sac"}}, "10.1.2.3:5555", 10, "")


# -- malformed frames -----------------------------------------------------------------------------


def _header_only(tensors: dict) -> bytes:
    """A safetensors buffer whose header declares `tensors` (shape/dtype/offsets) over 8 bytes."""
    header = json.dumps(tensors).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * 8


def _frames(rng: np.random.Generator, n: int) -> tuple[list[list[bytes]], dict[str, int], int]:
    """`n` bad messages of every kind, shuffled, with a valid chunk every 20th; returns the
    messages, the drop count expected per reason and the number of valid transitions."""
    good = wire.encode_chunk(_chunk(), 3)
    wide = Chunk(**{**_chunk().__dict__, "obs": np.zeros((4, 6))})
    huge = {"dtype": "F64", "shape": [2**40, 4], "data_offsets": [0, 8]}
    bad_spaces = wire.spaces_record(*_spaces())
    bad_spaces["observation"]["shape"] = [10**12]

    def nan_chunk() -> list[bytes]:
        c = _chunk()
        field = rng.choice(["obs", "next_obs", "actions", "rewards"])
        array = getattr(c, field).copy()
        array.flat[rng.integers(array.size)] = rng.choice([np.nan, np.inf, -np.inf])
        return [wire.CHUNK, wire.encode_chunk(Chunk(**{**c.__dict__, field: array}), 3)]

    makers = {
        "malformed": [
            lambda: [wire.CHUNK, rng.bytes(int(rng.integers(0, 2000)))],
            lambda: [wire.STATUS, rng.bytes(int(rng.integers(0, 200)))],
            lambda: [wire.CHUNK, good[: int(rng.integers(0, len(good)))]],  # truncated
            lambda: [wire.CHUNK, _header_only({"rewards": huge})],
            lambda: [wire.CHUNK, _header_only({"obs": huge, "rewards": huge})],
            lambda: [b"weights", good],  # a kind the learner never takes
            lambda: [wire.CHUNK],
            lambda: [wire.CHUNK, good, good],
            lambda: [wire.STATUS, b"[" * 100_000],  # nested past the recursion limit
        ],
        "shape": [
            lambda: [wire.CHUNK, wire.encode_chunk(wide, 3)],
            lambda: [wire.STATUS, _status(bad_spaces)],
        ],
        "nonfinite": [nan_chunk],
    }
    messages, expected, valid = [], dict.fromkeys(wire.DROP_REASONS, 0), 0
    for i in range(n):
        if i % 20 == 0:
            messages.append([wire.CHUNK, good])
            valid += 4
        reason = rng.choice(list(makers), p=[0.6, 0.1, 0.3])
        options = makers[reason]
        messages.append(options[int(rng.integers(len(options)))]())
        expected[reason] += 1
    return messages, expected, valid


def test_a_thousand_bad_frames_leave_the_learner_running_with_exact_counters(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(31)
    messages, expected, valid = _frames(rng, 1000)
    max_mb = 0.25
    expected["oversized"] = 3  # over the limit but under libzmq's hard cut (twice the limit)
    limit = int(max_mb * 2**20)
    messages += [[wire.CHUNK, rng.bytes(limit + 1000)] for _ in range(3)]
    messages.append([wire.CHUNK, wire.encode_chunk(_chunk(reward=2.0), 3)])
    valid += 4
    port = free_port_pair()
    zctx = zmq.Context()
    push = zctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 0)  # queue everything: sends never wait for the learner
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send_multipart([wire.STATUS, _status()])
    collector = ActorLearnerCollector(_ctx(tmp_path, port=port, max_message_mb=max_mb))
    try:
        for frames in messages:
            push.send_multipart(frames)
        wait_until(
            lambda: (
                collector._receive(0.05) is not None
                and sum(len(c) for c, _ in collector.pending) >= valid
            ),
            HANG_GUARD_S,
            "the valid chunks among the bad ones",
            interval=0.01,
        )
        counters = collector.counters()
        assert {k: int(counters[f"actor/dropped_{k}"]) for k in wire.DROP_REASONS} == expected
        assert sum(len(c) for c, _ in collector.pending) == valid
        # `collect` hands the valid transitions to the loop; the drop counters are logged.
        chunk = collector.collect(None, False)
        assert len(chunk) == valid and np.isfinite(chunk.rewards).all()
        logged = collector.metrics()
        assert logged["actor/dropped_nonfinite"] == expected["nonfinite"]

        # A frame past libzmq's hard cut never reaches Python: the connection is dropped
        # (counted), the learner goes on and the actor's next connection delivers.
        push.send_multipart([wire.CHUNK, rng.bytes(3 * limit)])

        def delivered_after_cut() -> bool:
            push.send_multipart([wire.CHUNK, wire.encode_chunk(_chunk(reward=5.0), 3)])
            collector._receive(0.1)
            return 5.0 in _received_rewards(collector)

        wait_until(
            delivered_after_cut,
            HANG_GUARD_S,
            "a chunk after libzmq cut the oversized peer",
            interval=0.01,
        )
        assert collector.counters()["actor/disconnects"] >= 1
        assert collector.status is not None and collector.status["metrics"] == {"rate_hz": 50.0}
    finally:
        collector.close()
        push.close(0)
        zctx.term()


def test_spaces_come_from_the_learner_config_not_the_first_message(tmp_path: Path) -> None:
    """A first status describing other spaces changes nothing: it is dropped as `shape`, and
    the learner keeps the spaces its robot config gives."""
    port = free_port_pair()
    zctx = zmq.Context()
    push = _peer(zctx, zmq.PUSH, f"tcp://127.0.0.1:{port}")
    other = wire.spaces_record(*_spaces())
    other["observation"]["shape"] = [64]
    push.send_multipart([wire.STATUS, _status(other)])
    push.send_multipart([wire.STATUS, _status()])
    collector = ActorLearnerCollector(_ctx(tmp_path, port=port))
    try:
        obs_space, act_space = _spaces()
        assert collector.observation_space == obs_space and collector.observation_space.shape == (
            4,
        )
        assert collector.action_space == act_space
        assert collector.counters()["actor/dropped_shape"] == 1
    finally:
        collector.close()
        push.close(0)
        zctx.term()


# -- the actor: NaN weights and a silent learner -------------------------------------------------


class RecordingTransport(Transport):
    """An in-memory robot: publishes JointState for slider and hinge at about 200 Hz and
    records every command the driver sends."""

    name = "fake"

    def __init__(self) -> None:
        self.commands: list[list[float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publisher(self, topic: str, msg_type: type, qos: Any = "default"):
        if topic.endswith("/commands"):
            return lambda msg: self.commands.append(list(msg.data))
        return lambda msg: None

    def subscribe(self, topic: str, msg_type: type, callback, qos: Any = "default"):
        if topic == "/joint_states":

            def feed() -> None:
                while not self._stop.wait(0.005):
                    callback(
                        SimpleNamespace(
                            name=["slider", "hinge"], position=[0.1, 0.0], velocity=[0.0, 0.0]
                        )
                    )

            self._thread = threading.Thread(target=feed, daemon=True)
            self._thread.start()
        return None

    def close(self) -> None:
        self._stop.set()


def test_actor_refuses_nan_weights_and_holds_when_the_learner_goes_silent(tmp_path: Path) -> None:
    """The actor waits for its learner before moving, refuses NaN weights (keeps its own),
    loads finite ones, and once nothing arrives for learner_timeout_s it sends the hold and
    stops: the robot's last commands are holds and no motion follows, even when the learner
    speaks again."""
    from roborl.robots.env.driver import Ros2Driver

    transport = RecordingTransport()
    env = RobotEnv(ROBOT, driver=Ros2Driver(ROBOT, transport=transport))
    holds: list[int] = []
    original_hold = env.hold

    def recording_hold() -> None:
        holds.append(len(transport.commands))
        original_hold()

    env.hold = recording_hold
    port = free_port_pair()
    cfg = {
        "robot": ROBOT,
        "algo": {"name": "sac", "hidden_sizes": [8, 8]},
        "actor_learner": {"learner_timeout_s": 1.0},
    }
    zctx = zmq.Context()
    pull = zctx.socket(zmq.PULL)
    pub = zctx.socket(zmq.PUB)
    for sock in (pull, pub):
        sock.setsockopt(zmq.LINGER, 0)
    pull.bind(f"tcp://127.0.0.1:{port}")
    pub.bind(f"tcp://127.0.0.1:{port + 1}")
    actor = Actor(cfg, f"127.0.0.1:{port}", 5, "", env=env)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            actor.run()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        assert transport.commands == []  # no learner heard yet: nothing commanded

        def beat_until(predicate, what: str) -> None:
            deadline = time.monotonic() + HANG_GUARD_S
            while not predicate():
                assert not outcome, outcome
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                pub.send_multipart([wire.HEARTBEAT, wire.encode_heartbeat(0)])
                time.sleep(0.05)

        beat_until(lambda: actor.totals["steps"] >= 10, "steps while the learner is heard")
        assert any(c != [0.0] for c in transport.commands)  # random actions move the robot

        state = actor.algo.state_dict()
        tensors = wire.policy_tensors(state)
        poisoned_key = next(k for k, v in tensors.items() if v.is_floating_point())
        poisoned = {k: v.clone() for k, v in tensors.items()}
        poisoned[poisoned_key].view(-1)[0] = float("nan")
        digest = actor.digest
        pub.send_multipart([wire.WEIGHTS, wire.encode_weights(poisoned, 7)])
        beat_until(lambda: actor.totals["rejected_weights"] == 1, "NaN weights refused")
        assert actor.version == -1 and actor.digest == digest  # its own weights stay
        finite = {k: v + 0.01 if v.is_floating_point() else v for k, v in tensors.items()}
        pub.send_multipart([wire.WEIGHTS, wire.encode_weights(finite, 9)])
        beat_until(lambda: actor.version == 9, "finite weights loaded")
        assert actor.totals["weight_loads"] == 1 and actor.digest != digest
        policy_steps = actor.totals["steps"]
        beat_until(lambda: actor.totals["steps"] >= policy_steps + 10, "policy steps")

        # The learner goes silent: the actor holds and stops by itself.
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], LearnerLostError), outcome
        assert actor.totals["learner_lost"] == 1 and len(holds) == 1
        at_hold = holds[0]
        assert any(c != [0.0] for c in transport.commands[:at_hold])
        after = transport.commands[at_hold:]  # the hold (re-sent every period), nothing else
        assert after and all(c == [0.0] for c in after), after

        # A learner that speaks again does not restart motion.
        sent = len(transport.commands)
        for _ in range(10):
            pub.send_multipart([wire.HEARTBEAT, wire.encode_heartbeat(0)])
            pub.send_multipart([wire.WEIGHTS, wire.encode_weights(finite, 11)])
            time.sleep(0.02)
        assert all(c == [0.0] for c in transport.commands[sent:])  # holds only
        actor.close()  # the final stop: the hold again
        assert len(transport.commands) > sent
        assert all(c == [0.0] for c in transport.commands[at_hold:])
    finally:
        if thread.is_alive():
            actor.stop = True
            thread.join(10)
        if not actor.ctx.closed:
            actor.close()
        pull.close(0)
        pub.close(0)
        zctx.term()


# -- the command line -----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_roborl(args, timeout=300)


def test_cli_makes_keys_and_train_refuses_an_open_bind_without_them(tmp_path: Path) -> None:
    """`roborl actor keys dir=DIR` writes both sides (and will not overwrite them); `roborl
    train` bound to 0.0.0.0 without keys exits 2 with one paragraph naming the key, before it
    binds or trains anything."""
    made = _cli("actor", "keys", f"dir={tmp_path / 'keys'}")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "keys" / "learner" / "learner.key_secret").is_file()
    assert (tmp_path / "keys" / "actor" / "actor.key_secret").is_file()
    again = _cli("actor", "keys", f"dir={tmp_path / 'keys'}")
    assert again.returncode == 2 and "already holds keys" in again.stderr

    refused = _cli(
        "train", "algo=sac", "robot=ros2", "collector=actor_learner", "eval_every=0",
        "actor_learner.bind=0.0.0.0", "actor_learner.spawn=false",
        f"actor_learner.port={free_port_pair()}", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "actor_learner.bind='0.0.0.0'" in refused.stderr
    assert "roborl actor keys dir=DIR" in refused.stderr and "Traceback" not in refused.stderr
