"""VLA-RL: action tokens, log-probs, PPO's clipped objective, curriculum, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_server import run_roborl

from roborl.plugins.vla_rl.curriculum import SuccessCurriculum
from roborl.plugins.vla_rl.model import TinyVLA
from roborl.plugins.vla_rl.ppo import clipped_policy_loss, clipped_value_loss, gae
from roborl.plugins.vla_rl.tokenizer import N_BINS, ActionTokenizer, WordTokenizer


def test_action_tokens_round_trip_within_one_bin() -> None:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-2.0, 3.0, size=(5000, 3))
    tok = ActionTokenizer.fit(actions, vocab_size=300)
    tokens = tok.encode(actions)
    assert tokens.min() >= 300 - N_BINS and tokens.max() < 300
    inside = np.all((actions >= tok.q01) & (actions <= tok.q99), axis=1)
    width = (tok.q99 - tok.q01) / (N_BINS - 1)  # one of the 255 bins, in action units
    err = np.abs(tok.decode(tokens) - actions)[inside]
    assert np.all(err <= width + 1e-9)
    # Outside the 1st/99th percentiles actions saturate; larger actions take LOWER ids.
    assert tok.encode(np.array([[100.0, 100.0, 100.0]])).tolist() == [[44, 44, 44]]
    assert tok.encode(np.array([[-100.0, -100.0, -100.0]])).tolist() == [[299, 299, 299]]


def test_action_tokens_match_openvlas_published_formula() -> None:
    """OpenVLA (prismatic/vla/action_tokenizer.py): 256 edges linspace(-1, 1, 256), 255
    centres, token = vocab_size - digitize(clip(x, -1, 1), edges); decode = centre of
    clip(vocab_size - token - 1, 0, 254). Values computed here from that formula directly."""
    vocab = 32000  # Llama-2's vocabulary, as in OpenVLA-7B
    q01, q99 = np.array([-0.5, 0.0]), np.array([1.5, 2.0])
    tok = ActionTokenizer(q01, q99, vocab)
    rng = np.random.default_rng(1)
    raw = rng.uniform(-1.0, 2.5, size=(2000, 2))
    edges = np.linspace(-1, 1, 256)
    special = np.array([[-1.0, 1.0], [0.0, 0.0], [1.0, -1.0]])  # normalised: edges and middle
    raw = np.concatenate([raw, (special + 1) / 2 * (q99 - q01 + 1e-8) + q01])
    normed = np.clip(2 * (raw - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)
    expected_tokens = vocab - np.digitize(normed, edges)
    np.testing.assert_array_equal(tok.encode(raw), expected_tokens)
    centres = (edges[:-1] + edges[1:]) / 2
    assert len(centres) == 255
    expected = centres[np.clip(vocab - expected_tokens - 1, 0, 254)]
    unnormed = 0.5 * (expected + 1) * (q99 - q01) + q01
    np.testing.assert_allclose(tok.decode(expected_tokens), unnormed)
    # Larger actions -> lower ids; the clipped extremes hit the first and last ids.
    assert tok.encode(np.array([[1.6, 2.1]])).tolist() == [[vocab - 256, vocab - 256]]
    assert tok.encode(np.array([[-0.5, 0.0]])).tolist() == [[vocab - 1, vocab - 1]]
    assert np.all(np.diff(tok.encode(np.linspace(-0.5, 1.5, 500)[:, None])[:, 0]) <= 0)


def test_prompt_format_is_openvla() -> None:
    words = WordTokenizer.for_instructions(["reach the red block"])
    ids = words.encode_prompt("reach the red block")
    text = " ".join(words.words[i] for i in ids[1:])
    assert text == "in : what action should the robot take to reach the red block ? \n out :"


def test_summed_token_log_prob_is_the_action_log_prob() -> None:
    """log pi(a) from the trainer (teacher forcing, one pass) equals the sum of the per-token
    log-probs that decoding produced, and the action distribution sums to one."""
    torch.manual_seed(0)
    model = TinyVLA(vocab_size=20 + N_BINS, action_dim=2, hidden=32, layers=1, heads=2)
    images = torch.randint(0, 255, (3, 64, 64, 3), dtype=torch.uint8)
    prompts = torch.tensor([[0, 1, 5, 6], [1, 7, 8, 9], [0, 0, 1, 5]])  # left-padded
    tokens, logp_decode = model.generate(images, prompts, temperature=1.0)
    logp_train, _ = model.action_log_prob(images, prompts, tokens)
    torch.testing.assert_close(logp_train, logp_decode, atol=1e-4, rtol=1e-4)

    # Chain rule by enumeration on one sample: sum_a1 sum_a2 p(a1) p(a2|a1) = 1.
    img, pr = images[:1], prompts[:1]
    first = torch.log_softmax(model.action_logits(img, pr, torch.full((1, 2), 20))[0, 0], -1)
    total = 0.0
    for a1 in range(0, N_BINS, 51):  # a sample of first tokens, each must agree with the pass
        seq = torch.tensor([[20 + a1, 20]])
        second = torch.log_softmax(model.action_logits(img, pr, seq)[0, 1], -1)
        for a2 in (0, 100, 255):
            both = model.action_log_prob(img, pr, torch.tensor([[20 + a1, 20 + a2]]))[0]
            torch.testing.assert_close(both[0], first[a1] + second[a2], atol=1e-4, rtol=1e-4)
        total += float((first[a1].exp() * second.exp().sum()).detach())
    assert total == pytest.approx(float(first[::51].exp().sum().detach()), rel=1e-4)


def test_ppo_clipped_objective_hand_computed() -> None:
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7]))
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    # ratio*A = [1.5, 0.5, -2.2, -0.7]; clipped ratio = [1.2, 0.8, 1.1, 0.8] -> [1.2, 0.8, -2.2, -0.8]
    # min = [1.2, 0.5, -2.2, -0.8]; loss = -mean = -(-1.3)/4 = 0.325
    loss, frac = clipped_policy_loss(new, old, adv, clip=0.2)
    assert float(loss) == pytest.approx(0.325, abs=1e-6)
    assert float(frac) == pytest.approx(0.75)
    v = clipped_value_loss(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([3.0]), clip=0.2)
    # unclipped (2-3)^2 = 1; clipped (1.2-3)^2 = 3.24 -> 0.5 * 3.24
    assert float(v) == pytest.approx(1.62)


def test_gae_matches_hand_computation() -> None:
    r = torch.tensor([[1.0], [0.0], [2.0]])
    v = torch.tensor([[0.5], [0.4], [0.3]])
    d = torch.tensor([[0.0], [1.0], [0.0]])
    adv, ret = gae(r, v, d, torch.tensor([0.2]), gamma=0.9, lam=0.8)
    d2 = 2.0 + 0.9 * 0.2 - 0.3
    d1 = 0.0 - 0.4  # episode ends at step 1: no bootstrap, recursion stops
    d0 = 1.0 + 0.9 * 0.4 - 0.5
    expected = torch.tensor([[d0 + 0.9 * 0.8 * d1], [d1], [d2]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + v)


def test_curriculum_prefers_tasks_near_half_success() -> None:
    cur = SuccessCurriculum(4, temperature=0.1)
    patterns = [
        lambda i: False,  # never solved
        lambda i: i % 2 == 0,  # solved half the time
        lambda i: i % 10 != 0,  # solved 90% of the time
        lambda i: True,  # always solved
    ]
    for task, solved in enumerate(patterns):
        for i in range(40):
            cur.update(task, solved(i))
    p = cur.probabilities()
    assert int(np.argmax(p)) == 1
    draws = np.bincount([cur.sample(np.random.default_rng(i)) for i in range(400)], minlength=4)
    assert draws[1] > draws[0] + draws[2] + draws[3]


def test_two_iteration_run_end_to_end(tmp_path) -> None:
    args = [
        "train",
        "algo=vla_rl",
        "env=tabletop",
        "algo.demos_per_task=2",
        "algo.sft_steps=10",
        "algo.prm_steps=5",
        "algo.iterations=2",
        "algo.num_envs=2",
        "algo.rollout_steps=6",
        "algo.critic_warmup_iterations=1",
        "algo.eval_episodes_per_task=1",
        "eval_episodes=1",
        "progress=false",
    ]
    proc = run_roborl(args, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary_path,) = tmp_path.rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["algo"] == "vla_rl" and summary["steps"] == 2 * 2 * 6
    records = [
        json.loads(x) for x in (summary_path.parent / "metrics.jsonl").read_text().splitlines()
    ]
    warm = [r for r in records if "train/critic_warmup" in r]
    assert [r["train/critic_warmup"] for r in warm] == [1.0, 0.0]  # critic warm-up, then PPO
    assert "train/policy_loss" not in warm[0] and "train/policy_loss" in warm[1]
    assert any("sft/success/mean" in r for r in records)
    ckpt = torch.load(summary_path.parent / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["state"]["iteration"] == 2


def _tiny_model() -> tuple[TinyVLA, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = TinyVLA(vocab_size=20 + N_BINS, action_dim=2, hidden=32, layers=1, heads=2)
    images = torch.randint(0, 255, (4, 64, 64, 3), dtype=torch.uint8)
    prompts = torch.tensor([[0, 1, 5, 6], [1, 7, 8, 9], [0, 0, 1, 5], [1, 5, 5, 6]])
    return model, images, prompts


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_log_probs_are_of_the_tempered_sampling_distribution(temperature: float) -> None:
    """Issue 17 item 4: tokens are sampled from softmax(logits / T), so the stored log-prob
    and the trainer's recomputed one must both be log softmax(logits / T); with untempered
    log-probs PPO's ratio compares the wrong distributions whenever T != 1."""
    model, images, prompts = _tiny_model()
    gen = torch.Generator().manual_seed(0)
    tokens, logp_decode = model.generate(images, prompts, temperature, generator=gen)
    with torch.no_grad():
        logits = model.action_logits(images, prompts, tokens)  # (B, D, 256), untempered
    bins = tokens - model.first_action_token
    tempered = torch.log_softmax(logits / temperature, -1).gather(-1, bins[..., None])
    torch.testing.assert_close(logp_decode, tempered.squeeze(-1).sum(-1), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        logp_train, _ = model.action_log_prob(images, prompts, tokens, temperature)
    torch.testing.assert_close(logp_train, logp_decode, atol=1e-4, rtol=1e-4)
    untempered = torch.log_softmax(logits, -1).gather(-1, bins[..., None]).squeeze(-1).sum(-1)
    assert (untempered - logp_decode).abs().max() > 1e-2  # the two really differ here


def _vla(seed: int):
    import gymnasium as gym

    from roborl.plugins.vla_rl.algorithm import VLARL, VLARLConfig

    obs_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
            "task": gym.spaces.Discrete(2),
        }
    )
    act_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    algo = VLARL(obs_space, act_space, VLARLConfig(hidden_size=16, layers=1, heads=2))
    algo.setup(["reach the red block", "push the cube"], {"q01": [-1, -1], "q99": [1, 1]}, seed)
    return algo


def test_initial_networks_follow_the_runs_seed() -> None:
    """Issue 17 item 4: setup() seeded torch with 0, so every seed started from the same
    networks and seed-to-seed spread (the CIs) came out too narrow."""
    first = _vla(0).policy_model.state_dict()
    same = _vla(0).policy_model.state_dict()
    other = _vla(1).policy_model.state_dict()
    name = next(k for k in first if k.endswith("weight"))
    torch.testing.assert_close(first[name], same[name])
    assert not torch.equal(first[name], other[name])


def test_checkpoint_with_the_old_action_tokens_is_a_clear_error() -> None:
    from roborl.core.errors import CheckpointError

    state = _vla(0).state_dict()
    _vla(0).load_state_dict(state)  # this version's checkpoints load
    del state["action_tokens"]
    with pytest.raises(CheckpointError, match="OpenVLA's action tokens"):
        _vla(0).load_state_dict(state)
