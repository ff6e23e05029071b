"""verl's releases before 0.8.0 (`--flavor verl@X`), each with numbers worked out here from the formula of that
release's code (verl-project/verl at the tag: verl/trainer/ppo/core_algos.py, ray_trainer.py), not from advcli:

- 0.2-0.3 put β·KL in the reward unless actor_rollout_ref.actor.use_kl_loss (ray_trainer.fit @v0.3.0.post1);
  0.4.0 only with algorithm.use_kl_in_reward (default false);
- 0.4.1 and before step gae through every position (compute_gae_advantage_return @v0.4.1), 0.5.0 jumps over
  mask=0 tokens (@v0.5.0);
- 0.6.0-0.7.1's grpo_vectorized floors the group variance at its epsilon 1e-6 (verl/utils/groupwise.py
  group_mean_std @v0.7.1, called with eps=epsilon); 0.8.0 does not (@v0.8.0);
- what a release's code lacks is refused (exit 2), as the trainer itself would not run it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from _released import advcli_run
from conftest import run_main

from advcli.flavors import get, release_of


def f32(x: float) -> float:
    return float(np.float32(x))


def grpo(scores: list[float], eps: float = 1e-6) -> list[float]:
    """verl's compute_grpo_outcome_advantage for one group: (s − mean)/(unbiased std + eps)."""
    n = len(scores)
    mean = sum(scores) / n
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1))
    return [(s - mean) / (std + eps) for s in scores]


def kl_rows() -> list[dict]:
    """One group of 4, rewards [1, 0, 0, 0], three tokens each; row i's reference is 0.5·i below the policy, so
    its k1 KL is 0.5·i per token."""
    return [dict(prompt_id="p0", reward=r, mask=[1, 1, 1], old=[-1.0] * 3, ref=[-1.0 - 0.5 * i] * 3,
                 values=[0.0] * 3) for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]


def test_old_releases_put_the_kl_in_the_reward_unless_the_actor_has_a_kl_loss(tmp_path):
    """verl 0.3: token_level_rewards = scores − 0.001·(logp − ref)·mask, then grpo on the row sums
    s_i = r_i − 0.001·3·0.5·i; with the actor's KL loss on, or at 0.4.0 by default, grpo on r_i."""
    rewards = [1.0, 0.0, 0.0, 0.0]
    with_kl = grpo([r - 0.001 * 3 * 0.5 * i for i, r in enumerate(rewards)])
    without = grpo(rewards)
    cases = [("verl@0.3.0.post1", {}, with_kl), ("verl@0.2.0.post2", {}, with_kl),
             ("verl@0.3.0.post1", {"actor_rollout_ref.actor.use_kl_loss": "true"}, without),
             ("verl@0.4.0", {}, without), ("verl@0.4.0", {"algorithm.use_kl_in_reward": "true"}, with_kl)]
    for spec, settings, want in cases:
        got = advcli_run(tmp_path, kl_rows(), spec, {"algorithm.adv_estimator": "grpo", **settings})
        for i, row in enumerate(got["advantages"]):
            assert row == pytest.approx([want[i]] * 3, rel=1e-4, abs=1e-6), f"{spec} {settings} row {i}"
        if want is with_kl:  # the KL term is in the token-level rewards the output keeps
            assert got["token_level_rewards"][2] == pytest.approx([-0.001, -0.001, -0.001], abs=1e-7), spec


def gae(rewards, values, mask, gamma, lam, skip):
    """compute_gae_advantage_return: @v0.4.1 every position is a step (V after the row = 0); @v0.5.0 a mask=0
    position keeps the next trained token's value and advantage. Returns (advantages, returns), unwhitened."""
    adv, nextv, last = [0.0] * len(rewards), 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * nextv - values[t]
        new = delta + gamma * lam * last
        if skip and not mask[t]:
            adv[t] = last
            continue
        nextv, last, adv[t] = values[t], new, new
    return adv, [a + v for a, v in zip(adv, values)]


def whiten(xs, mask):
    """verl_F.masked_whiten over the mask=1 positions: mean, unbiased variance, (x − mean)/sqrt(var + 1e-8)."""
    kept = [x for x, m in zip(xs, mask) if m]
    mean = sum(kept) / len(kept)
    var = sum((x - mean) ** 2 for x in kept) / (len(kept) - 1)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


@pytest.mark.parametrize("spec,skip", [("verl@0.4.1", False), ("verl@0.2", False), ("verl@0.5.0", True),
                                       ("verl@0.7.0", True)])
def test_gae_steps_through_mask_zero_tokens_until_0_5_0(tmp_path, spec, skip):
    mask = [1, 0, 1, 1]
    values = [f32(v) for v in (0.5, 0.2, 0.3, 0.1)]
    rewards = [0.0, 0.0, 0.0, 1.0]
    rows = [dict(prompt_id="p0", reward=1.0, mask=mask, old=[-1.0] * 4, ref=[-1.0] * 4, values=values)]
    settings = {"algorithm.adv_estimator": "gae", "algorithm.gamma": 0.9, "algorithm.lam": 0.8}
    if spec == "verl@0.2":  # its KL always goes in the reward without the actor's KL loss (here 0: ref = logp)
        settings["actor_rollout_ref.actor.use_kl_loss"] = "true"
    got = advcli_run(tmp_path, rows, spec, settings)
    adv, ret = gae(rewards, values, mask, f32(0.9), f32(0.8), skip)
    want = whiten(adv, mask)
    for t in (0, 2, 3):
        assert got["returns"][0][t] == pytest.approx(ret[t], rel=1e-5), (spec, t)
        assert got["advantages"][0][t] == pytest.approx(want[t], rel=1e-4, abs=1e-5), (spec, t)
    other = gae(rewards, values, mask, f32(0.9), f32(0.8), not skip)[1]
    assert abs(other[0] - ret[0]) > 0.1  # the two rules differ on this row


@pytest.mark.parametrize("spec", ["verl@0.1", "verl@0.2", "verl@0.3.0.post1"])
def test_gae_before_0_4_bootstraps_from_the_value_at_the_first_padding_position(tmp_path, spec):
    """verl 0.1-0.3's critic keeps the value one position past the response (compute_values multiplies by
    attention_mask[:, -response_length - 1:-1], shifted by one: dp_critic.py @v0.3.0.post1) and gae steps through
    the whole padded width (compute_gae_advantage_return @v0.3.0.post1), so a response's last token is bootstrapped
    with that value. A padded dump (padded=true: fixed-width rows, mask 0 after the response) that holds it, as
    verl's batch does, gets verl's numbers; a ragged row of the response's own length has no such value."""
    gamma, lam = f32(0.9), f32(0.8)
    values = [f32(v) for v in (0.5, 0.2, 0.3, 0.7, 0.0)]  # 0.7: the critic's value at the first padding position
    mask = [1, 1, 1, 0, 0]
    rewards = [0.0, 0.0, 1.0, 0.0, 0.0]  # the score at the last response token
    rows = [dict(prompt_id="p0", reward=1.0, mask=mask, old=[-1.0] * 5, ref=[-1.0] * 5, values=values)]
    settings = {"algorithm.adv_estimator": "gae", "algorithm.gamma": 0.9, "algorithm.lam": 0.8}
    if spec != "verl@0.1":  # the KL (here 0: ref = logp) in the reward unless the actor's KL loss
        settings["actor_rollout_ref.actor.use_kl_loss"] = "true"
    got = advcli_run(tmp_path, rows, spec, settings, extra=["--padded"])
    adv, ret = gae(rewards, values, mask, gamma, lam, skip=False)
    # by hand at the last response token: δ = 1 + γ·0.7 − 0.3, then γλ·(the padding position's δ = −0.7)
    assert adv[2] == pytest.approx(1 + 0.9 * 0.7 - 0.3 + 0.9 * 0.8 * -0.7, rel=1e-6)
    want = whiten(adv, mask)
    for t in range(3):
        assert got["returns"][0][t] == pytest.approx(ret[t], rel=1e-5), (spec, t)
        assert got["advantages"][0][t] == pytest.approx(want[t], rel=1e-4, abs=1e-5), (spec, t)
    ragged = gae(rewards[:3], values[:3], mask[:3], gamma, lam, skip=False)[1]
    assert abs(ragged[2] - ret[2]) > 0.1  # without the padding position's value the numbers differ


@pytest.mark.parametrize("spec,floor", [("verl@0.6.0", True), ("verl@0.6.1", True), ("verl@0.7.1", True),
                                        ("verl@0.8.0", False), ("verl@0.9.1", False)])
def test_grpo_vectorized_floors_the_group_variance_before_0_8_0(tmp_path, spec, floor):
    """Rewards [0, 0, 0, 0.001]: unbiased variance 2.5e-7 < 1e-6, so 0.6.0-0.7.1 take σ = sqrt(1e-6) = 1e-3,
    0.8.0 σ = 5e-4; the group [1, 0, 0, 0] (variance 0.25) is the same in both."""
    tiny = f32(0.001)
    rewards = [0.0, 0.0, 0.0, tiny, 1.0, 0.0, 0.0, 0.0]
    rows = [dict(prompt_id=f"p{i // 4}", reward=r, mask=[1, 1], old=[-1.0] * 2, ref=[-1.0] * 2, values=[0.0] * 2)
            for i, r in enumerate(rewards)]
    got = advcli_run(tmp_path, rows, spec, {"algorithm.adv_estimator": "grpo_vectorized"})["advantages"]
    mean = tiny / 4
    var = (3 * mean ** 2 + (tiny - mean) ** 2) / 3
    std = math.sqrt(max(var, 1e-6)) if floor else math.sqrt(var)
    want = [(r - mean) / (std + 1e-6) for r in rewards[:4]] + grpo(rewards[4:])
    for i, row in enumerate(got):
        assert row == pytest.approx([want[i]] * 2, rel=1e-3, abs=1e-5), f"{spec} row {i}"


@pytest.mark.parametrize("argv,says", [
    (["--flavor", "verl@0.1", "--estimator", "grpo"], "verl 0.1's"),
    (["--flavor", "verl@0.3.0.post1", "--set", "algorithm.adv_estimator=grpo_passk"], "verl 0.3.0.post0's"),
    (["--flavor", "verl@0.4.1", "--estimator", "gpg"], "verl 0.4.1's"),
    (["--flavor", "verl@0.7.1", "--estimator", "optimal_token_baseline"], "verl 0.7.1's"),
    (["--flavor", "verl@0.6.1", "--set", "algorithm.kl_penalty=k3+", "--set", "algorithm.use_kl_in_reward=true"],
     "raises NotImplementedError"),
    (["--flavor", "verl@0.3.0.post1", "--set", "algorithm.norm_adv_by_std_in_grpo=false"], "has no such key"),
    (["--flavor", "verl@0.7.1", "--set", "algorithm.rollout_correction.rollout_token_veto_threshold=0.1"],
     "rollout_correction.yaml @v0.7.1"),
    (["--flavor", "verl@0.6.0", "--set", "algorithm.rollout_correction.rollout_is=token"], "ppo_trainer.yaml @v0.6.0"),
    (["--flavor", "verl@0.5.0", "--set", "algorithm.rollout_is_threshold=2"], "before 0.6.0 has no rollout correction"),
])
def test_what_a_release_lacks_is_refused(argv, says, capsys, sample_path, tmp_path):
    code, _, err = run_main(["run", sample_path, "-o", str(tmp_path / "o.parquet"), *argv], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("argv", [
    ["--flavor", "verl@0.6.1", "--set", "algorithm.kl_penalty=k3+"],
    ["--flavor", "verl", "--set", "algorithm.kl_penalty=full"],
    ["--flavor", "verl", "--set", "algorithm.kl_ctrl.type=linear"],
    ["--flavor", "verl@0.3.0.post1", "--set", "algorithm.kl_penalty=k2", "--set",
     "actor_rollout_ref.actor.use_kl_loss=true"],
])
def test_kl_keys_are_not_read_without_the_kl_in_the_reward(argv, capsys, sample_path, tmp_path):
    """verl reads algorithm.kl_penalty and kl_ctrl only in apply_kl_penalty / get_kl_controller, called with the KL in
    the reward (ray_trainer.py L364-365, L1639-1644 @1dda039b; 0.2-0.3: unless the actor's KL loss), and AlgoConfig
    does not check them: without it any value runs, with the numbers of no KL (they were refused)."""
    plain = tmp_path / "plain.parquet"
    code, _, err = run_main(["run", sample_path, "-o", str(plain), *argv[:2], "-q"]
                            + (argv[-2:] if "use_kl_loss" in argv[-1] else []), capsys)
    assert code == 0, err
    code, _, err = run_main(["run", sample_path, "-o", str(tmp_path / "o.parquet"), *argv, "-q"], capsys)
    assert code == 0, err
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist() == \
        pq.read_table(plain).column("advantages").to_pylist()


def test_every_published_verl_release_has_an_entry(capsys):
    verl = get("verl")
    assert release_of(verl, "0.2.0.post1").name == "0.2" and release_of(verl, "0.7.0").name == "0.7.0"
    assert release_of(verl, "v0.3.0.post1").name == "0.3.0.post0" and release_of(verl, "0.1").name == "0.1"
    code, out, _ = run_main(["explain", "--flavor", "verl", "--history"], capsys)
    assert code == 0
    assert "0.6.1 -> 0.6.1" in out and "0.2, 0.2.0.post1, 0.2.0.post2 -> 0.2" in out
    assert "0.1 -> 0.1" in out and ": not reproduced (" not in out  # no published release left unmapped
