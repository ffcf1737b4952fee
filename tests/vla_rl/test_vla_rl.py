"""VLA-RL: action tokens, log-probs, PPO's clipped objective, curriculum, end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

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
    width = (tok.q99 - tok.q01) / N_BINS  # one bin, in action units
    err = np.abs(tok.decode(tokens) - actions)[inside]
    assert np.all(err <= width + 1e-9)
    # Outside the 1st/99th percentiles actions saturate at the edge bins (OpenVLA's clipping).
    assert tok.encode(np.array([[100.0, 100.0, 100.0]])).tolist() == [[299, 299, 299]]


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
    subprocess.run(
        [sys.executable, "-m", "roborl.core.cli", *args],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
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


def test_openvla_loader_names_what_is_missing(tmp_path) -> None:
    from roborl.core.errors import CheckpointError
    from roborl.plugins.vla_rl.openvla import check_openvla_folder

    with pytest.raises(CheckpointError, match="does not exist"):
        check_openvla_folder(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        check_openvla_folder(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(CheckpointError, match="auto_map"):
        check_openvla_folder(tmp_path)
    (tmp_path / "config.json").write_text('{"auto_map": {"AutoModelForVision2Seq": "x.Y"}}')
    with pytest.raises(CheckpointError, match="no weight files"):
        check_openvla_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert check_openvla_folder(tmp_path) == tmp_path
