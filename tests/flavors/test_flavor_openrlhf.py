"""--flavor openrlhf: OpenRLHF's compute_advantages_and_returns (OpenRLHF/OpenRLHF @ 3c3be623).

Every expected number below was produced by running OpenRLHF's own, unmodified code on CPU, torch 2.13,
float32: ``compute_approx_kl`` and ``compute_reward`` (openrlhf/models/utils.py @3c3be623) and
``RemoteExperienceMaker.compute_advantages_and_returns`` / ``get_advantages_and_returns`` /
``get_cumulative_returns`` (openrlhf/trainer/ppo_utils/experience_maker.py @3c3be623) on one step of
right-padded experiences; the first L_i positions of each row are pasted here.
"""
from __future__ import annotations

import re

import pytest
from _flavor_rows import assert_rows_close, run_rows

from advcli.errors import AdvcliError

EST, N = "algo.advantage.estimator", "rollout.n_samples_per_prompt"

# interior holes, trailing masked tokens, a length-1 row, an all-masked row, log-ratios of 29.5 and -24.9
ROWS = [dict(reward=r, mask=m, old=o, ref=rf, values=v) for r, m, o, rf, v in [
    (1.0, [1, 1, 0, 1], [-0.5, -1.2, -0.3, -2.0], [-0.7, -1.0, -0.3, -1.5], [0.5, 0.4, 0.3, 0.2]),
    (0.0, [1, 1, 1], [-0.1, -0.2, -0.3], [-0.4, -0.1, -0.9], [0.1, -0.2, 0.3]),
    (0.5, [1, 0, 0, 1, 1, 0], [-1.0, -2.0, -0.5, -0.1, -0.2, -0.4], [-1.5, -30.0, -0.4, -0.3, -0.2, -0.1],
     [0.3, 0.2, 0.1, 0.0, -0.1, 0.6]),
    (2.0, [1], [-0.6], [-0.2], [0.7]),
    (-1.0, [1, 1, 0], [-25.0, -0.2, -0.1], [-0.1, -0.2, -0.2], [0.2, 0.3, 0.9]),
    (0.25, [0, 0], [-0.2, -0.9], [-0.5, -0.6], [0.4, 0.5]),
]]


def test_gae_k2(tmp_path):
    """GAE without hole skipping on M·R, M·V; k2 KL (clamped to 10) at every position of
    token_level_rewards; global normalisation (biased, max(var, 1e-8)) at every position, so the
    trailing masked tokens and the all-masked row hold (0 − μ)·rstd = −0.0980."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {EST: "gae", N: 2, "algo.advantage.gamma": 0.99,
                                                   "algo.advantage.lambd": 0.95, "algo.kl.init_coef": 0.05,
                                                   "algo.kl.estimator": "k2"})
    assert_rows_close(out["advantages"], [
        [0.344157, 0.5118441, 1.084, 0.8953182],
        [-0.2311369, 0.1599559, -0.4847035],
        [0.002112719, 0.4159455, 0.4484605, 0.4830325, 0.6528524, -0.09800961],
        [1.523852],
        [-2.132407, -1.724877, -0.09800961],
        [-0.09800961, -0.09800961],
    ])
    assert_rows_close(out["returns"], [
        [0.8533272, 0.8873229, 0.9445219, 0.99375],
        [-0.006379567, 0.006135479, -0.009000003],
        [0.3800059, 0.4106921, 0.4366742, 0.4643001, 0.5, 0.0],
        [1.996],
        [-1.42565, -0.9999999, 0.0],
        [0.0, 0.0],
    ])
    assert_rows_close(out["token_level_rewards"], [
        [-0.0009999999, -0.001000001, 0.0, 0.99375],
        [-0.00225, -0.00025, -0.008999999],
        [-0.00625, -0.5, -0.00025, -0.001, 0.5, -0.00225],
        [1.996],
        [-0.5, -1.0, -0.00025],
        [-0.00225, -0.002249999],
    ])


def test_reinforce_k3_gamma_and_clip_range(tmp_path):
    """reinforce keeps γ=0.9; the scalar is clamped to [-0.5, 0.5]; k3 with e^(ref−lp) − 1 + (lp − ref)."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {EST: "reinforce", "algo.advantage.gamma": 0.9,
                                                   "algo.kl.init_coef": 0.02, "algo.kl.estimator": "k3",
                                                   "reward.clip_range": [-0.5, 0.5]}, chunk_rows=2)
    assert_rows_close(out["advantages"], [
        [0.5414521, 0.648499, 0.7675967, 0.8986729],
        [-0.4208466, -0.4194274, -0.4199395],
        [0.4467087, 0.5483742, 0.6550924, 0.7736684, 0.9065171, -0.4120906],
        [0.9016738],
        [-2.126281, -1.730698, -0.4120906],
        [-0.4120906, -0.4120906],
    ])
    assert_rows_close(out["returns"], [
        [0.3615718, 0.4021627, 0.447323, 0.4970256],
        [-0.00332019, -0.002782028, -0.002976233],
        [0.3256463, 0.3641965, 0.4046628, 0.4496254, 0.5, 0.0],
        [0.4981635],
        [-0.65, -0.5, 0.0],
        [0.0, 0.0],
    ])
    assert_rows_close(out["token_level_rewards"], [
        [-0.0003746152, -0.0004280543, 0.0, 0.4970256],
        [-0.0008163642, -0.0001034193, -0.002976233],
        [-0.002130613, -0.2, -0.0001034194, -0.0003746146, 0.5, -0.0009971773],
        [0.4981635],
        [-0.2, -0.5, -9.674862e-05],
        [-0.0008163642, -0.0009971762],
    ])


def test_reinforce_baseline_no_std_norm_old_flat_names(tmp_path):
    """The pre-ed62d0e2 flat flag names; γ=0.9 is forced to 1.0; normalisation centres only."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {"advantage_estimator": "reinforce_baseline",
                                                   "n_samples_per_prompt": 3, "gamma": 0.9, "init_kl_coef": 0.01,
                                                   "kl_estimator": "k1", "no_advantage_std_norm": True})
    assert_rows_close(out["advantages"], [
        [0.6014166, 0.6034166, 0.6014166, 0.6014166],
        [-0.4115834, -0.4085833, -0.4095833],
        [0.08941665, 0.09441665, 0.09441665, 0.09441665, 0.09641664, 0.09641664],
        [1.68375],
        [-1.22025, -1.32025, 0.09641664],
        [0.09641664, 0.09641664],
    ])
    assert_rows_close(out["returns"], [
        [0.505, 0.507, 0.505, 0.505],
        [-0.508, -0.505, -0.506],
        [-0.007, -0.002, -0.002, -0.002, 0.0, 0.0],
        [1.587333],
        [-1.316667, -1.416667, 0.0],
        [0.0, 0.0],
    ])


def test_dr_grpo_without_kl(tmp_path):
    """β = 0: no reference model, no reward KL, no token_level_rewards column; holes carry the return."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0})
    expected = [[0.5] * 4, [-0.5] * 3, [-0.75] * 5 + [0.0], [0.75], [-0.625, -0.625, 0.0], [0.0, 0.0]]
    assert_rows_close(out["advantages"], expected)
    assert_rows_close(out["returns"], expected)
    assert "token_level_rewards" not in out


def test_rloo_with_kl_in_the_loss(tmp_path):
    """algo.kl.use_loss: the KL goes to the actor loss, rewards carry none; LOO baseline r − (Σ − r)/(n − 1)."""
    out, _ = run_rows(tmp_path, ROWS, "openrlhf", {EST: "rloo", N: 3, "algo.kl.init_coef": 0.05,
                                                   "algo.kl.use_loss": True})
    assert_rows_close(out["advantages"], [[0.75] * 4, [-0.75] * 3, [0.0] * 6, [2.375], [-2.125, -2.125, 0.0],
                                          [0.0, 0.0]])
    assert "token_level_rewards" not in out


# ----------------------------------------------------------------------------- length penalties
LONG = [dict(reward=1.0, mask=[0, 1, 1, 0, 1, 0], truncated=False),  # span 4 (positions 1-4), Σ mask 3
        dict(reward=0.5, mask=[1] * 7, truncated=True)]  # span 7


def test_length_penalties_by_hand(tmp_path):
    """max 6, L = 3: the penalty starts past 3 tokens. Row 0's span is 4 (its hole counts, its trailing zero
    does not): r = 1 − min(4 − 3, 3)/3 = 2/3. Row 1: r = 0.5 − min(7 − 3, 3)/3 = −0.5 (capped at the factor),
    truncated, so ×0.5: −0.25. dr_grpo then subtracts the group mean 5/24: ±11/24 on each row's tokens up to
    its last mask=1 token (γ = 1; holes carry the next token's return)."""
    settings = {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0, "reward.overlong_buffer_len": 3,
                "rollout.max_new_tokens": 6, "reward.stop_properly_penalty_coef": 0.5}
    out, _ = run_rows(tmp_path, LONG, "openrlhf", settings)
    a = 11 / 24
    assert_rows_close(out["advantages"], [[a] * 5 + [0.0], [-a] * 7])
    # c < 0 replaces the truncated row's reward: r1 = −2 after its overlong penalty; mean (2/3 − 2)/2 = −2/3
    out, _ = run_rows(tmp_path, LONG, "openrlhf", {**settings, "reward.stop_properly_penalty_coef": -2.0})
    assert_rows_close(out["advantages"], [[4 / 3] * 5 + [0.0], [-4 / 3] * 7])
    # rollout.max_new_tokens unset: data.max_len (here 5: row 0 exceeds 2 by 2, row 1 by 5, capped at 3)
    out, _ = run_rows(tmp_path, LONG, "openrlhf", {**settings, "rollout.max_new_tokens": None, "data.max_len": 5})
    r0, r1 = 1 - 2 / 3, (0.5 - 1) * 0.5
    assert_rows_close(out["advantages"], [[(r0 - r1) / 2] * 5 + [0.0], [(r1 - r0) / 2] * 7])


@pytest.mark.parametrize("settings, words", [
    ({"reward.overlong_buffer_len": 9, "rollout.max_new_tokens": 6}, "asserts max_new_tokens >= overlong_buffer_len"),
    ({"reward.stop_properly_penalty_coef": 1.5}, "[0, 1] (a factor) or below 0"),
])
def test_length_penalties_the_trainer_refuses(tmp_path, settings, words):
    with pytest.raises(AdvcliError, match=re.escape(words)):
        run_rows(tmp_path, LONG, "openrlhf", {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0, **settings})


def _shaped(out) -> list[float]:
    """dr_grpo's shaped reward of each of the two rows (its advantage at position 0: γ = 1, holes carry it)."""
    return [row[0] for row in out["advantages"]]


def test_length_penalties_at_older_releases(tmp_path):
    """The response length each release measures, and the flags each has (OpenRLHF tags v0.8.6-v0.10.1)."""
    base = {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0, "overlong_buffer_len": 3}
    # 0.8.9-0.9.0: n = the generated ids, 6 and 7 tokens (not the spans 4 and 7); max 8 − 3 = 5: r0 = 1 − 1/3,
    # r1 = 0.5 − 2/3, mean 1/4
    out, _ = run_rows(tmp_path, LONG, "openrlhf@0.9.0", {**base, "generate_max_len": 8})
    assert_rows_close([_shaped(out)], [[5 / 12, -5 / 12]])
    # 0.8.7-0.8.8: a response without EOS (truncated) got one appended: row 1 is 8 long, r1 = 0.5 − 1/3
    out, _ = run_rows(tmp_path, LONG, "openrlhf@0.8.8", {**base, "generate_max_len": 10})
    d = (1.0 - (0.5 - 1 / 3)) / 2
    assert_rows_close([_shaped(out)], [[d, -d]])
    # 0.9.1-0.9.7: the max defaults to --generate_max_len 1024: nothing is penalised here
    out, _ = run_rows(tmp_path, LONG, "openrlhf@0.9.5", base)
    assert_rows_close([_shaped(out)], [[0.25, -0.25]])
    # ... and with --generate_max_len 6, the newest semantics (test_length_penalties_by_hand), under the old name
    out, _ = run_rows(tmp_path, LONG, "openrlhf@0.9.5", {**base, "generate_max_len": 6, "stop_properly_penalty_coef": 0.5})
    assert_rows_close([_shaped(out)], [[11 / 24, -11 / 24]])


@pytest.mark.parametrize("spec, settings, words", [
    ("openrlhf@0.8.6", {"overlong_buffer_len": 3}, "--overlong_buffer_len came with 0.8.7"),
    ("openrlhf@0.9.1", {"stop_properly_penalty_coef": 0.5}, "--stop_properly_penalty_coef (it came with 0.9.2"),
    ("openrlhf@0.9.7", {"stop_properly_penalty_coef": -0.5}, "[0, 1] (releases 0.9.2-0.9.7"),
])
def test_length_penalties_older_releases_refuse(tmp_path, spec, settings, words):
    with pytest.raises(AdvcliError, match=re.escape(words)):
        run_rows(tmp_path, LONG, spec, {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0, **settings})


def test_stop_properly_needs_the_truncated_column(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "truncated"} for r in LONG]
    with pytest.raises(AdvcliError, match="truncated"):
        run_rows(tmp_path, rows, "openrlhf", {EST: "dr_grpo", N: 2, "algo.kl.init_coef": 0.0,
                                             "reward.stop_properly_penalty_coef": 0.5})


# ----------------------------------------------------------------------------- float32 hazards
# Three equal values: their float32 sum and deviations round alike in any summation order, so these
# literals hold on every machine (larger all-equal groups do not: tests/_float32_refs.py).
HAZARD = [dict(reward=0.9, mask=[1, 1, 1]), dict(reward=0.9, mask=[1, 1]), dict(reward=0.9, mask=[1]),
          dict(reward=0.0, mask=[1, 1]), dict(reward=1.0, mask=[1, 0, 1]), dict(reward=1.0, mask=[1, 1, 0])]


def test_group_norm_hazard_with_two_groups_is_clipped_to_10(tmp_path):
    """0.9×3 next to another group: torch.std of the [2, 3] reshape is exactly 0, the mean 1 ulp off:
    6e-8/1e-9 ≈ 59.6, clipped to 10 by reward.clip_range."""
    out, _ = run_rows(tmp_path, HAZARD, "openrlhf", {EST: "group_norm", N: 3, "algo.kl.init_coef": 0.0})
    assert_rows_close(out["advantages"], [
        [10.0, 10.0, 10.0], [10.0, 10.0], [10.0],
        [-1.154701, -1.154701], [0.5773503, 0.5773503, 0.5773503], [0.5773503, 0.5773503, 0.0]])


def test_group_norm_hazard_alone_is_0_805(tmp_path):
    """The same group alone in its step: the [1, 3] std takes the 1-D path (7.3e-8) → 0.805. A second
    step holding another group must not change it: statistics are per step, on that step's shape."""
    out, _ = run_rows(tmp_path, HAZARD[:3], "openrlhf", {EST: "group_norm", N: 3, "algo.kl.init_coef": 0.0})
    assert_rows_close(out["advantages"], [[0.8054629] * 3, [0.8054629] * 2, [0.8054629]])
    steps = [dict(r, step=0 if i < 3 else 1) for i, r in enumerate(HAZARD)]
    out, _ = run_rows(tmp_path, steps, "openrlhf", {EST: "group_norm", N: 3, "algo.kl.init_coef": 0.0})
    assert out["advantages"][0] == pytest.approx([0.8054629] * 3, rel=1e-6)


# --------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("est", ["rloo", "reinforce_baseline", "group_norm", "dr_grpo"])
def test_group_estimators_refuse_n_1(tmp_path, est):
    with pytest.raises(AdvcliError, match="requires rollout.n_samples_per_prompt > 1"):
        run_rows(tmp_path, HAZARD, "openrlhf", {EST: est})


@pytest.mark.parametrize("settings, words", [
    ({EST: "grpo"}, "OpenRLHF's GRPO is group_norm"),
    ({"algo.kl.estimator": "low_var_kl"}, "algo.kl.estimator"),
    ({"algo.kl.target": 0.1, "algo.kl.horizon": 0}, "algo.kl.horizon must not be 0"),
    ({"algo.kl.target": 0.1, "rollout.batch_size": 0}, "rollout.batch_size must be at least 1"),
    ({"reward.clip_range": [1]}, "two numbers"),
    ({"algo.advantage.estimatr": "gae"}, "Did you mean 'algo.advantage.estimator'"),
])
def test_refused_settings(tmp_path, settings, words):
    with pytest.raises(AdvcliError) as e:
        run_rows(tmp_path, ROWS, "openrlhf", settings)
    assert words in str(e.value) + (e.value.hint or "")


def test_positional_blocks_checked_against_prompt_id(tmp_path):
    rows = [dict(r, prompt_id=p) for r, p in zip(HAZARD, ["a", "a", "b", "b", "c", "c"])]
    with pytest.raises(AdvcliError, match="holds several 'prompt_id' values"):
        run_rows(tmp_path, rows, "openrlhf", {EST: "rloo", N: 3, "algo.kl.init_coef": 0.0})
    ok = [dict(r, prompt_id=p) for r, p in zip(HAZARD, "aaabbb")]
    out, _ = run_rows(tmp_path, ok, "openrlhf", {EST: "rloo", N: 3, "algo.kl.init_coef": 0.0})
    # rloo, 0.9×3 → 0.9 − (2.7 − 0.9)/2 in float32 (≈ 0); [0, 1, 1]: −1, 0.5, 0.5
    assert out["advantages"][3] == [-1.0, -1.0] and out["advantages"][4] == [0.5, 0.5, 0.5]
    assert abs(out["advantages"][0][0]) < 1e-7


# ------------------------------------------------------------------------ step normalisation
def test_step_normalisation_mean_has_no_epsilon(tmp_path):
    """experience_maker.py L318-323: mean = Σ(A·m)/num_actions, no epsilon. All advantages 1 (reward 1
    on the last token, γ = 1, no KL): mean 1 exactly, var 0 → clamp 1e-8: A = 0. A mean over
    Σm + 1e-8 would leave (1 − 3/(3 + 1e-8))·1e4 ≈ 3.3e-5."""
    rows = [dict(reward=1.0, mask=[1, 1], old=[-0.5, -0.5], ref=[-0.5, -0.5]),
            dict(reward=1.0, mask=[1], old=[-0.5], ref=[-0.5])]
    out, _ = run_rows(tmp_path, rows, "openrlhf", {EST: "reinforce", "algo.kl.init_coef": 0.0})
    assert out["advantages"] == [[0.0, 0.0], [0.0]]


def test_step_without_action_tokens_is_nan(tmp_path):
    """num_actions = 0: mean = 0/0 = NaN, and every position of the step is NaN (OpenRLHF does not
    re-mask the normalised advantages)."""
    nan = float("nan")
    rows = [dict(reward=1.0, mask=[0, 0], old=[-0.5, -0.5], ref=[-0.5, -0.5]),
            dict(reward=0.5, mask=[0], old=[-0.5], ref=[-0.5])]
    out, _ = run_rows(tmp_path, rows, "openrlhf", {EST: "reinforce", "algo.kl.init_coef": 0.0})
    assert_rows_close(out["advantages"], [[nan, nan], [nan]])


def test_the_n_1_refusal_names_the_size_the_ids_show_and_its_fix_runs(tmp_path, capsys):
    """OpenRLHF's assert (n_samples_per_prompt > 1 for the group estimators) on the sample, whose prompts have 8
    rows each, scattered: the hint names 8 and the ids' grouping, and that command runs OpenRLHF's group_norm,
    (r − mean) / (std (Bessel) + 1e-9) per prompt (experience_maker.py @3c3be623), checked here in float64 on the
    groups whose rewards differ (an all-equal group's float32 mean is OpenRLHF's hazard, tested above)."""
    import numpy as np
    import pyarrow.parquet as pq
    from conftest import SAMPLE, run_main

    base = ["run", SAMPLE, "-o", str(tmp_path / "o.parquet"), "--flavor", "openrlhf", "--set", f"{EST}=group_norm",
            "--set", "algo.kl.init_coef=0", "-q"]
    code, _, err = run_main(base, capsys)
    assert code == 2 and "requires rollout.n_samples_per_prompt > 1" in err
    assert ("hint: add --set rollout.n_samples_per_prompt=8 (every prompt_id group of the input has that many rows) "
            "(their rows are not consecutive, as the framework's blocks are), and --set advcli.group_by=id") in err
    code, _, err = run_main(base + ["--set", "rollout.n_samples_per_prompt=8", "--set", "advcli.group_by=id"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "o.parquet").to_pandas()
    rewards = t.groupby(["step", "prompt_id"])["reward"]
    mean, std = rewards.transform("mean"), rewards.transform(lambda x: x.std(ddof=1))
    checked = 0
    for adv, mask, r, mu, sd in zip(t["advantages"], t["response_mask"], t["reward"], mean, std):
        if sd > 0:
            np.testing.assert_allclose(np.asarray(adv)[np.asarray(mask) > 0], (r - mu) / (sd + 1e-9), rtol=1e-5)
            checked += 1
    assert checked > 300


# ------------------------------------------------------------------------ the adaptive KL controller
def _kl_steps() -> list[dict]:
    """Three steps of two one-prompt rows (n = 2), k1 KL per token: step 0's rows 0.5 and 0.1 per valid token (row
    means 0.5 and 0.1: the masked token of row 0 is left out of its mean), step 1's 0.2 and 0.2."""
    rows = [dict(step=0, reward=1.0, mask=[1, 0, 1], old=[-1.0, -1.0, -1.0], ref=[-1.5, -9.0, -1.5]),
            dict(step=0, reward=0.0, mask=[1, 1], old=[-1.0, -1.0], ref=[-1.1, -1.1]),
            dict(step=1, reward=1.0, mask=[1], old=[-0.5], ref=[-0.7]),
            dict(step=1, reward=0.0, mask=[1, 1], old=[-0.5, -0.5], ref=[-0.7, -0.7]),
            dict(step=2, reward=1.0, mask=[1], old=[-0.5], ref=[-1.5]),
            dict(step=2, reward=0.0, mask=[1, 1], old=[-0.5, -0.5], ref=[-1.5, -1.5])]
    for r in rows:
        r["prompt_id"] = f"s{r['step']}"
    return rows


def _applied_beta(out, rows, step: int) -> float:
    """β of a step from its token_level_rewards: the second row's first token is −β·k1 (no reward there)."""
    i = [k for k, r in enumerate(rows) if r["step"] == step][1]
    return -out["token_level_rewards"][i][0] / (rows[i]["old"][0] - rows[i]["ref"][0])


@pytest.mark.parametrize("batch", [None, 50])
def test_adaptive_kl_controller_by_hand(tmp_path, batch):
    """AdaptiveKLController (kl_controller.py @3c3be623): a step takes β, then β ← β·(1 + clip(kl/target − 1, ±0.2)
    · n/horizon), kl = the mean of the step's row means (ppo_train's sample-weighted mean of info["kl"]), n =
    rollout.batch_size × n_samples_per_prompt (ppo_trainer.py L250-253): the step's 2 rows when not given."""
    rows = _kl_steps()
    settings = {EST: "reinforce_baseline", N: 2, "algo.kl.init_coef": 0.1, "algo.kl.target": 0.25,
                "algo.kl.horizon": 40.0}
    if batch is not None:
        settings["rollout.batch_size"] = batch
    out, _ = run_rows(tmp_path, rows, "openrlhf", settings)
    n = 2 if batch is None else batch * 2
    beta = [0.1]
    for kl in ((0.5 + 0.1) / 2, 0.2):  # step 0: 0.3/0.25 − 1 = 0.2; step 1: 0.2/0.25 − 1 = −0.2
        beta.append(beta[-1] * (1 + max(-0.2, min(0.2, kl / 0.25 - 1)) * n / 40.0))
    for step in range(3):
        assert _applied_beta(out, rows, step) == pytest.approx(beta[step], rel=1e-5), step


def test_adaptive_kl_controller_off_where_the_trainer_has_no_reward_kl(tmp_path):
    """A target with the KL in the loss (or β = 0) is run: β never reaches the advantages, as OpenRLHF's; a
    target of 0 is a fixed β (``if args.algo.kl.target:``)."""
    rows = _kl_steps()
    base = {EST: "reinforce_baseline", N: 2}
    fixed, _ = run_rows(tmp_path, rows, "openrlhf", {**base, "algo.kl.use_loss": True})
    out, _ = run_rows(tmp_path, rows, "openrlhf", {**base, "algo.kl.use_loss": True, "algo.kl.target": 0.1})
    assert out == fixed and "token_level_rewards" not in out
    out, _ = run_rows(tmp_path, rows, "openrlhf", {**base, "algo.kl.init_coef": 0.1, "algo.kl.target": 0})
    assert [_applied_beta(out, rows, s) for s in range(3)] == pytest.approx([0.1] * 3, rel=1e-5)


def test_adaptive_kl_controller_before_0_9_8_is_refused(tmp_path):
    """0.9.7 and before average the micro-batches' length-weighted KLs unweighted, micro-batches the DataLoader
    shuffles (ppo_actor.py @v0.9.7 L186-214): no dump gives the β; with the KL in the loss it is run."""
    rows = _kl_steps()
    base = {EST: "reinforce_baseline", N: 2, "kl_target": 0.1, "init_kl_coef": 0.1}
    with pytest.raises(AdvcliError, match="shuffles"):
        run_rows(tmp_path, rows, "openrlhf@0.9.7", base)
    run_rows(tmp_path, rows, "openrlhf@0.9.7", {**base, "use_kl_loss": True})
    out, _ = run_rows(tmp_path, rows, "openrlhf@0.9.8", {**base, "rollout_batch_size": 1})
    assert _applied_beta(out, rows, 1) == pytest.approx(0.1 * (1 + 0.2 * 2 / 10000), rel=1e-6)


def test_adaptive_kl_controller_negative_target_and_horizon_run(tmp_path):
    """OpenRLHF checks neither (``if args.algo.kl.target:``, kl_controller.py): a negative target makes
    clip(kl/target − 1) = −0.2 whatever the KL; a negative horizon turns the update the other way."""
    rows = _kl_steps()
    base = {EST: "reinforce_baseline", N: 2, "algo.kl.init_coef": 0.1}
    out, _ = run_rows(tmp_path, rows, "openrlhf", {**base, "algo.kl.target": -0.25, "algo.kl.horizon": 40})
    assert _applied_beta(out, rows, 1) == pytest.approx(0.1 * (1 - 0.2 * 2 / 40), rel=1e-5)
    out, _ = run_rows(tmp_path, rows, "openrlhf", {**base, "algo.kl.target": 0.25, "algo.kl.horizon": -40})
    assert _applied_beta(out, rows, 1) == pytest.approx(0.1 * (1 - 0.2 * 2 / 40), rel=1e-5)  # +0.2 · 2/(−40)


@pytest.mark.parametrize("release", ["", "@0.11.2"])
def test_bf16_scores_keep_their_rounding_when_promoted(tmp_path, release):
    """0.11.2 promotes a bf16 reward model's scores to float32 (experience_maker.py L242-245): their bf16 rounding
    stays, the group statistics are float32. By hand: rewards 0.43, 0.27, 0.21, 0.92 round to 0.4296875,
    0.26953125, 0.2099609375, 0.921875; group_norm (r − mean)/(std + 1e-9), unbiased std, on those (advcli ran the
    float32 rewards: −0.0854 instead of −0.0869 for the first)."""
    import torch

    rows = [dict(prompt_id="a", reward=r, mask=[1, 1]) for r in (0.43, 0.27, 0.21, 0.92)]
    settings = {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4, "algo.kl.init_coef": 0,
                "advcli.reward_dtype": "bfloat16"}
    got = run_rows(tmp_path, rows, "openrlhf" + release, settings)[0]["advantages"]
    r = torch.tensor([0.4296875, 0.26953125, 0.2099609375, 0.921875], dtype=torch.float64)
    want = ((r - r.mean()) / (r.std() + 1e-9)).tolist()
    assert [g[0] for g in got] == pytest.approx(want, rel=1e-5)
    assert got[0][0] == pytest.approx(-0.0869178, abs=1e-6)
