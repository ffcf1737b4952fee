"""CURVE keys for the actor-learner link, and the rule for when they are required.

Without authentication anyone who reaches the learner's ports could fill its replay buffer
with made-up transitions, or subscribe to the policy's weights. ZeroMQ's CURVE mechanism
(Curve25519 keys, encrypted and authenticated connections; built into pyzmq's libzmq) closes
both holes:

- the learner's two sockets are CURVE servers with the learner's keypair;
- a ZAP handler (`zmq.auth.thread.ThreadAuthenticator`) accepts exactly one client public
  key, the actor's ("one actor identity pinned"): a peer without keys fails the handshake, a
  peer with other keys is refused, and neither gets a frame in or a weight out;
- the actor connects as a CURVE client with its keypair and the learner's public key, so it
  also knows it talks to the right learner.

`roborl actor keys dir=DIR` writes one folder per side (the learner's secret key never needs
to leave the learner's machine, the actor's never leaves the robot's):

    DIR/learner/learner.key_secret   learner keypair        -> actor_learner.keys=DIR
    DIR/learner/actor.key            the pinned actor key
    DIR/actor/actor.key_secret       actor keypair          -> roborl actor keys=DIR
    DIR/actor/learner.key            the learner's public key

Files use pyzmq's certificate format (`zmq.auth.load_certificate` reads them); secret files
are created mode 0600 from the start, so they are never readable by other users even
briefly. A learner that spawns its actor makes an ephemeral pair in `<run_dir>/actor/keys`
(a resumed run reuses it, so it can adopt the running actor).

Keys are required whenever the learner binds anything but a loopback address: on loopback
only processes of this machine can connect, anywhere else the network can.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError

LEARNER, ACTOR = "learner", "actor"
DOMAIN = "roborl"


def is_loopback(host: str) -> bool:
    """True only for addresses that no other machine can reach (127.0.0.0/8, ::1,
    localhost). `0.0.0.0`, `*`, interface names and host names all count as reachable."""
    host = host.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _write(path: Path, public: bytes, secret: bytes | None) -> None:
    kind = "Secret" if secret is not None else "Public"
    lines = [
        f"#   ****  Generated on {datetime.datetime.now():%Y-%m-%d %H:%M:%S} by roborl  ****",
        f"#   ZeroMQ CURVE **{kind}** Certificate",
    ]
    if secret is not None:
        lines.append("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
    lines += ["", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    mode = 0o600 if secret is not None else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, mode)  # an existing file keeps its old mode through O_TRUNC


def make_keys(folder: str | os.PathLike) -> tuple[Path, Path]:
    """Write a learner keypair and an actor keypair into `folder/learner` and `folder/actor`,
    each side with the other's public key. Returns (learner folder, actor folder)."""
    import zmq

    root = Path(folder)
    learner_dir, actor_dir = root / LEARNER, root / ACTOR
    for d in (root, learner_dir, actor_dir):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    learner_pub, learner_sec = zmq.curve_keypair()
    actor_pub, actor_sec = zmq.curve_keypair()
    _write(learner_dir / f"{LEARNER}.key_secret", learner_pub, learner_sec)
    _write(learner_dir / f"{ACTOR}.key", actor_pub, None)
    _write(actor_dir / f"{ACTOR}.key_secret", actor_pub, actor_sec)
    _write(actor_dir / f"{LEARNER}.key", learner_pub, None)
    return learner_dir, actor_dir


@dataclass(frozen=True)
class SideKeys:
    """One side's keypair and the peer's public key (z85 bytes, as zmq takes them)."""

    public: bytes
    secret: bytes
    peer_public: bytes


def _side_folder(folder: str | os.PathLike, side: str) -> Path:
    """`folder` itself when it holds `<side>.key_secret`, else `folder/<side>` (so both the
    folder `roborl actor keys` made and the one side's subfolder work)."""
    path = Path(folder).expanduser()
    return path if (path / f"{side}.key_secret").is_file() else path / side


def load_side(folder: str | os.PathLike, side: str, key_name: str) -> SideKeys:
    """The keys of `side` (learner or actor) from `folder`; a clear ConfigError naming the
    missing or unreadable file and `key_name` (the config key that pointed here)."""
    import zmq.auth

    other = ACTOR if side == LEARNER else LEARNER
    where = _side_folder(folder, side)
    secret_file, peer_file = where / f"{side}.key_secret", where / f"{other}.key"
    try:
        public, secret = zmq.auth.load_certificate(secret_file)
        peer_public, _ = zmq.auth.load_certificate(peer_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{key_name}={str(folder)!r}: cannot read the {side}'s CURVE keys "
            f"({secret_file} and {peer_file}: {exc}). Make a pair with `roborl actor keys "
            "dir=DIR` and pass DIR (or its learner/ or actor/ subfolder)."
        ) from exc
    if secret is None or len(public) != 40 or len(secret) != 40 or len(peer_public) != 40:
        raise ConfigError(
            f"{key_name}={str(folder)!r}: {secret_file} or {peer_file} is not a CURVE "
            "certificate (40-character z85 keys); make new ones with `roborl actor keys dir=DIR`."
        )
    return SideKeys(public, secret, peer_public)


class PinnedActor:
    """ZAP credentials provider: accepts the one configured actor key, counts refusals."""

    def __init__(self, actor_public: bytes) -> None:
        self.actor_public = actor_public
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        if key == self.actor_public:
            return True
        self.refused += 1
        return False


def secure_server(ctx: Any, sockets: list[Any], keys: SideKeys) -> tuple[Any, PinnedActor]:
    """Make `sockets` (not yet bound) CURVE servers that only the pinned actor may join.
    Returns the running authenticator (stop it before closing the context) and the
    credentials provider (its `refused` count is logged)."""
    from zmq.auth.thread import ThreadAuthenticator

    pinned = PinnedActor(keys.peer_public)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain=DOMAIN, credentials_provider=pinned)
    for sock in sockets:
        sock.curve_server = True
        sock.curve_publickey = keys.public
        sock.curve_secretkey = keys.secret
        sock.zap_domain = DOMAIN.encode()
    return auth, pinned


def secure_client(sockets: list[Any], keys: SideKeys) -> None:
    """Make `sockets` (not yet connected) CURVE clients of the learner in `keys`."""
    for sock in sockets:
        sock.curve_publickey = keys.public
        sock.curve_secretkey = keys.secret
        sock.curve_serverkey = keys.peer_public
