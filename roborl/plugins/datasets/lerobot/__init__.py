"""LeRobotDataset v3 directories in and out (`dataset=DIR`, `demos=DIR`, ``out=lerobot:DIR``).

LeRobot stores frames, roborl transitions, and the two differ by one observation per episode:
an episode of T transitions (o_t, a_t, r_t, o_{t+1}) has T + 1 observations. The rule:

- **roborl -> LeRobot:** T + 1 frames. Frame t < T holds ``observation.*`` = o_t,
  ``action`` = a_t, ``next.reward`` = r_t, ``next.done`` (true on the last transition),
  ``next.truncated`` (the episode ended by time limit, not termination), and, when present,
  ``next.success``, ``complementary_info.cost``, ``complementary_info.is_intervention``.
  Frame T holds the final observation o_T with ``complementary_info.final_observation`` true;
  its action and flags copy frame T-1's (as LeRobot's own rollout recorder pads a final
  observation), its reward and cost are 0 and it is no intervention.
- **LeRobot -> roborl:** with that column, every frame but the last of an episode is a
  transition whose next observation is the next frame's, so nothing is lost. Without it (a
  dataset recorded by LeRobot or anyone else) frames are steps: see
  `reader._native_rows` for the last frame of each episode.

Observation keys: a Box observation is ``observation.state``; a Dict observation's (H, W, 3)
uint8 entries are videos ``observation.images.<key>``, its ``state`` entry is
``observation.state`` and any other vector ``observation.<key>``. roborl's own metadata (spaces,
reference returns) rides along in ``meta/roborl_metadata.json``, which LeRobot ignores.
"""

from __future__ import annotations

from pathlib import Path

from roborl.core.datasets import OfflineDataset
from roborl.plugins.datasets.lerobot.reader import load_lerobot
from roborl.plugins.datasets.lerobot.writer import save_lerobot

SCHEME = "lerobot"

__all__ = ["SCHEME", "accepts", "load_lerobot", "load_lerobot_source", "save_lerobot"]


def _strip(path: str) -> str:
    prefix = SCHEME + ":"
    return path[len(prefix) :] if path.startswith(prefix) else path


def accepts(path: str) -> bool:
    """``lerobot:DIR``, or a directory laid out like a LeRobotDataset (a `meta/` folder or
    `data/chunk-*` folders) that is not a Minari dataset."""
    if str(path).startswith(SCHEME + ":"):
        return True
    p = Path(path)
    if not p.is_dir() or (p / "data" / "metadata.json").is_file():
        return False
    return (p / "meta").is_dir() or any((p / "data").glob("chunk-*"))


def load_lerobot_source(path: str) -> OfflineDataset:
    """`dataset=` / `demos=` loader (with `accepts` for the registry)."""
    return load_lerobot(_strip(str(path)))


load_lerobot_source.accepts = accepts  # type: ignore[attr-defined]
