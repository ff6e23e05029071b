"""--flavor roll: ROLL's RLVR chain (alibaba/ROLL @ 8eb27cc2, roll/utils/functionals.py).

Every expected number below was produced by running ROLL's own, unmodified functions
(``reward_postprocess``, ``compute_token_reward``, ``compute_advantage`` and the kernels they call,
functionals.py @8eb27cc2, with ``get_kl_controller`` from roll/utils/kl_controller.py) on CPU,
torch 2.13, float32, one domain at a time in ROLL's order with one shared KL controller; the
response part of each [B, S-1] output is pasted here. Those runs fed ROLL float32 rewards (a custom
reward worker's), so these tests set ``advcli.reward_dtype=run`` (R32); the default, float16 (what every
reward worker ROLL ships emits), is tested against ROLL's ops run in float16 in tests/unit/test_reward_dtype.py.
"""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
from _flavor_rows import assert_rows_close, run_rows
from _float32_refs import reshaped_group_norm

import advcli
from advcli.errors import AdvcliError

N = "actor_infer.generating_args.num_return_sequences"
R32 = {"advcli.reward_dtype": "run"}  # float32 rewards, as the reference runs had

# ----------------------------------------------------------------------------- float32 hazards
HAZARD_ROWS = [dict(prompt_id="a", reward=0.9, mask=[1, 1, 1]), dict(prompt_id="a", reward=0.9, mask=[1, 1]),
               dict(prompt_id="a", reward=0.9, mask=[1]), dict(prompt_id="b", reward=0.0, mask=[1, 1]),
               dict(prompt_id="b", reward=1.0, mask=[1, 0, 1]), dict(prompt_id="b", reward=1.0, mask=[1, 1, 0])]
HAZARD_ADV = [
    [0.05960464, 0.05960464, 0.05960464],  # 0.9×3: std of the [2, 3] reshape is exactly 0, mean 1 ulp off
    [0.05960464, 0.05960464],
    [0.05960464],
    [-1.154699, -1.154699],
    [0.5773492, 0.0, 0.5773492],  # interior hole: reinforce return carries, then × mask
    [0.0, 0.0, 0.0],  # ends on a masked token: the reward at L_i-1 is masked away
]


def test_grpo_float32_hazard_0_9x3(tmp_path):
    # three equal values: their float32 sum, the deviations and so the residue round alike in any
    # summation order, so this literal holds on every machine (unlike 0.7×12 below)
    out, _ = run_rows(tmp_path, HAZARD_ROWS, "roll", {"adv_estimator": "grpo", N: 3, **R32})
    assert_rows_close(out["advantages"], HAZARD_ADV)
    # returns are not masked: the hole of row 4 keeps the carried return
    assert_rows_close(out["returns"], HAZARD_ADV[:4] + [[0.5773492, 0.5773492, 0.5773492], [0.0, 0.0, 0.0]])


def test_grpo_float32_hazard_0_7x12(tmp_path):
    rows = [dict(reward=0.7, mask=[1, 1]) for _ in range(12)] + [dict(reward=float(i % 2), mask=[1]) for i in range(12)]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 12, **R32}, chunk_rows=5)
    # ROLL's own reshape/mean/std calls on this machine: 0.7×12 left 0.1192 on the machine the spec was
    # written on, and the residue depends on the CPU's summation order; float64 gives 0
    want = reshaped_group_norm([0.7] * 12 + [float(i % 2) for i in range(12)], 12, 1e-6)
    assert out["advantages"][0] == [float(want[0])] * 2
    assert out["advantages"][12] == pytest.approx([-0.9574253], rel=1e-6)
    assert out["advantages"][13] == pytest.approx([0.9574253], rel=1e-6)
    out64 = advcli.run(str(tmp_path / "in.parquet"), str(tmp_path / "o64.parquet"), flavor="roll",
                       settings={"adv_estimator": "grpo", N: 12, **R32}, precision="float64", device="cpu")
    assert out64 is not None
    assert pq.read_table(tmp_path / "o64.parquet").column("advantages").to_pylist()[0] == [0.0, 0.0]


# --------------------------------------------------------------------- multi-step, multi-domain
MD_ROWS = [
    dict(step=1, domain="code", reward=1.0, mask=[1, 1, 0, 1], old=[-0.5, -1.2, -0.3, -2.0], ref=[-0.7, -1.0, -0.3, -1.5]),
    dict(step=0, domain="math", reward=0.9, mask=[1, 1, 1], old=[-0.1, -0.2, -0.3], ref=[-0.4, -0.1, -0.9]),
    dict(step=0, domain="code", reward=-0.5, mask=[1, 0, 0, 1, 1], old=[-1.0, -2.0, -0.5, -0.1, -0.2],
         ref=[-1.5, -30.0, -0.4, -0.3, -0.2]),
    dict(step=0, domain="math", reward=0.2, mask=[1], old=[-0.6], ref=[-0.2]),
    dict(step=1, domain="math", reward=2.5, mask=[1, 1, 1, 0], old=[-0.3, -0.2, -25.0, -0.1], ref=[-0.1, -0.2, -0.4, -0.2]),
    dict(step=0, domain="code", reward=0.7, mask=[1, 1], old=[-0.2, -0.9], ref=[-0.5, -0.6]),
    dict(step=0, domain="math", reward=-1.5, mask=[1, 1, 0, 0, 1, 1], old=[-0.4, -0.8, -0.1, -0.1, -1.1, -0.6],
         ref=[-0.6, -0.9, -0.3, -0.1, -1.0, -0.5]),
    dict(step=1, domain="code", reward=0.0, mask=[1, 1], old=[-0.2, -0.4], ref=[-0.2, -0.7]),
    dict(step=1, domain="math", reward=0.4, mask=[1, 1], old=[-1.0, -0.5], ref=[-0.9, -0.8]),
    dict(step=0, domain="math", reward=1.1, mask=[1, 1, 1, 1, 0], old=[-0.2, -0.3, -0.4, -0.5, -0.6],
         ref=[-0.3, -0.3, -0.2, -0.9, -0.1]),
]
MD_SETTINGS = {"adv_estimator": "reinforce", "gamma": 0.99, "norm_mean_type": "batch", "norm_std_type": "batch",
               "reward_clip": 0.8, "add_token_level_kl": True, "kl_penalty": "k3", "init_kl_coef": 0.1,
               "target_kl": 0.01, "kl_horizon": 10, "whiten_rewards": True, "whiten_advantages": True,
               "advantage_clip": 2.5, **R32}
# β used by (step 0, math), (step 0, code), (step 1, code), (step 1, math): ROLL's controller stepped after each
MD_BETAS = [0.1, 0.108, 0.11232, 0.1168128]
MD_ADV = [
    [0.7220789, 0.7270653, 0.0, 0.7416542],
    [1.295708, 1.283198, 1.263988],
    [-0.7140431, -0.0, -0.0, -0.7320257, -0.7446806],
    [0.192636],
    [1.352699, 0.1137251, -1.148111, 0.0],
    [1.090918, 1.099831],
    [-1.132362, -1.173471, -0.0, -0.0, -1.245108, -1.289857],
    [-1.087355, -1.103443],
    [0.4687183, -0.7870317],
    [0.2459268, 0.2161775, 0.1852355, 0.1579281, 0.0],
]
MD_RET = [
    [1.373068, 1.380712, 1.389044, 1.403074],
    [2.105621, 2.082842, 2.047861],
    [-1.363232, -1.363129, -1.376898, -1.390806, -1.410211],
    [0.09700045],
    [0.2733568, -0.4558985, -1.19861, 0.0],
    [1.404461, 1.418128],
    [-2.315732, -2.390589, -2.470868, -2.495826, -2.521036, -2.602521],
    [-1.400544, -1.425204],
    [-0.2469507, -0.9860806],
    [0.1940396, 0.139868, 0.08352472, 0.03379978, 0.0],
]
MD_TLR = [
    [0.006163586, 0.005558201, 0.0, 1.403074],
    [0.04360802, 0.0554594, 2.047861],
    [-0.01373397, 0.0, 0.0, 0.005302723, -1.410211],
    [0.09700045],
    [0.7246963, 0.7307257, -1.19861, 0.0],
    [0.0005137408, 1.418128],
    [0.05095127, 0.05557029, 0.0, 0.0, 0.0554594, -2.602521],
    [0.01040742, -1.425204],
    [0.729269, -0.9860806],
    [0.05557029, 0.05717854, 0.05006294, 0.03379978, 0.0],
]


@pytest.mark.parametrize("chunk_rows", [1, 4, 100])
def test_multi_step_domain_chain(tmp_path, chunk_rows):
    """batch/batch reward norm, reward_clip twice, k3 KL (a log-ratio of 29.5), adaptive controller stepped
    per domain, whiten_rewards, whiten_advantages, advantage_clip — per (step, domain) batch."""
    out, result = run_rows(tmp_path, MD_ROWS, "roll", MD_SETTINGS, chunk_rows=chunk_rows)
    assert_rows_close(out["advantages"], MD_ADV, rtol=2e-5, atol=2e-6)
    assert_rows_close(out["returns"], MD_RET, rtol=2e-5, atol=2e-6)
    assert_rows_close(out["token_level_rewards"], MD_TLR, rtol=2e-5, atol=2e-6)
    assert [(s["step"], s["domain"]) for s in result.per_step] == [(0, "math"), (0, "code"), (1, "code"), (1, "math")]
    assert [s["rows"] for s in result.per_step] == [4, 2, 2, 2]
    assert [s["kl_coef"] for s in result.per_step] == pytest.approx(MD_BETAS)


# ------------------------------------------------------------------------------ gae (LitePPO)
GAE_ROWS = [dict(reward=r, mask=m, old=o, ref=rf, values=v) for r, m, o, rf, v in [
    (1.0, [1, 1, 1], [-0.1, -0.2, -0.3], [-0.2, -0.2, -0.1], [0.5, 0.4, 0.3]),
    (0.0, [1, 0, 1, 0], [-0.5, -0.1, -0.2, -0.3], [-0.4, -0.3, -0.2, -0.1], [0.2, -0.1, 0.3, 0.7]),
    (0.5, [1], [-1.0], [-0.5], [0.9]),
    (0.25, [1, 1, 1, 1, 1], [-0.3, -0.3, -0.3, -0.3, -0.3], [-0.1, -0.5, -0.3, -0.2, -0.6], [0.1, 0.2, 0.3, 0.4, 0.5]),
]]
GAE_ADV = [
    [0.4986974, 0.6820398, 0.8810772],
    [-0.1234213, 0.0, -0.2307, -0.0],
    [-0.5822307],
    [-0.1766298, -0.3194498, -0.4561727, -0.6197225, -0.8077693],
]
GAE_RET = [  # A + V with the unmasked critic values
    [0.9986974, 1.08204, 1.181077],
    [0.07657871, 0.09144636, 0.06930006, 0.0],
    [0.3177693],
    [-0.07662978, -0.1194498, -0.1561727, -0.2197225, -0.3077693],
]
GAE_TLR = [
    [-0.005, 0.0, 1.181077],
    [0.005, 0.0, 0.0, -0.0],
    [0.3177693],
    [0.01, -0.01, 0.0, 0.005, -0.3077693],
]


def test_gae_group_mean_batch_std(tmp_path):
    """LitePPO pairing (group mean, batch std), n=2 by position, gae over every column with unmasked
    values (the masked last token keeps V=0.7 in δ), fixed β=0.05 with the plain `kl` estimator."""
    out, _ = run_rows(tmp_path, GAE_ROWS, "roll", {"adv_estimator": "gae", N: 2, "gamma": 0.99, "lambd": 0.9,
                                                   "norm_mean_type": "group", "norm_std_type": "batch",
                                                   "add_token_level_kl": True, "init_kl_coef": 0.05,
                                                   **R32})
    assert_rows_close(out["advantages"], GAE_ADV)
    assert_rows_close(out["returns"], GAE_RET)
    assert_rows_close(out["token_level_rewards"], GAE_TLR)


def test_defaults_are_gae_without_normalisation(tmp_path):
    """Defaults: gae, γ=1, λ=0.95, no norm, no KL in the reward: A_t by hand for one row."""
    rows = [dict(reward=1.0, mask=[1, 1], values=[0.5, 0.25])]
    out, _ = run_rows(tmp_path, rows, "roll", {})
    # δ1 = 1 − 0.25 = 0.75; δ0 = 0 + 0.25 − 0.5 = −0.25; A0 = −0.25 + 0.95·0.75 = 0.4625
    assert out["advantages"][0] == pytest.approx([0.4625, 0.75])
    assert out["returns"][0] == pytest.approx([0.9625, 1.0])
    assert "token_level_rewards" not in out


# ------------------------------------------------------------------------ sample-level masks
# get_sample_level_mask (functionals.py L681-738 @8eb27cc2): a row left out has mask 0 in compute_advantage (its
# advantages, returns and token rewards 0, out of the whitening), not in the reward norm or the KL
def _masked(tmp_path, rows, settings):
    return run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", **R32, **settings})[0]


def test_max_len_mask_leaves_out_the_rows_cut_at_the_maximum(tmp_path):
    rows = [dict(reward=1.0, mask=[1, 1, 1]), dict(reward=0.5, mask=[1, 1]), dict(reward=0.2, mask=[1, 0, 1, 1])]
    out = _masked(tmp_path, rows, {"max_len_mask": True, "actor_infer.generating_args.max_new_tokens": 3})
    assert out["advantages"] == [[0.0] * 3, [0.5, 0.5], [0.0] * 4]  # Σ mask 3 = the maximum: rows 0 and 2
    assert out["returns"] == out["advantages"]
    assert _masked(tmp_path, rows, {})["advantages"][0] == [1.0] * 3


def test_difficulty_mask_leaves_out_the_groups_all_solved_or_all_failed(tmp_path):
    """Groups of 2: means 1 and 0 are not strictly inside (0, 1), 0.5 and 0.95 are; with thresholds (0.2, 0.9)
    the group of mean 0.95 goes too. The group reward norm (grpo) runs on every row: the kept groups keep theirs."""
    rows = [dict(reward=r, mask=[1, 1]) for r in (1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.9, 1.0)]
    out = _masked(tmp_path, rows, {"difficulty_mask": True, N: 2})
    assert_rows_close(out["advantages"], [[0.0] * 2] * 2 + [[0.0] * 2, [1.0] * 2] + [[0.0] * 2] * 2
                      + [[0.9] * 2, [1.0] * 2])
    out = _masked(tmp_path, rows, {"difficulty_mask": True, N: 2, "difficulty_low_threshold": 0.2,
                                   "difficulty_high_threshold": 0.9})
    assert out["advantages"][6:] == [[0.0] * 2] * 2 and out["advantages"][3] == [1.0] * 2
    out = run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 2, "difficulty_mask": True, **R32})[0]
    assert [a[0] for a in out["advantages"][2:4]] == pytest.approx([-0.7071061, 0.7071061], rel=1e-5)
    assert out["advantages"][0] == [0.0] * 2  # all solved: (1 − 1)/(0 + 1e-6) = 0 anyway, and left out
    # mean 0.95 is inside (0, 1): kept, (0.9 − 0.95)/(0.0707107 + 1e-6)
    assert out["advantages"][6] == pytest.approx([-0.05 / (0.05 * math.sqrt(2) + 1e-6)] * 2, rel=1e-5)
    assert _masked(tmp_path, rows, {"difficulty_mask": True, N: 1})["advantages"][0] == [1.0] * 2  # n = 1: all kept


def test_error_max_len_clip_keeps_the_solved_and_the_short_failed(tmp_path):
    rows = [dict(reward=0.0, mask=[1, 1]), dict(reward=0.0, mask=[1, 1, 1]), dict(reward=1.0, mask=[1] * 5),
            dict(reward=0.5, mask=[1])]
    out = _masked(tmp_path, rows, {"error_max_len_clip": True, "error_max_len_threshold": 3})
    assert out["advantages"] == [[0.0] * 2, [0.0] * 3, [1.0] * 5, [0.0]]
    out = _masked(tmp_path, rows, {"error_max_len_clip": True, "error_max_len_threshold": 3,
                                   "whiten_advantages": True})
    # the whitening is over the kept rows' tokens only: the two rows' 2 + 5 tokens (0, 0, 1 × 5)
    mean = 5 / 7
    std = math.sqrt((2 * mean ** 2 + 5 * (1 - mean) ** 2) / 6)
    assert out["advantages"][0] == pytest.approx([(0 - mean) / std] * 2, rel=1e-5)
    assert out["advantages"][2] == pytest.approx([(1 - mean) / std] * 5, rel=1e-5)
    assert out["advantages"][1] == [0.0] * 3 and out["advantages"][3] == [0.0]


def test_the_summary_counts_the_rows_each_mask_left_out(tmp_path):
    """The run's ``sample_masked`` diagnostic: the rows out of the advantage, and per rule how many it took out
    (a row two rules drop counts once in the total, once under each rule)."""
    rows = [dict(reward=0.0, mask=[1, 1, 1]), dict(reward=1.0, mask=[1, 1, 1]), dict(reward=0.0, mask=[1]),
            dict(reward=0.5, mask=[1, 1])]
    _, result = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", **R32, "max_len_mask": True,
                                                  "actor_infer.generating_args.max_new_tokens": 3,
                                                  "error_max_len_clip": True, "error_max_len_threshold": 3})
    item, = [d for d in result.diagnostics if d["kind"] == "sample_masked"]
    # max_len: rows 0, 1 (Σ mask 3); error clip: row 0 (0 with 3 ≥ 3 tokens), row 3 (0.5): rows 0, 1, 3 out
    assert (item["count"], item["unit"]) == (3, "rows")
    assert [(e["row"], e["rules"]) for e in item["examples"]] == [
        (0, ["drop_length", "keep_scores_below"]), (1, ["drop_length"]), (3, ["keep_scores_below"])]
    assert "drop_length=3 (Σ mask equal to it): 2" in item["explanation"]
    assert "keep_scores_below=3.0" in item["explanation"] and "it): 2." in item["explanation"]
    assert item["meaning"].startswith("rows the sample-level masks")
    _, plain = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", **R32})
    assert not [d for d in plain.diagnostics if d["kind"] == "sample_masked"]


# ------------------------------------------------------------------------------- edge cases
def test_group_of_one_with_group_std_is_nan(tmp_path):
    """grpo with n=1: torch.std of one element is NaN, and so is every advantage (ROLL does the same)."""
    rows = [dict(reward=1.0, mask=[1, 1]), dict(reward=0.0, mask=[1])]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 1})  # n=1 given, not the default
    assert all(math.isnan(x) for row in out["advantages"] for x in row)


def test_group_mean_only_with_n1_gives_zero(tmp_path):
    rows = [dict(reward=1.0, mask=[1, 1]), dict(reward=-3.0, mask=[1])]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group", N: 1})
    assert out["advantages"] == [[0.0, 0.0], [0.0]]


@pytest.mark.parametrize("name", ["gigpo", "step_reinforce"])
def test_agentic_names_run_as_reinforce_in_the_rlvr_chain(tmp_path, name):
    """functionals.py compute_advantage L1168 @8eb27cc2 takes gigpo and step_reinforce into its reinforce branch and
    reward_postprocess special-cases grpo only: with a group mean, r − mean over the block of 2, then the return
    A_t = r_t + A_{t+1} (γ = 1) with the reward on the last token, × mask."""
    rows = [dict(prompt_id="a", reward=1.0, mask=[1, 1]), dict(prompt_id="a", reward=0.0, mask=[1]),
            dict(prompt_id="b", reward=0.5, mask=[1, 1, 1]), dict(prompt_id="b", reward=0.5, mask=[1])]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": name, "norm_mean_type": "group", N: 2})
    assert_rows_close(out["advantages"], [[0.5, 0.5], [-0.5], [0.0, 0.0, 0.0], [0.0]])


def test_default_group_size_runs_where_the_token_kl_carries_the_signal(tmp_path):
    """num_return_sequences left at ROLL's default 1 with a group mean: refused alone (every advantage 0), but with
    add_token_level_kl the advantages are the KL's return, as ROLL runs it: −β·k1 per token (k1 = old − ref = 0.2),
    summed from the end (γ = 1), the reward's group-mean part 0."""
    rows = [dict(r, prompt_id=f"p{i}", old=[-1.0] * len(r["mask"]), ref=[-1.2] * len(r["mask"]))
            for i, r in enumerate(HAZARD_ROWS[:2])]
    with pytest.raises(AdvcliError, match="defaults to 1"):
        run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"})
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group",
                                                "add_token_level_kl": True, "init_kl_coef": 0.1})
    k = -0.1 * 0.2
    assert_rows_close(out["advantages"], [[3 * k, 2 * k, k], [2 * k, k]])


def test_whitening_skipped_in_a_domain_with_one_valid_token(tmp_path):
    """compute_advantage L1099-1106: ≤ 1 valid token in the domain → no whitening there; the other domain
    is whitened over its own tokens (unbiased, var + 1e-8)."""
    rows = [dict(domain="a", reward=1.0, mask=[0, 1, 0]),
            dict(domain="b", reward=1.0, mask=[1, 1]), dict(domain="b", reward=0.0, mask=[1, 1])]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "whiten_advantages": True})
    # domain a: the reward sits on the masked L_i-1 → 0; not whitened, × mask
    assert out["advantages"][0] == [0.0, 0.0, 0.0]
    # domain b: values [1, 1, 0, 0]: μ = 0.5, unbiased var = 1/3 → ±0.5/sqrt(1/3 + 1e-8)
    w = 0.5 / math.sqrt(1 / 3 + 1e-8)
    assert out["advantages"][1] == pytest.approx([w, w], rel=1e-6)
    assert out["advantages"][2] == pytest.approx([-w, -w], rel=1e-6)


@pytest.mark.parametrize("release", ["0.2.0", "v0.2.1", "0.3.0"])
@pytest.mark.parametrize("whiten", ["whiten_advantages", "whiten_rewards"])
def test_releases_before_476_stop_at_a_domain_with_one_valid_token(tmp_path, release, whiten):
    """ROLL v0.2.0-v0.3.0 (the GitHub releases) guard compute_advantage's whitenings with ``mask.sum() == 0``
    (utils/functionals.py L770 @v0.2.0, L787 @v0.2.1, L1099 @v0.3.0); with one valid token masked_var raises
    ValueError('The sum of the mask is one, ...') (L300/L311/L312) and the step stops: advcli refuses, naming it.
    #476 (in 8eb27cc2) made the guard <= 1, which --flavor roll runs (the test above)."""
    rows = [dict(domain="a", reward=1.0, mask=[0, 1, 0]),
            dict(domain="b", reward=1.0, mask=[1, 1]), dict(domain="b", reward=0.0, mask=[1, 1])]
    settings = {"adv_estimator": "reinforce", whiten: True}
    with pytest.raises(AdvcliError, match="one valid token in domain 'a'.*before #476"):
        run_rows(tmp_path, rows, f"roll@{release}", settings)
    # the same rows without whitening, or a domain with no valid token at all, run as at 8eb27cc2
    pin, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce"})
    got, _ = run_rows(tmp_path, rows, f"roll@{release}", {"adv_estimator": "reinforce"})
    assert got["advantages"] == pin["advantages"]
    rows[0]["mask"] = [0, 0, 0]
    pin, _ = run_rows(tmp_path, rows, "roll", settings)
    got, _ = run_rows(tmp_path, rows, f"roll@{release}", settings)
    assert got["advantages"] == pin["advantages"] and got["advantages"][0] == [0.0, 0.0, 0.0]


def test_the_tagged_releases_run_the_pins_chain(tmp_path):
    """v0.2.0, v0.2.1 and v0.3.0 have 8eb27cc2's reward_postprocess, KL controller, kernels and masked_whiten
    function for function (only #476's guard differs): the multi-step domain chain above, whose expected values
    ROLL's own functions produced, has no one-token domain, so each tag gives those numbers."""
    from advcli.flavors import get, release_of

    for name in ("0.2.0", "v0.2.0", "0.2.1", "v0.3.0", "7f9d4d3", "7f9d4d38", "3077befc5"):  # any of its commits
        assert release_of(get("roll"), name).name == "0.2.0"
    out, _ = run_rows(tmp_path, MD_ROWS, "roll@v0.3.0", MD_SETTINGS)
    assert_rows_close(out["advantages"], MD_ADV, rtol=2e-5, atol=2e-6)
    assert_rows_close(out["token_level_rewards"], MD_TLR, rtol=2e-5, atol=2e-6)


def test_reward_clip_zero_is_off_advantage_clip_zero_zeroes(tmp_path):
    rows = [dict(reward=3.0, mask=[1, 1])]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "reward_clip": 0})
    assert out["advantages"] == [[3.0, 3.0]]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "reinforce", "advantage_clip": 0})
    assert out["advantages"] == [[0.0, 0.0]] and out["returns"] == [[3.0, 3.0]]


def test_old_flat_group_size_alias(tmp_path):
    out, _ = run_rows(tmp_path, HAZARD_ROWS, "roll", {"adv_estimator": "grpo", "num_return_sequences_in_group": 3,
                                                       **R32})
    assert_rows_close(out["advantages"], HAZARD_ADV)


# --------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("settings, words", [
    ({"norm_mean_type": "running"}, "KeyError: 'domain'"),
    ({"norm_std_type": "running", "norm_mean_type": "batch"}, "KeyError: 'domain'"),
    ({"norm_std_type": "group"}, "norm_mean_type=group"),
    ({"norm_std_type": "group", "norm_mean_type": "batch"}, "[G, B]"),
    ({"adv_estimator": "agentic_reinforce"}, "NotImplementedError"),
    ({"adv_estimator": "grop"}, "Did you mean 'grpo'"),
    ({"kl_penalty": "full"}, "ROLL itself stops here"),
    ({"kl_penalty": "low_var_kl"}, "Valid: kl, abs, mse, k3"),
    ({"norm_mean_type": "grup"}, "Did you mean 'group'"),
    # torch.clamp(min=0.5, max=-0.5) sets every token, the zeros too, to -0.5 (functionals.py L637-644, L667-675)
    ({"reward_clip": -0.5}, "reward_clip must be ≥ 0 (got -0.5)"),
])
def test_refused_configurations(tmp_path, settings, words):
    with pytest.raises(AdvcliError) as e:
        run_rows(tmp_path, HAZARD_ROWS, "roll", settings)
    assert words in str(e.value)


def test_rows_not_divisible_into_groups(tmp_path):
    rows = HAZARD_ROWS[:5]
    with pytest.raises(AdvcliError, match="do not split into groups of 3"):
        run_rows(tmp_path, [dict(r, prompt_id="x") for r in rows], "roll", {"adv_estimator": "grpo", N: 3})


# ------------------------------------------------------------------- positional blocks vs ids
def test_block_holding_two_prompt_ids_is_refused(tmp_path):
    rows = [dict(r) for r in HAZARD_ROWS]
    rows[2]["prompt_id"] = "b"
    rows[3]["prompt_id"] = "a"
    with pytest.raises(AdvcliError) as e:
        run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 3})
    msg = str(e.value)
    assert "rows 0-2" in msg and "row 0 has 'a'" in msg and "row 2 has 'b'" in msg


def test_prompt_id_spanning_two_blocks_is_refused(tmp_path):
    rows = [dict(r, prompt_id="a") for r in HAZARD_ROWS]
    with pytest.raises(AdvcliError) as e:
        run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 3})
    assert "'a' spans several positional groups of 3" in str(e.value) and "row 3" in str(e.value)


def test_same_prompt_id_in_two_domains_is_fine(tmp_path):
    """Blocks are per domain; a prompt id reused by another domain (its own batch) is not a conflict."""
    rows = [dict(r, domain="x" if i < 3 else "y", prompt_id="p") for i, r in enumerate(HAZARD_ROWS)]
    out, _ = run_rows(tmp_path, rows, "roll", {"adv_estimator": "grpo", N: 3, **R32})
    # each domain is a single [1, 3] group now: the 0.9×3 block takes torch's 1-D std path (7.3e-8), so
    # ROLL gives 5.96e-8/(7.3e-8 + 1e-6) = 0.05555 here instead of 0.0596
    assert out["advantages"][0] == pytest.approx([0.05554951] * 3, rel=1e-6)
    assert out["advantages"][3] == pytest.approx([-1.154699, -1.154699], rel=1e-5)


def test_explain_names_the_sample_masks(capsys):
    from conftest import run_main

    code, out, _ = run_main(["explain", "--flavor", "roll", "--set", "max_len_mask=true", "--set",
                             "actor_infer.generating_args.max_new_tokens=512", "--set", "error_max_len_clip=true",
                             "--set", "error_max_len_threshold=300"], capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if "sample mask" in x)
    assert "Σ mask = 512" in line and "0 with Σ mask ≥ 300" in line and "group" not in line


def _kl_rows():
    return [dict(r, step=s, old=[-1.0] * len(r["mask"]), ref=[-1.2] * len(r["mask"]))
            for s in (0, 1) for r in HAZARD_ROWS]


def test_adaptive_kl_controller_edges(tmp_path):
    """ROLL's AdaptiveKLController (roll/utils/kl_controller.py @8eb27cc2) checks nothing, and compute_token_reward
    updates it on every step (functionals.py L626-632): target_kl=0 stops ROLL (ZeroDivisionError) with the token KL
    or without; kl_horizon=0 without the token KL runs (β is never read); a negative target or horizon runs, the
    first step at init_kl_coef (each step uses β from before its update): step 1 takes 0.05·(1 − 0.2·6/h)."""
    rows = _kl_rows()
    with pytest.raises(AdvcliError, match="target_kl=0"):
        run_rows(tmp_path, rows, "roll", {N: 3, "target_kl": 0, "adv_estimator": "reinforce"})
    plain, _ = run_rows(tmp_path, rows, "roll", {N: 3, "adv_estimator": "reinforce"})
    out, _ = run_rows(tmp_path, rows, "roll", {N: 3, "target_kl": 0.1, "kl_horizon": 0, "adv_estimator": "reinforce"})
    assert out == plain
    kl = {N: 3, "add_token_level_kl": True, "init_kl_coef": 0.05, "adv_estimator": "reinforce"}
    for extra, h in (({"target_kl": -0.1, "kl_horizon": 30}, 30), ({"target_kl": 0.01, "kl_horizon": -30}, 30)):
        out, _ = run_rows(tmp_path, rows, "roll", {**kl, **extra})
        # a row's first token carries −β·k1 (k1 = 0.2) and no reward: the last-step rows sit after the first 6
        for step, beta in ((0, 0.05), (1, 0.05 * (1 - 0.2 * 6 / h))):
            got = out["token_level_rewards"][6 * step + 0][0]
            assert got == pytest.approx(-beta * 0.2, rel=1e-5), (extra, step)
