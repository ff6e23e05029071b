"""reward.dtype (issue 41.8): where the trainer computes in the rewards' dtype, advcli does too. Expected
numbers by hand in numpy float16 (np.mean / np.std accumulate in float32 and round to float16, as torch's
reductions do; every elementwise step rounds to float16, as verl's per-row loops do on half scores)."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from advcli.cli import app

REWARDS = np.array([0.3, 1.7, 2.9, 0.1, 5.3, 5.1, 4.9, 0.7, 0.2], dtype=np.float16)
IDS = ["a"] * 4 + ["b"] * 3 + ["c"] * 2


def _run(tmp_path, reward_type, settings) -> list[float]:
    src, out = os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "out.parquet")
    pq.write_table(pa.table({"prompt_id": IDS, "reward": pa.array(REWARDS.astype(np.float32)).cast(reward_type),
                             "response_mask": pa.array([[1, 1]] * len(IDS), pa.list_(pa.int8())),
                             "old_log_probs": pa.array([[-1.0, -2.0]] * len(IDS), pa.list_(pa.float32())),
                             "ref_log_probs": pa.array([[-1.0, -2.0]] * len(IDS), pa.list_(pa.float32()))}), src)
    argv = ["run", src, "-o", out, "--flavor", "verl", "--force", "--device", "cpu"]
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    return [row[0] for row in pq.read_table(out).column("advantages").to_pylist()]


def grpo_f16() -> np.ndarray:
    out = np.zeros(len(IDS), dtype=np.float16)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = REWARDS[idx]
        mean = np.float16(s.astype(np.float32).mean())
        std = np.float16(s.astype(np.float32).std(ddof=1))
        out[idx] = (s - mean) / (std + np.float16(1e-6))
    return out


def grpo_f32() -> np.ndarray:
    s32 = REWARDS.astype(np.float32)
    out = np.zeros(len(IDS), dtype=np.float64)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = s32[idx]
        out[idx] = (s - s.mean()) / (s.std(ddof=1) + np.float32(1e-6))
    return out


@pytest.mark.parametrize("reward_type,setting,expected", [
    # run (the default): verl's reward managers write the scores into a float32 tensor (naive.py L98 @1dda039b)
    (pa.float16(), {}, "f32"),
    (pa.float16(), {"advcli.reward_dtype": "input"}, "f16"),  # input: a float16 column keeps its dtype
    (pa.float32(), {"advcli.reward_dtype": "float16"}, "f16"),  # said: the trainer's scores were float16
    (pa.float32(), {}, "f32"),  # a float32 column at the run's precision
    (pa.float16(), {"advcli.reward_dtype": "run"}, "f32"),
    # KL in the reward (0 here: equal log-probs): scores − β·kld is float32, as verl's apply_kl_penalty makes it
    (pa.float16(), {"advcli.reward_dtype": "float16", "algorithm.use_kl_in_reward": "true"}, "f32"),
])
def test_grpo_in_the_rewards_dtype(tmp_path, reward_type, setting, expected):
    got = _run(tmp_path, reward_type, {"algorithm.adv_estimator": "grpo", **setting})
    want = grpo_f16().astype(np.float64) if expected == "f16" else grpo_f32()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.max(np.abs(grpo_f16().astype(np.float64) - grpo_f32())) > 1e-3  # the two differ: the test tells


# ------------------------------------------------------------------ the other trainers (issue 41.8)
# ROLL (alibaba/ROLL @ 8eb27cc2): every reward worker in roll/pipeline/rlvr/rewards builds its
# response_level_rewards in float16 (math_rule_reward_worker.py L307-313, llm_judge_reward_worker.py L240, ...);
# reward_postprocess -> reward_norm (functionals.py L565-606) and the clamp keep that dtype, expand_to_token_level
# keeps it (L554), compute_advantage casts to float32 (L1157). So advcli.reward_dtype defaults to float16 (the
# rewards came from those workers); run is a float32 reward, a custom worker's.
ROLL_N = "actor_infer.generating_args.num_return_sequences"
R8 = np.array([0.3, 1.7, 2.9, 0.1, 5.3, 5.1, 4.9, 0.7], dtype=np.float16)


def _roll(tmp_path, reward_type, settings) -> list[list[float]]:
    from conftest import run_table

    src, out = os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "out.parquet")
    pq.write_table(pa.table({"prompt_id": ["a"] * 4 + ["b"] * 4,
                             "reward": pa.array(R8.astype(np.float32)).cast(reward_type),
                             "response_mask": pa.array([[1, 1]] * 8, pa.list_(pa.int8())),
                             "old_log_probs": pa.array([[-1.0, -2.0]] * 8, pa.list_(pa.float32())),
                             "ref_log_probs": pa.array([[-1.0, -2.0]] * 8, pa.list_(pa.float32()))}), src)
    t, _ = run_table(src, out, "roll", settings)
    return t.column("advantages").to_pylist()


def roll_norm(dtype, n: int | None):
    """ROLL's reward_norm written out with torch in ``dtype``: group (the [G, n] reshape) or batch mean/std
    (unbiased) and (r − μ)/(σ + 1e-6), then float32 (compute_advantage's .float())."""
    import torch

    r = torch.tensor(R8.astype(np.float32)).to(dtype)
    if n:
        g = r.reshape(-1, n)
        y = ((g - g.mean(dim=-1, keepdim=True)) / (torch.std(g, dim=-1, keepdim=True) + 1e-6)).reshape(-1)
    else:
        y = (r - r.mean()) / (r.std() + 1e-6)
    return y.float().double().numpy()


@pytest.mark.parametrize("reward_type,settings,dt", [
    (pa.float32(), {"advcli.reward_dtype": "float16"}, "float16"),  # ROLL's own reward workers
    (pa.float16(), {"advcli.reward_dtype": "input"}, "float16"),  # a float16 column kept
    (pa.float32(), {"advcli.reward_dtype": "bfloat16"}, "bfloat16"),
    (pa.float32(), {}, "float32"),  # the default: the column's own dtype (ROLL's own dump: float16, below)
    (pa.float16(), {}, "float16"),
    (pa.float16(), {"advcli.reward_dtype": "run"}, "float32"),  # float32 rewards (a custom worker's)
    (pa.float32(), {"advcli.reward_dtype": "input"}, "float32"),
])
@pytest.mark.parametrize("norm", ["group", "batch"])
def test_roll_reward_norm_in_the_rewards_dtype(tmp_path, reward_type, settings, dt, norm):
    import torch

    s = {"adv_estimator": "grpo", ROLL_N: 4} if norm == "group" else \
        {"adv_estimator": "reinforce", "norm_mean_type": "batch", "norm_std_type": "batch"}
    got = np.array(_roll(tmp_path, reward_type, {**s, **settings}))
    want = roll_norm(getattr(torch, dt), 4 if norm == "group" else None)
    # the reinforce return with γ = 1 of a reward on the last of two tokens: that reward on both
    np.testing.assert_allclose(got, np.stack([want, want], axis=1), rtol=1e-6, atol=1e-6)
    other = roll_norm(torch.float32 if dt != "float32" else torch.float16, 4 if norm == "group" else None)
    assert np.max(np.abs(other - want)) > 1e-4  # float16 and float32 differ here: the test tells them apart


def roll_chain(dtype, clip: float, kl: bool):
    """ROLL's reward_postprocess (batch reward_norm, then torch.clamp(±clip)) on rewards of ``dtype``, then
    compute_token_reward: the reward at the last of two tokens (expand_to_token_level keeps the dtype), minus
    β·kld (a float32 kld of 0 here: equal log-probs) and the clamp again only with the KL term (without it
    the token rewards keep the dtype and the clamp changes nothing), then .float() and the reinforce return
    at γ = 1: the reward on both tokens."""
    import torch

    r = torch.tensor(R8.astype(np.float32)).to(dtype)
    r = torch.clamp((r - r.mean()) / (r.std() + 1e-6), min=-clip, max=clip)
    tlr = torch.zeros(8, 2, dtype=r.dtype)
    tlr[:, 1] = r
    if kl:
        tlr = torch.clamp(tlr - 0.1 * torch.zeros(8, 2, dtype=torch.float32), min=-clip, max=clip)
    return tlr.float()[:, 1].double().numpy()


@pytest.mark.parametrize("kl", [False, True])
def test_roll_reward_clip_in_the_rewards_dtype(tmp_path, kl):
    """reward_clip 0.3 clamps the float16 rewards at the float16 nearest 0.3 (0.30004883); with the KL term the
    token rewards are float32 and the second clamp brings them to float32's 0.3."""
    import torch

    s = {"adv_estimator": "reinforce", "norm_mean_type": "batch", "norm_std_type": "batch", "reward_clip": 0.3,
         "add_token_level_kl": kl, "init_kl_coef": 0.1}
    got16 = np.array(_roll(tmp_path, pa.float32(), {**s, "advcli.reward_dtype": "float16"}))
    got32 = np.array(_roll(tmp_path, pa.float32(), s))  # the default: the column's float32
    want16, want32 = roll_chain(torch.float16, 0.3, kl), roll_chain(torch.float32, 0.3, kl)
    np.testing.assert_array_equal(got16, np.stack([want16, want16], axis=1))
    np.testing.assert_array_equal(got32, np.stack([want32, want32], axis=1))
    top = 0.300048828125 if not kl else float(np.float32(0.3))
    assert got16.max() == top and got32.max() == float(np.float32(0.3))  # clamped rows
    assert np.max(np.abs(want16 - want32)) > 3e-5  # the dtypes differ on the unclamped row too


def test_roll_float16_rewards_zero_an_all_equal_group(tmp_path):
    """ROLL's float32 artefact of an all-equal non-dyadic group (0.9×3: 0.0596 in float32) is not there in the
    workers' float16: three float16 0.9s sum exactly in torch's float32 accumulator, so mean = each, std 0."""
    from conftest import run_table

    src, out = os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "out.parquet")
    pq.write_table(pa.table({"prompt_id": ["a"] * 3 + ["b"] * 3, "reward": [0.9] * 3 + [0.0, 1.0, 1.0],
                             "response_mask": pa.array([[1]] * 6, pa.list_(pa.int8()))}), src)
    s = {"adv_estimator": "grpo", ROLL_N: 3}
    t16, _ = run_table(src, out, "roll", {**s, "advcli.reward_dtype": "float16"})
    t32, _ = run_table(src, os.path.join(tmp_path, "o32.parquet"), "roll", s)  # the column's float64: the run's
    a16 = [a[0] for a in t16.column("advantages").to_pylist()]
    a32 = [a[0] for a in t32.column("advantages").to_pylist()]
    assert a16[:3] == [0.0, 0.0, 0.0] and all(abs(a) > 1e-3 for a in a32[:3])
    # the other group: (r − 2/3)/(std + 1e-6) in float16, its mean and std rounded to float16
    m, sd = np.float16(2 / 3), np.float16(np.std([0.0, 1.0, 1.0], ddof=1))
    want = [float((np.float16(x) - m) / (sd + np.float16(1e-6))) for x in (0.0, 1.0, 1.0)]
    np.testing.assert_allclose(a16[3:], want, rtol=1e-6)
    np.testing.assert_allclose(a32[3:], [-1.1547, 0.57735, 0.57735], rtol=1e-4)


# TRL (trl/trainer/grpo_trainer.py L1614, L1653, L1664 @ f2cd577: rewards_per_func is a float32 zeros tensor, a
# reward model's logits and a function's floats are written into it), SkyRL (skyrl/train/dataset/preprocess.py
# L214 @ a956457: rewards packed into a float32 array), AReaL (areal/workflow/rlvr.py L178 @ cbff54d:
# torch.tensor(reward, dtype=torch.float32)), NeMo RL (nemo_rl/experience/rollouts.py L872 @ 7ea279a: a float32
# total_reward accumulates the environments' rewards), slime (slime/ray/rollout.py L618, backends/megatron_utils/
# loss.py L764 @ 624b824: torch.tensor(..., dtype=torch.float32)) and prime-rl (Python floats, cast to float32 for
# its estimators): a 16-bit reward never reaches their advantage math, so a float16 column computes as float32.
FLOAT32_TRAINERS = [("trl", {"num_generations": 4}), ("skyrl", {}), ("areal", {}), ("nemo", {}),
                    ("slime", {"n_samples_per_prompt": 4}), ("prime-rl", {})]


@pytest.mark.parametrize("flavor,settings", FLOAT32_TRAINERS)
def test_float32_trainers_ignore_a_float16_column(tmp_path, flavor, settings):
    from conftest import run_table

    outs = []
    for typ in (pa.float16(), pa.float32()):
        src = os.path.join(tmp_path, f"in_{typ}.parquet")
        pq.write_table(pa.table({"prompt_id": ["a"] * 4 + ["b"] * 4,
                                 "reward": pa.array(R8.astype(np.float32)).cast(typ),
                                 "response_mask": pa.array([[1, 1]] * 8, pa.list_(pa.int8())),
                                 "old_log_probs": pa.array([[-1.0, -2.0]] * 8, pa.list_(pa.float32()))}), src)
        t, _ = run_table(src, os.path.join(tmp_path, "out.parquet"), flavor, settings)
        outs.append(t.column("advantages").to_pylist())
    assert outs[0] == outs[1]  # bit for bit: the float16 values, held in float32, run as float32


def test_trl_grpo_float16_column_is_float32_math(tmp_path):
    """TRL's GRPO on a float16 reward column: (r − mean)/(std + 1e-4) with torch in float32 (unbiased std)."""
    import torch
    from conftest import run_table

    src = os.path.join(tmp_path, "in.parquet")
    pq.write_table(pa.table({"prompt_id": ["a"] * 4 + ["b"] * 4, "reward": pa.array(R8.astype(np.float32)).cast(
        pa.float16()), "response_mask": pa.array([[1, 1]] * 8, pa.list_(pa.int8()))}), src)
    t, _ = run_table(src, os.path.join(tmp_path, "out.parquet"), "trl", {"num_generations": 4})
    g = torch.tensor(R8.astype(np.float32)).reshape(-1, 4)
    want = ((g - g.mean(dim=1, keepdim=True)) / (g.std(dim=1, keepdim=True) + 1e-4)).reshape(-1).double().numpy()
    got = np.array([row[0] for row in t.column("advantages").to_pylist()])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    g16 = g.half()
    want16 = ((g16 - g16.mean(dim=1, keepdim=True)) / (g16.std(dim=1, keepdim=True) + 1e-4)).reshape(-1).double()
    assert np.max(np.abs(want16.numpy() - want)) > 1e-4  # had it run in float16, the test would tell


# -------------------------------------------- verl's other estimators on 16-bit scores (verl @ 1dda039b)
def opo_f16() -> np.ndarray:
    """compute_opo_outcome_advantage (core_algos.py L639-690) on float16 scores: len (int64) × score is float16,
    its sum accumulates in float32 and rounds, divided by the int64 length sum in float16; s − b in float16."""
    out = np.zeros(len(IDS), dtype=np.float16)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = REWARDS[idx]
        lengths = np.full(len(idx), 2, dtype=np.float16)  # two mask=1 tokens per row (_run)
        num = np.float16((lengths * s).astype(np.float32).sum())
        out[idx] = s - np.float16(num / np.float16(2 * len(idx)))
    return out


def passk_f16() -> np.ndarray:
    """compute_grpo_passk_outcome_advantage (L471-530) on float16 scores: the group's best row gets
    (r_max − r_2nd)/(std + 1e-6), std unbiased (float32 accumulation, rounded), every step in float16."""
    out = np.zeros(len(IDS), dtype=np.float16)
    for g in sorted(set(IDS)):
        idx = [i for i, x in enumerate(IDS) if x == g]
        s = REWARDS[idx]
        order = np.argsort(-s.astype(np.float32), kind="stable")
        std = np.float16(s.astype(np.float32).std(ddof=1))
        out[idx[order[0]]] = np.float16(s[order[0]] - s[order[1]]) / np.float16(std + np.float16(1e-6))
    return out


@pytest.mark.parametrize("est,reference", [("opo", opo_f16), ("grpo_passk", passk_f16)])
def test_verl_opo_and_passk_round_every_step_to_the_scores_dtype(tmp_path, est, reference):
    got = _run(tmp_path, pa.float32(), {"algorithm.adv_estimator": est, "advcli.reward_dtype": "float16"})
    np.testing.assert_allclose(got, reference().astype(np.float64), rtol=1e-6, atol=1e-6)
    f32 = _run(tmp_path, pa.float32(), {"algorithm.adv_estimator": est})
    assert np.max(np.abs(np.array(f32) - reference().astype(np.float64))) > 1e-4  # the two differ: the test tells


def test_verl_float32_estimators_see_the_scores_rounded(tmp_path):
    """grpo_vectorized (L335-358) sums bf16 token_level_rewards, then computes in float32: its numbers are the
    float32 formula on the bf16-rounded scores, (s − μ)/(σ + 1e-6) with the unbiased σ."""
    import torch

    rewards, ids = [0.1, 0.2, 0.7, 0.3, 0.9], ["a", "a", "a", "b", "b"]
    src, out = os.path.join(tmp_path, "in.parquet"), os.path.join(tmp_path, "out.parquet")
    pq.write_table(pa.table({"prompt_id": ids, "reward": pa.array(rewards, pa.float32()),
                             "response_mask": pa.array([[1, 1]] * 5, pa.list_(pa.int8()))}), src)
    res = CliRunner().invoke(app, ["run", src, "-o", out, "--flavor", "verl", "--force", "--device", "cpu",
                                   "--set", "algorithm.adv_estimator=grpo_vectorized",
                                   "--set", "advcli.reward_dtype=bfloat16"])
    assert res.exit_code == 0, res.output
    got = [row[0] for row in pq.read_table(out).column("advantages").to_pylist()]
    rounded = torch.tensor(rewards).to(torch.bfloat16).to(torch.float64).tolist()
    want = []
    for r, g in zip(rounded, ids):
        peers = [x for x, h in zip(rounded, ids) if h == g]
        mean = sum(peers) / len(peers)
        std = (sum((x - mean) ** 2 for x in peers) / (len(peers) - 1)) ** 0.5
        want.append((r - mean) / (std + 1e-6))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert abs(rounded[0] - 0.1) > 1e-5  # bf16 0.1 is 0.10009765625: the rounding is visible


def test_verl_optimal_token_baseline_refuses_16_bit_scores(tmp_path, capsys):
    """compute_optimal_token_baseline_advantage puts float32 baselines into the scores' tensor: with bf16 scores
    verl raises ("Index put requires the source and destination dtypes match"); advcli refuses, naming the fix."""
    src = os.path.join(tmp_path, "in.parquet")
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "reward": pa.array([1.0, 0.0], pa.float32()),
                             "response_mask": pa.array([[1, 1]] * 2, pa.list_(pa.int8())),
                             "old_log_probs": pa.array([[-1.0, -2.0]] * 2, pa.list_(pa.float32())),
                             "sum_pi_squared": pa.array([[0.5, 0.5]] * 2, pa.list_(pa.float32()))}), src)
    from conftest import run_main

    code, _, err = run_main(["run", src, "-o", os.path.join(tmp_path, "o.parquet"), "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=optimal_token_baseline",
                             "--set", "advcli.reward_dtype=bfloat16"], capsys)
    err = " ".join(err.split())
    assert code == 2 and "verl raises here" in err and "advcli.reward_dtype=run" in err and "Traceback" not in err
    assert not os.path.exists(os.path.join(tmp_path, "o.parquet"))
