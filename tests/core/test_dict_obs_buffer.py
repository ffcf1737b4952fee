"""Dict observations in the replay buffer: frames stored once, next_obs always the env's.

The env below writes (env seed, episode, step) into every pixel row of its image, so each
frame is unique and a wrong shared-storage link (the reset obs in place of an episode's final
obs, a stale slot after wrap-around) shows up as a mismatch against what the env returned.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.loops.collectors import real_next_obs


class CountingPixels(gym.Env):
    """Episodes of random length that end by termination or by the time limit."""

    def __init__(self, size: int = 6) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
            }
        )
        self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.size = size
        self.episode = 0
        self.t = 0
        self.tag = 0

    def _obs(self) -> dict[str, np.ndarray]:
        img = np.zeros((self.size, self.size, 3), np.uint8)
        img[..., 0] = self.tag
        img[..., 1] = self.episode % 256
        img[..., 2] = self.t
        return {"image": img, "state": np.array([self.episode, self.t], np.float64)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.tag = seed
        self.episode += 1
        self.t = 0
        self.limit = int(self.np_random.integers(2, 7))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        terminated = self.t >= self.limit
        return self._obs(), float(self.t + 0.5 * self.tag), terminated, False, {}


def _vec(n: int) -> gym.vector.SyncVectorEnv:
    makers = [lambda: gym.wrappers.TimeLimit(CountingPixels(), max_episode_steps=4)] * n
    return gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def _collect(n_envs: int, steps: int, seed: int = 0):
    """Transitions as the VectorCollector makes them, plus a flat reference copy of each."""
    envs = _vec(n_envs)
    obs, _ = envs.reset(seed=[seed + 10 * i for i in range(n_envs)])
    chunks = []
    for _ in range(steps):
        act = np.zeros((n_envs, 1), np.float32)
        nxt, rew, term, trunc, infos = envs.step(act)
        done = term | trunc
        chunks.append((obs, act, rew, real_next_obs(nxt, infos, done), term.astype(np.float32)))
        obs = nxt
    envs.close()
    return chunks


def _ref(chunks, capacity: int, n_envs: int):
    """(obs, next_obs) per slot of a ring buffer fed with these chunks, in slot order."""
    flat = []
    for obs, _, _, nxt, _ in chunks:
        for i in range(n_envs):
            flat.append(({k: v[i] for k, v in obs.items()}, {k: v[i] for k, v in nxt.items()}))
    slots: dict[int, tuple] = {}
    for t, pair in enumerate(flat):
        slots[t % capacity] = pair
    return slots


def _fill(buf: ReplayBuffer, chunks) -> None:
    for obs, act, rew, nxt, term in chunks:
        buf.add(obs, act, rew, nxt, term)


def _assert_slots(buf: ReplayBuffer, ref) -> None:
    slots = torch.tensor(sorted(ref), dtype=torch.long)
    nxt = buf.next_observation(slots)
    for row, s in enumerate(slots.tolist()):
        want_obs, want_next = ref[s]
        for k in ("image", "state"):
            assert np.array_equal(buf.obs[k][s].cpu().numpy(), want_obs[k]), (s, k)
            assert np.array_equal(nxt[k][row].cpu().numpy(), want_next[k]), (s, k)


def _space() -> gym.spaces.Dict:
    return CountingPixels().observation_space


@pytest.mark.parametrize(("n_envs", "capacity"), [(1, 13), (3, 20), (3, 21), (2, 64)])
def test_next_obs_is_what_the_env_returned_across_episode_ends_and_wraparound(n_envs, capacity):
    chunks = _collect(n_envs, 40)
    assert any(t.any() for *_, t in chunks), "episodes must end inside the test data"
    buf = ReplayBuffer(capacity, _space(), (1,))
    _fill(buf, chunks)
    assert len(buf) == min(capacity, 40 * n_envs)
    _assert_slots(buf, _ref(chunks, capacity, n_envs))
    # images are uint8 and state float32 in storage and in batches
    batch = buf.sample(64, torch.Generator().manual_seed(0))
    assert batch.obs["image"].dtype == torch.uint8 and batch.next_obs["image"].dtype == torch.uint8
    assert batch.obs["state"].dtype == torch.float32
    # every sampled (obs, next_obs) pair is one the env produced
    pairs = {
        (o["image"].tobytes(), n["image"].tobytes())
        for o, n in _ref(chunks, capacity, n_envs).values()
    }
    for i in range(len(batch)):
        got = (
            batch.obs["image"][i].numpy().tobytes(),
            batch.next_obs["image"][i].numpy().tobytes(),
        )
        assert got in pairs


def test_frames_are_stored_once():
    n_envs, capacity = 2, 40
    chunks = _collect(n_envs, 60)
    buf = ReplayBuffer(capacity, _space(), (1,))
    _fill(buf, chunks)
    flat = [
        ({k: v[i] for k, v in obs.items()}, {k: v[i] for k, v in nxt.items()})
        for obs, _, _, nxt, _ in chunks
        for i in range(n_envs)
    ]
    total = len(flat)
    # a transition's next frame is shared exactly when the same env's next transition starts
    # from it (no episode end) and that transition is held
    want_shared = {
        t % capacity
        for t in range(total - capacity, total - n_envs)
        if np.array_equal(flat[t][1]["image"], flat[t + n_envs][0]["image"])
    }
    held = buf._next[: buf.size]
    shared = {s for s in range(capacity) if int(held[s]) < capacity}
    assert shared == want_shared
    assert len(shared) > capacity // 2 and len(shared) < capacity - n_envs  # episodes ended
    side_live = buf._side["image"].shape[0] - len(buf._free)
    assert side_live == buf.size - len(shared)
    frame = 6 * 6 * 3
    image_bytes = buf.obs["image"].numel() + buf._side["image"].numel()
    assert image_bytes < 2 * capacity * frame * 0.9


def test_non_consecutive_adds_never_share_a_wrong_frame():
    """Transitions from unrelated sources (demos, interventions) are not linked."""
    a = _collect(1, 10, seed=1)
    b = _collect(1, 10, seed=2)
    mixed = [x for pair in zip(a, b) for x in pair]
    buf = ReplayBuffer(100, _space(), (1,))
    _fill(buf, mixed)
    _assert_slots(buf, _ref(mixed, 100, 1))
    assert bool((buf._next[:20] >= 100).all())


def test_stride_change_and_small_capacity():
    chunks = _collect(3, 12)
    buf = ReplayBuffer(5, _space(), (1,))  # capacity < 2 * n_envs: nothing can be linked
    for obs, act, rew, nxt, term in chunks:
        for i in (slice(0, 2), slice(2, 3)):
            buf.add({k: v[i] for k, v in obs.items()}, act[i], rew[i],
                    {k: v[i] for k, v in nxt.items()}, term[i])  # fmt: skip
    flat = [(obs, nxt) for obs, _, _, nxt, _ in chunks]
    ref = {}
    t = 0
    for obs, nxt in flat:
        for i in range(3):
            ref[t % 5] = ({k: v[i] for k, v in obs.items()}, {k: v[i] for k, v in nxt.items()})
            t += 1
    _assert_slots(buf, ref)


def test_nstep_matches_the_flat_buffer():
    """The same data in a Box buffer (boundary found by comparing frames) gives the same
    n-step returns and discounts as the Dict buffer (boundary found by its links)."""
    n_envs, capacity = 3, 45
    chunks = _collect(n_envs, 30)
    dbuf = ReplayBuffer(capacity, _space(), (1,))
    fbuf = ReplayBuffer(capacity, (6 * 6 * 3 + 2,), (1,))

    def flat(o):
        return np.concatenate([o["image"].reshape(len(o["image"]), -1), o["state"]], 1)

    for obs, act, rew, nxt, term in chunks:
        dbuf.add(obs, act, rew, nxt, term)
        fbuf.add(flat(obs), act, rew, flat(nxt), term)
    for n in (1, 3):
        d = dbuf.sample_nstep(256, n, 0.9, torch.Generator().manual_seed(3))
        f = fbuf.sample_nstep(256, n, 0.9, torch.Generator().manual_seed(3))
        assert torch.allclose(d.rewards, f.rewards)
        if n > 1:
            assert torch.equal(d.discount, f.discount)
            assert bool((d.discount > 0.9**n + 1e-6).any()), "some samples must stop early"
        assert torch.equal(d.terminated, f.terminated)
        got_next = torch.cat([d.next_obs["image"].flatten(1).float(), d.next_obs["state"]], 1)
        assert torch.equal(got_next, f.next_obs)


def test_extras_are_stored_and_sampled():
    chunks = _collect(2, 10)
    buf = ReplayBuffer(50, _space(), (1,), extras={"intervened": ((), np.bool_)})
    for j, (obs, act, rew, nxt, term) in enumerate(chunks):
        flags = np.array([j % 2 == 0, False])
        buf.add(obs, act, rew, nxt, term, extras={"intervened": flags, "unknown": flags})
    batch = buf.sample(200, torch.Generator().manual_seed(0))
    flag = batch.extras["intervened"]
    assert flag.dtype == torch.bool and set(batch.extras) == {"intervened"}
    # intervened iff the obs came from env 0 at an even step
    img = batch.obs["image"]
    step_rows = buf.obs["image"][:20, 0, 0, 0]
    assert flag.any() and (~flag).any()
    for i in range(len(batch)):
        slot = int(torch.nonzero((buf.obs["image"][:20] == img[i]).flatten(1).all(1))[0])
        assert bool(flag[i]) == ((slot // 2) % 2 == 0 and slot % 2 == 0)
    del step_rows
    # a Box buffer keeps extras the same way
    box = ReplayBuffer(10, (2,), (1,), extras={"w": ((2,), np.float32)})
    box.add(np.zeros((2, 2)), np.zeros((2, 1)), np.zeros(2), np.zeros((2, 2)), np.zeros(2),
            extras={"w": np.ones((2, 2))})  # fmt: skip
    assert torch.equal(box.sample(4).extras["w"], torch.ones(4, 2))


def test_checkpoint_round_trip_then_keep_adding(tmp_path):
    chunks = _collect(2, 50)
    capacity = 30
    buf = ReplayBuffer(capacity, _space(), (1,), with_costs=True, extras={"x": ((), np.float32)})
    _fill(buf, chunks[:25])
    path = tmp_path / "b.pt"
    torch.save(buf.state_dict(), path)
    state = torch.load(path, weights_only=True)
    again = ReplayBuffer(capacity, _space(), (1,), with_costs=True, extras={"x": ((), np.float32)})
    again.load_state_dict(state)
    _fill(again, chunks[25:])
    _fill(buf, chunks[25:])
    _assert_slots(again, _ref(chunks, capacity, 2))
    a = again.sample(32, torch.Generator().manual_seed(1))
    b = buf.sample(32, torch.Generator().manual_seed(1))
    for k in ("image", "state"):
        assert torch.equal(a.obs[k], b.obs[k]) and torch.equal(a.next_obs[k], b.next_obs[k])
    with pytest.raises(ValueError, match="Dict"):
        ReplayBuffer(capacity, (3,), (1,)).load_state_dict(state)


def test_box_buffer_unchanged():
    """Box spaces keep separate float32 obs/next_obs tensors and the old state_dict keys."""
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    buf = ReplayBuffer(8, space, (1,))
    assert buf.obs.shape == (8, 3) and buf.next_obs.shape == (8, 3)
    buf.add(np.ones((2, 3)), np.zeros((2, 1)), np.zeros(2), 2 * np.ones((2, 3)), np.zeros(2))
    assert set(buf.state_dict()) >= {"obs", "next_obs", "actions", "rewards", "terminated"}
    assert torch.equal(buf.sample(3).next_obs, 2 * torch.ones(3, 3))


@pytest.mark.parametrize("capacity", [200, 33])
def test_extend_with_dataset_rows_shares_frames_inside_episodes(capacity):
    """Demo rows added in one call: next obs right everywhere, shared inside episodes."""
    chunks = _collect(1, 60, seed=5)
    obs = {k: np.concatenate([c[0][k] for c in chunks]) for k in ("image", "state")}
    nxt = {k: np.concatenate([c[3][k] for c in chunks]) for k in ("image", "state")}
    act = np.concatenate([c[1] for c in chunks])
    rew = np.concatenate([c[2] for c in chunks])
    term = np.concatenate([c[4] for c in chunks])
    buf = ReplayBuffer(capacity, _space(), (1,))
    buf.add(*(x[:1] if not isinstance(x, dict) else {k: v[:1] for k, v in x.items()}
              for x in (obs, act, rew, nxt, term)))  # fmt: skip
    buf.extend(obs, act, rew, nxt, term)  # 1 + 60 rows, the first row repeated
    rows = [({k: v[0] for k, v in obs.items()}, {k: v[0] for k, v in nxt.items()})]
    rows += [
        ({k: v[i] for k, v in obs.items()}, {k: v[i] for k, v in nxt.items()}) for i in range(60)
    ]
    ref = {}
    for t, pair in enumerate(rows):
        ref[t % capacity] = pair
    if capacity < len(rows):
        ref = {t % capacity: rows[t] for t in range(len(rows) - capacity, len(rows))}
    _assert_slots(buf, ref)
    live = range(max(0, len(rows) - capacity), len(rows) - 1)
    want = {
        t % capacity for t in live if np.array_equal(rows[t][1]["image"], rows[t + 1][0]["image"])
    }
    shared = {s for s in range(buf.size) if int(buf._next[s]) < capacity}
    assert shared == want and len(want) > len(live) // 2
    # n-step walks rows one by one (stride 1) and stops at episode ends
    batch = buf.sample_nstep(128, 3, 0.5, torch.Generator().manual_seed(0))
    assert set(batch.discount.tolist()) <= {0.5, 0.25, 0.125} and (batch.discount == 0.125).any()


def test_full_buffer_loads_into_a_larger_one():
    """A resumed run with more total_steps builds a larger buffer: the ring is unrolled."""
    chunks = _collect(2, 40)
    small = ReplayBuffer(30, _space(), (1,))
    _fill(small, chunks[:25])  # 50 transitions through 30 slots: wrapped
    big = ReplayBuffer(70, _space(), (1,))
    big.load_state_dict(small.state_dict())
    _fill(big, chunks[25:])  # 30 more: 60 held of 70
    flat = [
        ({k: v[i] for k, v in o.items()}, {k: v[i] for k, v in x.items()})
        for o, _, _, x, _ in chunks
        for i in range(2)
    ]
    held = flat[20:]  # the 30 the small buffer kept, then the 30 added
    _assert_slots(big, dict(enumerate(held)))
    assert len(big) == 60
