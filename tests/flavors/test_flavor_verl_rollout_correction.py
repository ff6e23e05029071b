"""--flavor verl, algorithm.rollout_correction.*: against numbers from verl's own rollout correction.

EXPECTED_* below were computed by running the unmodified ``compute_rollout_correction_and_add_to_batch``
of ``verl/trainer/ppo/rollout_corr_helper.py`` at verl-project/verl @ 1dda039b (only its heavy imports
stubbed; ``masked_sum``/``masked_mean`` from ``verl/utils/torch_functional.py`` at the same commit) on
ROWS padded to [5, 4] with mask 0, in **float64** (so the literals hold on any machine); advcli runs in
float32 and is compared at rtol 1e-5 (weights), exactly (masks) and 1e-4 relative (metrics).
"""
import json
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main, run_table

import advcli
from advcli.errors import AdvcliError

# (prompt_id, reward, response_mask, old_log_probs, rollout_log_probs). Row 1 has an interior masked
# span, row 3 a masked tail (rollout log-prob 0 there, as verl writes it), row 2 length 1 with
# log-ratio 1.45 (ratio 4.26), row 4 an all-zero mask.
ROWS = [
    ("p0", 1.0, [1, 1, 1], [-0.5, -1.0, -0.2], [-0.6, -0.7, -0.25]),
    ("p0", 0.0, [1, 0, 1, 1], [-1.2, -0.3, -2.0, -0.1], [-0.2, 0.0, -2.5, -0.1]),
    ("p0", 1.0, [1], [-0.05], [-1.5]),
    ("p1", 0.0, [1, 1, 0], [-0.4, -0.9, -3.0], [-0.45, -0.85, 0.0]),
    ("p1", 1.0, [0, 0], [-1.0, -1.0], [0.0, 0.0]),
]
P = "algorithm.rollout_correction."
CONFIGS = {
    "A": {P + "rollout_is": "token", P + "rollout_is_threshold": 2.0, P + "rollout_rs": "token_k1",
          P + "rollout_rs_threshold": "0.5_4.0"},
    "B": {P + "rollout_is": "sequence", P + "rollout_is_threshold": 2.0, P + "rollout_rs": "seq_sum_k1",
          P + "rollout_rs_threshold": "0.5_2.0"},
    "C": {P + "rollout_is": "token", P + "rollout_is_threshold": "0.5_1.5", P + "rollout_is_batch_normalize": True},
    "D": {P + "rollout_is": "sequence", P + "rollout_is_threshold": 3.0, P + "rollout_is_batch_normalize": True,
          P + "rollout_rs": "seq_max_k3,seq_mean_k2", P + "rollout_rs_threshold": "0.5,0.1"},
}
EXPECTED_WEIGHTS = {
    "A": [[1.1051709180756475, 0.7408182206817179, 1.0512710963760241], [0.36787944117144233, 0.0, 1.6487212707001282, 1.0],  # noqa: E501
          [2.0], [1.0512710963760241, 0.951229424500714, 0.0], [0.0, 0.0]],
    "B": [[0.8607079764250577] * 3, [0.6065306597126334, 0.0, 0.6065306597126334, 0.6065306597126334], [2.0],
          [1.0, 1.0, 0.0], [0.0, 0.0]],
    "C": [[1.6859223066881515, 1.130107518231713, 1.6036989055438868], [0.0, 0.0, 0.0, 1.5254855869929365], [0.0],
          [1.6036989055438868, 1.4510867769994247, 0.0], [0.0, 0.0]],
    "D": [[0.6297204374697655] * 3, [0.44375649213740165, 0.0, 0.44375649213740165, 0.44375649213740165],
          [2.1948923027946248], [0.7316307675982082, 0.7316307675982082, 0.0], [0.0, 0.0]],
}
EXPECTED_MASK = {
    # A: row 2's ratio 4.26 is inside [0.5, 4.0]... but the k1 bounds act on log(π_rollout/π_train) = −1.45
    # < log 0.5: rejected; row 1's first token (ratio 0.37 < 0.5, k1 = 1.0 <= log 4) is kept
    "A": [[1, 1, 1], [1, 0, 1, 1], [0], [1, 1, 0], [0, 0]],
    "B": [[1, 1, 1], [1, 0, 1, 1], [0], [1, 1, 0], [0, 0]],
    "C": [[1, 1, 1], [1, 0, 1, 1], [1], [1, 1, 0], [0, 0]],  # IcePop zeroes weights, never the mask
    "D": [[1, 1, 1], [0, 0, 0, 0], [0], [1, 1, 0], [0, 0]],
}
OFFPOLICY = {"rollout_corr/chi2_seq": 3.2565686062592443, "rollout_corr/chi2_token": 1.990350681064463,
             "rollout_corr/k3_kl": 0.2643862203389461, "rollout_corr/kl": -0.08888888888888886,
             "rollout_corr/log_ppl_abs_diff": 0.3333333333333333, "rollout_corr/log_ppl_diff": -0.24666666666666667,
             "rollout_corr/log_ppl_diff_max": 0.16666666666666663, "rollout_corr/log_ppl_diff_min": -1.45,
             "rollout_corr/ppl_ratio": 0.8934403594670937, "rollout_corr/rollout_log_ppl": 0.72,
             "rollout_corr/rollout_ppl": 2.3233263524500574, "rollout_corr/training_log_ppl": 0.47333333333333333,
             "rollout_corr/training_ppl": 1.7466721180130027}
EXPECTED_METRICS = {
    "A": {**OFFPOLICY, "rollout_corr/rollout_is_eff_sample_size": 0.8576823881833835, "rollout_corr/rollout_is_max": 2.0, "rollout_corr/rollout_is_mean": 1.1018179408757443, "rollout_corr/rollout_is_min": 0.36787944117144233, "rollout_corr/rollout_is_ratio_fraction_high": 0.1111111119389534, "rollout_corr/rollout_is_ratio_fraction_low": 0.1111111119389534, "rollout_corr/rollout_is_seq_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_seq_fraction_low": 0.20000000298023224, "rollout_corr/rollout_is_seq_max": 2.0, "rollout_corr/rollout_is_seq_max_deviation": 1.0, "rollout_corr/rollout_is_seq_mean": 0.9945074485546712, "rollout_corr/rollout_is_seq_min": 0.0, "rollout_corr/rollout_is_seq_std": 0.7072931096365817, "rollout_corr/rollout_is_std": 0.44882386877211583, "rollout_corr/rollout_rs_masked_fraction": 0.1111111111111111, "rollout_corr/rollout_rs_seq_masked_fraction": 0.20000000298023224, "rollout_corr/rollout_rs_token_k1_fraction_high": 0.0, "rollout_corr/rollout_rs_token_k1_fraction_low": 0.1111111119389534, "rollout_corr/rollout_rs_token_k1_masked_fraction": 0.1111111111111111, "rollout_corr/rollout_rs_token_k1_max": 1.0, "rollout_corr/rollout_rs_token_k1_mean": -0.08888888888888886, "rollout_corr/rollout_rs_token_k1_min": -1.45, "rollout_corr/rollout_rs_token_k1_seq_fraction_high": 0.0, "rollout_corr/rollout_rs_token_k1_seq_fraction_low": 0.25, "rollout_corr/rollout_rs_token_k1_seq_masked_fraction": 0.25, "rollout_corr/rollout_rs_token_k1_seq_max": 0.16666666666666666, "rollout_corr/rollout_rs_token_k1_seq_max_deviation": 1.45, "rollout_corr/rollout_rs_token_k1_seq_mean": -0.30833333333333335, "rollout_corr/rollout_rs_token_k1_seq_min": -1.45, "rollout_corr/rollout_rs_token_k1_seq_std": 0.7643079658532067, "rollout_corr/rollout_rs_token_k1_std": 0.4518783219548817},  # noqa: E501
    "B": {**OFFPOLICY, "rollout_corr/rollout_is_eff_sample_size": 0.840995638405659, "rollout_corr/rollout_is_max": 4.263114515168817, "rollout_corr/rollout_is_mean": 0.9335239898236749, "rollout_corr/rollout_is_min": 0.6065306597126334, "rollout_corr/rollout_is_ratio_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_ratio_fraction_low": 0.0, "rollout_corr/rollout_is_seq_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_seq_fraction_low": 0.20000000298023224, "rollout_corr/rollout_is_seq_max": 2.0, "rollout_corr/rollout_is_seq_max_deviation": 1.0, "rollout_corr/rollout_is_seq_mean": 0.8934477272275382, "rollout_corr/rollout_is_seq_min": 0.0, "rollout_corr/rollout_is_seq_std": 0.7275736140441207, "rollout_corr/rollout_is_std": 0.4059131857611189, "rollout_corr/rollout_rs_masked_fraction": 0.1111111111111111, "rollout_corr/rollout_rs_seq_masked_fraction": 0.20000000298023224, "rollout_corr/rollout_rs_seq_sum_k1_fraction_high": 0.0, "rollout_corr/rollout_rs_seq_sum_k1_fraction_low": 0.25, "rollout_corr/rollout_rs_seq_sum_k1_masked_fraction": 0.1111111111111111, "rollout_corr/rollout_rs_seq_sum_k1_max": 0.5, "rollout_corr/rollout_rs_seq_sum_k1_mean": 0.05555555555555561, "rollout_corr/rollout_rs_seq_sum_k1_min": -1.45, "rollout_corr/rollout_rs_seq_sum_k1_seq_fraction_high": 0.0, "rollout_corr/rollout_rs_seq_sum_k1_seq_fraction_low": 0.25, "rollout_corr/rollout_rs_seq_sum_k1_seq_masked_fraction": 0.25, "rollout_corr/rollout_rs_seq_sum_k1_seq_max": 0.5, "rollout_corr/rollout_rs_seq_sum_k1_seq_max_deviation": 1.45, "rollout_corr/rollout_rs_seq_sum_k1_seq_mean": -0.19999999999999996, "rollout_corr/rollout_rs_seq_sum_k1_seq_min": -1.45, "rollout_corr/rollout_rs_seq_sum_k1_seq_std": 0.859263250310016, "rollout_corr/rollout_rs_seq_sum_k1_std": 0.3531498145967879},  # noqa: E501
    "C": {**OFFPOLICY, "rollout_corr/rollout_is_batch_norm_factor": 0.6555289728900142, "rollout_corr/rollout_is_eff_sample_size": 0.6571292351368064, "rollout_corr/rollout_is_max": 1.1051709180756475, "rollout_corr/rollout_is_mean": 0.6555289728900142, "rollout_corr/rollout_is_min": 0.0, "rollout_corr/rollout_is_oob_ratio": 0.3333333432674408, "rollout_corr/rollout_is_ratio_fraction_high": 0.2222222238779068, "rollout_corr/rollout_is_ratio_fraction_low": 0.1111111119389534, "rollout_corr/rollout_is_seq_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_seq_fraction_low": 0.20000000298023224, "rollout_corr/rollout_is_seq_max": 1.001250260438369, "rollout_corr/rollout_is_seq_max_deviation": 1.0, "rollout_corr/rollout_is_seq_mean": 0.46006740109656646, "rollout_corr/rollout_is_seq_min": 0.0, "rollout_corr/rollout_is_seq_std": 0.4969866144102765, "rollout_corr/rollout_is_std": 0.4735128227475669},  # noqa: E501
    "D": {**OFFPOLICY, "rollout_corr/rollout_is_batch_norm_factor": 1.3668096590344228, "rollout_corr/rollout_is_eff_sample_size": 0.6855576495894171, "rollout_corr/rollout_is_max": 4.263114515168817, "rollout_corr/rollout_is_mean": 1.044635100934786, "rollout_corr/rollout_is_min": 0.6065306597126334, "rollout_corr/rollout_is_ratio_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_ratio_fraction_low": 0.0, "rollout_corr/rollout_is_seq_fraction_high": 0.20000000298023224, "rollout_corr/rollout_is_seq_fraction_low": 0.20000000298023224, "rollout_corr/rollout_is_seq_max": 3.0, "rollout_corr/rollout_is_seq_max_deviation": 2.0, "rollout_corr/rollout_is_seq_mean": 1.0934477272275382, "rollout_corr/rollout_is_seq_min": 0.0, "rollout_corr/rollout_is_seq_std": 1.1325367544761864, "rollout_corr/rollout_is_std": 0.7074783497758629, "rollout_corr/rollout_rs_masked_fraction": 0.4444444444444444, "rollout_corr/rollout_rs_seq_masked_fraction": 0.4000000059604645, "rollout_corr/rollout_rs_seq_max_k3_fraction_high": 0.25, "rollout_corr/rollout_rs_seq_max_k3_fraction_low": 0.0, "rollout_corr/rollout_rs_seq_max_k3_masked_fraction": 0.1111111111111111, "rollout_corr/rollout_rs_seq_max_k3_max": 1.8131145151688168, "rollout_corr/rollout_rs_seq_max_k3_mean": 0.3379721881644829, "rollout_corr/rollout_rs_seq_max_k3_min": 0.0012710963760241278, "rollout_corr/rollout_rs_seq_max_k3_seq_fraction_high": 0.25, "rollout_corr/rollout_rs_seq_max_k3_seq_masked_fraction": 0.25, "rollout_corr/rollout_rs_seq_max_k3_seq_max": 1.8131145151688168, "rollout_corr/rollout_rs_seq_max_k3_seq_max_deviation": 1.8131145151688168, "rollout_corr/rollout_rs_seq_max_k3_seq_mean": 0.5557708183495003, "rollout_corr/rollout_rs_seq_max_k3_seq_min": 0.0012710963760241278, "rollout_corr/rollout_rs_seq_max_k3_seq_std": 0.8541784476057666, "rollout_corr/rollout_rs_seq_max_k3_std": 0.19119144250989384, "rollout_corr/rollout_rs_seq_mean_k2_fraction_high": 0.5, "rollout_corr/rollout_rs_seq_mean_k2_fraction_low": 0.0, "rollout_corr/rollout_rs_seq_mean_k2_masked_fraction": 0.4444444444444444, "rollout_corr/rollout_rs_seq_mean_k2_max": 1.05125, "rollout_corr/rollout_rs_seq_mean_k2_mean": 0.19222222222222218, "rollout_corr/rollout_rs_seq_mean_k2_min": 0.0012500000000000007, "rollout_corr/rollout_rs_seq_mean_k2_seq_fraction_high": 0.5, "rollout_corr/rollout_rs_seq_mean_k2_seq_masked_fraction": 0.5, "rollout_corr/rollout_rs_seq_mean_k2_seq_max": 1.05125, "rollout_corr/rollout_rs_seq_mean_k2_seq_max_deviation": 1.05125, "rollout_corr/rollout_rs_seq_mean_k2_seq_mean": 0.31947916666666665, "rollout_corr/rollout_rs_seq_mean_k2_seq_min": 0.0012500000000000007, "rollout_corr/rollout_rs_seq_mean_k2_seq_std": 0.4968416888437887, "rollout_corr/rollout_rs_seq_mean_k2_std": 0.0447239475167553},  # noqa: E501
}

CASES = os.environ.get("ADVCLI_CROSSCHECK_CASES", "/work/shared/crosscheck/cases")
PUBLIC = os.path.join(CASES, "verl_rc_mis_seq_sum_k1")


def _write(path, rows=ROWS, step=None, extra=None):
    cols = {"prompt_id": pa.array([r[0] for r in rows]), "reward": pa.array([r[1] for r in rows], pa.float32()),
            "response_mask": pa.array([r[2] for r in rows], pa.list_(pa.int8())),
            "old_log_probs": pa.array([r[3] for r in rows], pa.list_(pa.float32())),
            "rollout_log_probs": pa.array([r[4] for r in rows], pa.list_(pa.float32()))}
    if step is not None:
        cols["step"] = pa.array(step, pa.int64())
    cols.update(extra or {})
    pq.write_table(pa.table(cols), path)
    return str(path)


def _run(tmp_path, settings, chunk_rows=2, src=None, est="grpo"):
    src = src or _write(tmp_path / "in.parquet")
    return run_table(src, tmp_path / f"out{chunk_rows}.parquet", "verl", {"algorithm.adv_estimator": est, **settings},
                     chunk_rows=chunk_rows)


def _close(a, b, rtol, atol=1e-7):
    return abs(a - b) <= atol + rtol * abs(b)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_weights_mask_metrics_match_verl(tmp_path, name):
    t, res = _run(tmp_path, CONFIGS[name])
    w = t.column("rollout_is_weights").to_pylist()
    for i, (got, want) in enumerate(zip(w, EXPECTED_WEIGHTS[name])):
        assert all(_close(g, e, 1e-5) for g, e in zip(got, want)), (name, i, got, want)
    assert t.column("response_mask_after_rs").to_pylist() == EXPECTED_MASK[name]
    got = {k: v for k, v in res.per_step[0].items() if k.startswith("rollout_corr/")}
    assert set(got) == set(EXPECTED_METRICS[name])  # exactly verl's names, no more, no fewer
    for k, want in EXPECTED_METRICS[name].items():
        assert _close(got[k], want, 1e-4, 1e-6), (k, got[k], want)
    assert {k: res.metrics[k] for k in got} == got  # one step: the run's figures are the step's


def test_grpo_sees_the_rejection_mask(tmp_path):
    """verl's GRPO sums token_level_rewards without the mask: rejected rows still enter their group's
    mean and std, and only their output is zeroed (A·m'). Config D rejects rows 1 and 2."""
    t, _ = _run(tmp_path, CONFIGS["D"])
    adv = t.column("advantages").to_pylist()
    mean0, std0 = 2 / 3, math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)  # group p0 = [1, 0, 1], unbiased
    a0 = (1 - mean0) / (std0 + 1e-6)
    a3 = (0 - 0.5) / (math.sqrt(0.5) + 1e-6)  # group p1 = [0, 1]
    want = [[a0] * 3, [0.0] * 4, [0.0], [a3, a3, 0.0], [0.0, 0.0]]
    for g, e in zip(adv, want):
        assert all(_close(x, y, 1e-5, 1e-6) for x, y in zip(g, e)), (g, e)
    # without the correction the same rows keep their advantages
    t2, _ = _run(tmp_path, {})
    a = t2.column("advantages").to_pylist()
    assert _close(a[1][0], (0 - mean0) / (std0 + 1e-6), 1e-5) and _close(a[2][0], a0, 1e-5)


@pytest.mark.parametrize("est", ["grpo", "gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo"])
def test_chunk_size_independent(tmp_path, est):
    """Weights, masks, advantages bit for bit and metrics to float64 rounding, whatever the chunking;
    two steps, so batch normalisation and the metrics are per step."""
    shifted = [(p, r, m, o, [x - 0.2 * k for k, x in enumerate(ro)]) for p, r, m, o, ro in ROWS]
    rows = ROWS + shifted + ROWS  # step 1 holds the shifted copy
    src = _write(tmp_path / "in.parquet", rows, step=[0] * 5 + [1] * 5 + [0] * 5)
    values = pa.array([[0.1 * (j + 1) for j in range(len(r[2]))] for r in rows], pa.list_(pa.float32()))
    if est == "gae":
        src = _write(tmp_path / "in.parquet", rows, step=[0] * 5 + [1] * 5 + [0] * 5, extra={"values": values})
    outs = [_run(tmp_path, CONFIGS["D"], chunk_rows=c, src=src, est=est) for c in (1, 7, 4096)]
    base_t, base_r = outs[0]
    for t, r in outs[1:]:
        for col in ("advantages", "returns", "rollout_is_weights", "response_mask_after_rs"):
            assert t.column(col).to_pylist() == base_t.column(col).to_pylist(), col
        for s0, s1 in zip(base_r.per_step, r.per_step):
            for k, v in s0.items():
                if k.startswith("rollout_corr/"):
                    assert _close(s1[k], v, 1e-12, 1e-15), k
    assert len(base_r.per_step) == 2
    s0, s1 = base_r.per_step  # several steps: the overall figure is the row-weighted mean of the steps'
    k = "rollout_corr/kl"
    assert _close(base_r.metrics[k], (s0["rows"] * s0[k] + s1["rows"] * s1[k]) / (s0["rows"] + s1["rows"]), 1e-12)
    assert base_r.per_step[0]["rollout_corr/rollout_is_batch_norm_factor"] != \
        base_r.per_step[1]["rollout_corr/rollout_is_batch_norm_factor"]


def test_metrics_only_when_every_option_is_off(tmp_path):
    """verl runs the correction whenever the batch holds rollout_log_probs: off-policy metrics only,
    the mask handed on unchanged, no weights."""
    t, res = _run(tmp_path, {})
    assert "rollout_is_weights" not in t.column_names
    assert t.column("response_mask_after_rs").to_pylist() == [r[2] for r in ROWS]
    got = {k: v for k, v in res.per_step[0].items() if k.startswith("rollout_corr/")}
    assert set(got) == set(OFFPOLICY)
    for k, want in OFFPOLICY.items():
        assert _close(got[k], want, 1e-4, 1e-6), k


def test_without_rollout_log_probs_nothing_changes(tmp_path):
    src = str(tmp_path / "plain.parquet")
    pq.write_table(pq.read_table(_write(tmp_path / "in.parquet")).drop(["rollout_log_probs"]), src)
    t, res = _run(tmp_path, {}, src=src)
    assert "response_mask_after_rs" not in t.column_names
    assert not any(k.startswith("rollout_corr/") for k in res.metrics)


def test_threshold_null_gives_no_weights(tmp_path):
    t, res = _run(tmp_path, {P + "rollout_is": "token", P + "rollout_is_threshold": None})
    assert "rollout_is_weights" not in t.column_names
    assert "rollout_corr/rollout_is_mean" not in res.per_step[0]


def test_single_k1_threshold_means_reciprocal_lower(tmp_path):
    """'2.0' for a k1 option is lo = 1/2, hi = 2 (on log π_rollout/π_train): the same as '0.5_2.0'."""
    a, _ = _run(tmp_path, {P + "rollout_rs": "seq_sum_k1", P + "rollout_rs_threshold": 2.0})
    b, _ = _run(tmp_path, {P + "rollout_rs": "seq_sum_k1,seq_sum_k1", P + "rollout_rs_threshold": "0.5_2.0"})
    assert a.column("response_mask_after_rs").to_pylist() == b.column("response_mask_after_rs").to_pylist() \
        == EXPECTED_MASK["B"]


def test_explain_lists_the_keys():
    from advcli.flavors import get
    from advcli.runs.explain import keys_text

    text = keys_text(get("verl"))
    for k in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
              "rollout_rs_threshold", "bypass_mode"):
        assert P + k in text
    assert "default null" in text.split(P + "rollout_is ")[1].splitlines()[0]  # the YAML's, not "sequence"


@pytest.mark.parametrize("settings, words", [
    ({P + "rollout_rs": "seq_sum_k1"}, ["rollout_rs_threshold", "required"]),
    ({P + "rollout_rs": "seq_sum_k4", P + "rollout_rs_threshold": 1.0}, ["unknown option", "seq_sum_k4"]),
    ({P + "rollout_rs": "token_k2", P + "rollout_rs_threshold": "0.1_2"}, ["token_k2", "single upper bound"]),
    ({P + "rollout_rs": "token_k1,token_k2", P + "rollout_rs_threshold": "1,2,3"}, ["exactly 2"]),
    ({P + "rollout_rs": "token_k1", P + "rollout_rs_threshold": "2.0_0.5"}, ["lower <= upper"]),
    ({P + "rollout_is": "geometric"}, ["rollout_is", "geometric"]),
    ({P + "rollout_is": "token", P + "rollout_is_threshold": True}, ["boolean"]),
    ({P + "rollout_is": "token", P + "rollout_is_threshold": "0_2"}, ["positive"]),
])
def test_refusals(tmp_path, settings, words):
    with pytest.raises(AdvcliError) as e:
        _run(tmp_path, settings)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_input_weights_column_is_never_overwritten(tmp_path):
    extra = {"rollout_is_weights": pa.array([[1.0] * len(r[2]) for r in ROWS], pa.list_(pa.float32()))}
    src = _write(tmp_path / "in.parquet", extra=extra)
    with pytest.raises(AdvcliError, match="already has a rollout_is_weights column"):
        _run(tmp_path, CONFIGS["A"], src=src)
    t, _ = _run(tmp_path, {P + "rollout_rs": "token_k1", P + "rollout_rs_threshold": "0.5_4.0"}, src=src)
    assert t.column("rollout_is_weights").to_pylist() == extra["rollout_is_weights"].to_pylist()  # kept as it was


def test_options_need_both_log_prob_columns(tmp_path):
    src = str(tmp_path / "plain.parquet")
    pq.write_table(pq.read_table(_write(tmp_path / "in.parquet")).drop(["rollout_log_probs"]), src)
    with pytest.raises(AdvcliError, match="rollout_log_probs"):
        _run(tmp_path, CONFIGS["A"], src=src)


def test_a_step_without_valid_tokens_is_refused(tmp_path):
    rows = [("p", 1.0, [0, 0], [-1.0, -1.0], [0.0, 0.0])] + ROWS
    src = _write(tmp_path / "in.parquet", rows, step=[7] + [0] * 5)
    with pytest.raises(AdvcliError, match="no valid token in step 7"):
        _run(tmp_path, CONFIGS["A"], src=src)


def test_stats_reports_the_offpolicy_metrics(tmp_path):
    from advcli.runs.stats import file_statistics

    rep = file_statistics([_write(tmp_path / "in.parquet")])
    for k, want in OFFPOLICY.items():
        assert _close(rep["metrics"][k], want, 1e-4, 1e-6), k


@pytest.mark.skipif(not os.path.isdir(PUBLIC), reason="crosscheck case verl_rc_mis_seq_sum_k1 not available")
@pytest.mark.parametrize("chunk_rows", [7, 4096])
def test_public_case(tmp_path, chunk_rows):
    """The public cross-check case: columns to its rtol/atol and verl's own rollout_corr/* values
    (case.json verl_metrics, float32 verl) to 1e-3 relative."""
    case = json.load(open(os.path.join(PUBLIC, "case.json")))
    args = case["args"]
    settings = dict(__import__("advcli.config", fromlist=["x"]).parse_set(
        [args[i + 1] for i, a in enumerate(args) if a == "--set"]))
    out = str(tmp_path / "out.parquet")
    res = advcli.run(os.path.join(PUBLIC, "input.parquet"), out, flavor="verl", settings=settings,
                     chunk_rows=chunk_rows, device="cpu", force=True)
    got, exp = pq.read_table(out), pq.read_table(os.path.join(PUBLIC, "expected.parquet"))
    for col in case["compare"]:
        for g, e in zip(got.column(col).to_pylist(), exp.column(col).to_pylist()):
            assert len(g) == len(e)
            assert all(_close(x, y, case["rtol"], case["atol"]) for x, y in zip(g, e)), col
    for k, want in case["verl_metrics"].items():
        assert _close(res.per_step[0][k], want, 1e-3, 1e-7), (k, res.per_step[0][k], want)


def test_weights_histogram(tmp_path):
    """The report's histogram of the weights: exact counts over the input's mask=1 tokens, on [0, u]
    (÷ μ with batch normalisation of one step), whatever the chunking."""
    _, r1 = _run(tmp_path, CONFIGS["A"], chunk_rows=1)
    _, r2 = _run(tmp_path, CONFIGS["A"], chunk_rows=4096)
    h = r1.histograms["rollout_is_weights"]
    assert h == r2.histograms["rollout_is_weights"]
    assert sum(h["counts"]) == sum(sum(r[2]) for r in ROWS) and h["edges"][-1] == 2.0
    flat = [w for row, m in zip(EXPECTED_WEIGHTS["A"], (r[2] for r in ROWS)) for w, k in zip(row, m) if k]
    assert h["counts"][-1] == sum(w >= 2.0 - 2.0 / 50 for w in flat)  # the truncated ones sit in the last bin
    _, r3 = _run(tmp_path, CONFIGS["C"])
    mu = EXPECTED_METRICS["C"]["rollout_corr/rollout_is_batch_norm_factor"]
    assert _close(r3.histograms["rollout_is_weights"]["edges"][-1], 1.5 / mu, 1e-5)


def test_explain_shows_the_correction():
    from advcli.flavors import get, resolve
    from advcli.runs.explain import explain_text

    cfg, native = resolve("verl", list(CONFIGS["A"].items()))
    text = explain_text(get("verl"), cfg, native)
    assert "IS weights       w = exp(C(lr_t))·m_t, then min(w, 2) (TIS)" in text
    assert f"keep where {math.log(0.5):.6g} ≤ k1 per token ≤ {math.log(4.0):.6g}" in text
    assert text.index("rollout corr.") < text.index("3. estimator")


def test_canonical_keys_with_flavor_advcli(tmp_path):
    """--flavor advcli takes the canonical section directly: the same numbers as verl's config A."""
    src = _write(tmp_path / "in.parquet")
    out = str(tmp_path / "out.parquet")
    advcli.run(src, out, flavor="advcli", device="cpu", force=True, settings={
        "estimator.name": "grpo", "rollout_correction.mode": "on", "rollout_correction.is_level": "token",
        "rollout_correction.rs": [["token_k1", math.log(0.5), math.log(4.0)]]})
    t = pq.read_table(out)
    assert t.column("response_mask_after_rs").to_pylist() == EXPECTED_MASK["A"]
    for got, want in zip(t.column("rollout_is_weights").to_pylist(), EXPECTED_WEIGHTS["A"]):
        assert all(_close(g, e, 1e-5) for g, e in zip(got, want))


def test_all_weights_zero_is_refused_as_verl_fails(tmp_path):
    """An IcePop band that excludes every token: verl's ESS metric divides by zero (ZeroDivisionError)."""
    with pytest.raises(AdvcliError, match="every IS weight is 0"):
        _run(tmp_path, {P + "rollout_is": "token", P + "rollout_is_threshold": "5.0_6.0"})


def test_bypass_only_keys_are_said_to_be_ignored(tmp_path):
    _, res = _run(tmp_path, {P + "loss_type": "reinforce"})
    assert any("loss_type=reinforce" in w and "bypass mode only" in w for w in res.warnings)


# verl 1dda039b ray_trainer.compute_advantage (gamma = lam = 1) after compute_rollout_correction_and_add_to_batch,
# on ROWS with rewards at L_i − 1 and values 0.1·(t + 1), float64 (harness as above)
EXPECTED_ADV = {
    ("reinforce_plus_plus_baseline", "A"): [[1.1954775375359206] * 3, [-0.853912526811372, 0.0, -0.853912526811372, -0.853912526811372], [0.0], [-0.5123475160868233, -0.5123475160868233, 0.0], [0.0, 0.0]],  # noqa: E501
    ("reinforce_plus_plus_baseline", "D"): [[0.7302967258131002] * 3, [0.0] * 4, [0.0], [-1.0954450887196503, -1.0954450887196503, 0.0], [0.0, 0.0]],  # noqa: E501
    ("gae", "A"): [[1.3665610627715792, 1.181264645608564, 0.9959682146398899], [-0.4864030812472565, -0.8569959293789459, -0.8569959293789459, -1.0422923327363025], [-0.3011066640842412], [-0.4864030812472565, -0.6716994984102719, -0.3011066640842412], [-0.3011066640842412, -0.3011066640842412]],  # noqa: E501
    ("gae", "D"): [[0.9120136710513894, 0.7220108211461439, 0.532007957084583], [-0.79801194978319] * 4, [-0.79801194978319], [-0.9880147996884355, -1.1780176495936812, -0.79801194978319], [-0.79801194978319] * 2],  # noqa: E501
}


@pytest.mark.parametrize("est, name", sorted(EXPECTED_ADV))
def test_masked_statistics_use_the_corrected_mask(tmp_path, est, name):
    """Estimators whose statistics are masked (the baseline's whitening, gae's scan and whitening) change
    for the kept rows too (verl_rc_rs_rfpp_baseline in the spec)."""
    values = pa.array([[0.1 * (t + 1) for t in range(len(r[2]))] for r in ROWS], pa.list_(pa.float32()))
    src = _write(tmp_path / "in.parquet", extra={"values": values})
    t, _ = _run(tmp_path, CONFIGS[name], src=src, est=est)
    for i, (got, want) in enumerate(zip(t.column("advantages").to_pylist(), EXPECTED_ADV[(est, name)])):
        assert all(_close(g, e, 1e-5, 1e-6) for g, e in zip(got, want)), (i, got, want)


@pytest.mark.parametrize("est", ["gae", "remax"])
@pytest.mark.parametrize("chunk_rows", [2, 4096])
def test_kl_metric_uses_the_mask_before_rejection(tmp_path, est, chunk_rows):
    """verl's trainer runs apply_kl_penalty (ray_trainer.py L78-117 @1dda039b) before
    compute_rollout_correction_and_add_to_batch (fit(), L1638-1675): actor/reward_kl_penalty is the mean
    over rows of masked_mean(kld, m, axis=-1) = Σ_t kld·m / (Σ_t m + 1e-8) with the ORIGINAL mask m.
    Config D rejects rows 1 and 2 entirely; their KL still counts, divided by their original Σm (it was
    divided by Σm' + 1e-8 = 1e-8, ~1e7). Fixed β: the per-row KL is computed in the write pass."""
    deltas = [[0.1, 0.2, 0.3], [0.4, 9.0, 0.5, 0.6], [0.7], [0.2, 0.1, 9.0], [9.0, 9.0]]  # kl (k1) = lp − ref
    ref = pa.array([[o - d for o, d in zip(r[3], ds)] for r, ds in zip(ROWS, deltas)], pa.list_(pa.float32()))
    values = pa.array([[0.1 * (t + 1) for t in range(len(r[2]))] for r in ROWS], pa.list_(pa.float32()))
    src = _write(tmp_path / "in.parquet", extra={"ref_log_probs": ref, "values": values,
                                                 "reward_baseline": pa.array([0.5] * 5, pa.float32())})
    beta = 0.05
    settings = {**CONFIGS["D"], "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": beta}
    t, res = _run(tmp_path, settings, chunk_rows=chunk_rows, src=src, est=est)
    per_row = []
    for r, ds in zip(ROWS, deltas):
        m = r[2]
        per_row.append(sum(d * k for d, k in zip(ds, m)) / (sum(m) + 1e-8))
    want = sum(per_row) / len(per_row)  # (0.6/3 + 1.5/3 + 0.7/1 + 0.3/2 + 0) / 5 = 0.31
    assert _close(res.per_step[0]["actor/reward_kl_penalty"], want, 1e-5), res.per_step[0]
    assert _close(res.metrics["actor/reward_kl_penalty"], want, 1e-5)
    assert res.metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(beta)
    # the token rewards themselves always used m: scores − β·kld·m (row 1's masked token keeps 0 KL)
    tlr = t.column("token_level_rewards").to_pylist()
    assert _close(tlr[1][1], 0.0, 0, 1e-7) and _close(tlr[1][0], -beta * 0.4, 1e-5)


def test_bypass_mode_writes_the_advantages_without_weights(tmp_path):
    """Bypass mode (rollout_corr_helper.py / ray_trainer.py @1dda039b): old_log_probs := rollout_log_probs, no
    correction at advantage time, IS and rejection in the actor loss against the current policy: the advantages
    are those of no correction (the unchanged mask), no weights are written, and the run says why."""
    plain, _ = _run(tmp_path, {})
    t, res = _run(tmp_path, {P + "bypass_mode": True, P + "rollout_is": "token", P + "rollout_rs": "token_k1",
                             P + "rollout_rs_threshold": 0.5})
    assert "rollout_is_weights" not in t.column_names and "response_mask_after_rs" not in t.column_names
    assert t.column("advantages").to_pylist() == plain.column("advantages").to_pylist()
    assert any("bypass_mode=true" in w and "actor loss" in w for w in res.warnings)


def test_bypass_mode_reads_the_rollout_log_probs_as_old_log_probs(tmp_path):
    """apply_bypass_mode (rollout_corr_helper.py L1130-1138 @1dda039b) sets batch["old_log_probs"] =
    batch["rollout_log_probs"] before apply_kl_penalty: the KL in the reward is k1 = rollout − ref. By hand, with
    ref = 0 and β = 0.1: token_level_rewards = −0.1·rollout·mask, the score at L_i − 1 (row 0: [0.06, 0.07,
    1 + 0.025]); the run without bypass reads old_log_probs ([0.05, 0.1, 1 + 0.02])."""
    ref = pa.array([[0.0] * len(r[2]) for r in ROWS], pa.list_(pa.float32()))
    src = _write(tmp_path / "in.parquet", extra={"ref_log_probs": ref})
    kl = {"algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.1}
    t, _ = _run(tmp_path, {**kl, P + "bypass_mode": True}, src=src)
    plain, _ = _run(tmp_path, kl, src=src)
    for (_, score, mask, old, rollout), got, base in zip(ROWS, t.column("token_level_rewards").to_pylist(),
                                                         plain.column("token_level_rewards").to_pylist()):
        for want_lp, row in ((rollout, got), (old, base)):
            want = [-0.1 * lp * m for lp, m in zip(want_lp, mask)]
            want[-1] += score
            assert all(_close(g, w, 1e-5, 1e-6) for g, w in zip(row, want)), (row, want)


def test_a_minus_inf_rollout_log_prob_runs_clamped_as_verl(tmp_path, capsys):
    """vLLM can give the sampled token a log-prob of −inf; verl trains on it: the log-ratio old − rollout = +inf
    is clamped to +20 before exp and before the rejection statistics (rollout_corr_helper.py L262, L575, L585
    @1dda039b). By hand, row 0 (old −1, −1, −1; rollout −1, −inf, −1.5; lr 0, +inf, 0.5): token TIS at 2 gives
    1, min(e^20, 2) = 2, min(e^0.5, 2); seq_sum_k2 = ½(0² + 20² + 0.5²) = 200.125 > 100: rejected whole. Row 1
    (lr 0.2, −0.2): k2 sum 0.04, kept. The unclamped kl = mean over the mask=1 tokens of rollout − old is −inf, as
    verl logs it; the run says why. A NaN there is still refused (verl's weights would be NaN), and so is a −inf
    old_log_probs (the trainer's own log-prob)."""
    inf = float("-inf")
    rows = [("p0", 1.0, [1, 1, 1], [-1.0, -1.0, -1.0], [-1.0, inf, -1.5]),
            ("p0", 0.0, [1, 1], [-1.0, -1.0], [-1.2, -0.8])]
    settings = {P + "rollout_is": "token", P + "rollout_is_threshold": 2.0, P + "rollout_rs": "seq_sum_k2",
                P + "rollout_rs_threshold": 100.0}
    t, res = _run(tmp_path, settings, src=_write(tmp_path / "in.parquet", rows))
    w = t.column("rollout_is_weights").to_pylist()
    assert w[0] == pytest.approx([1.0, 2.0, math.exp(0.5)], rel=1e-6)
    assert w[1] == pytest.approx([math.exp(0.2), math.exp(-0.2)], rel=1e-6)
    assert t.column("response_mask_after_rs").to_pylist() == [[0, 0, 0], [1, 1]]
    assert res.per_step[0]["rollout_corr/kl"] == -math.inf
    assert any("1 mask=1 token(s) have a rollout_log_probs of -inf" in x for x in res.warnings), res.warnings
    for bad in ([-1.0, float("nan"), -1.5], [-1.0, float("inf"), -1.5]):
        src = _write(tmp_path / "bad.parquet", [(*rows[0][:4], bad), rows[1]])
        with pytest.raises(AdvcliError, match="column 'rollout_log_probs', row 0, position 1: value .* not finite"):
            _run(tmp_path, settings, src=src)
    src = _write(tmp_path / "old.parquet", [(*rows[0][:3], [-1.0, inf, -1.0], [-1.0, -1.0, -1.5]), rows[1]])
    with pytest.raises(AdvcliError, match="column 'old_log_probs', row 0, position 1: value -inf is not finite"):
        _run(tmp_path, settings, src=src)


def test_seq_std_of_weights_on_a_bound_keeps_its_small_spread(tmp_path):
    """rollout_is_seq_std where eleven rows sit on the TIS bound (w = min(e^0.1, 1) = 1) and one just under it
    (w = e^(−0.000483)): the spread is 1.4e-4, which squares rounded to float32 lost (1.2 % off, the helper's
    sweep against verl 0.9.1's torch.std); the unbiased std of the rows' weights, computed here in float64 from
    their float32 values."""
    import statistics

    import numpy as np

    rows = [(f"p{i}", 1.0, [1, 1], [-1.0, -1.0], [-1.05, -1.05]) for i in range(11)]
    rows.append(("p11", 1.0, [1], [-1.0], [-1.0 + 0.000483]))
    src = _write(tmp_path / "in.parquet", rows=rows)
    _, res = _run(tmp_path, {P + "rollout_is": "sequence", P + "rollout_is_threshold": 1.0}, src=src)
    w = [1.0] * 11 + [float(np.float32(np.exp(np.float32(-1.0) - np.float32(-1.0 + 0.000483))))]
    assert res.metrics["rollout_corr/rollout_is_seq_std"] == pytest.approx(statistics.stdev(w), rel=1e-3)


def test_explain_says_what_bypass_mode_reads(capsys):
    code, out, _ = run_main(["explain", "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--set", P + "bypass_mode=true"], capsys)
    assert code == 0 and "bypass mode" in out and "rollout_log_probs stand for old_log_probs" in " ".join(out.split())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_nan_log_prob_at_a_masked_token_runs_as_verl(tmp_path, name):
    """A NaN (or inf) old or rollout log-prob at a mask=0 token: verl runs it, every sum and mean of its rollout
    correction being masked_sum's torch.where(mask, x, 0) (rollout_corr_helper.py L274/277, L580, L636 @1dda039b;
    torch_functional.py L273-291); it was refused. Every number is the one of the finite rows above, except a
    token-level truncated weight at the NaN: exp(NaN)·0 = NaN, as verl's (its loss masks it); the inf log-ratio is
    clamped to 20 first (weight e^20·0 = 0) and IcePop's band leaves a NaN out (0), as verl's (checked by calling
    compute_rollout_correction_and_rejection_mask @1dda039b on these rows)."""
    nan = float("nan")
    rows = [list(r) for r in ROWS]
    rows[1][4] = [-0.2, nan, -2.5, -0.1]  # row 1's interior masked token
    rows[3][3] = [-0.4, -0.9, float("inf")]  # row 3's masked tail, in the trainer's own log-probs
    t, res = _run(tmp_path, CONFIGS[name], src=_write(tmp_path / "in.parquet", [tuple(r) for r in rows]))
    w = t.column("rollout_is_weights").to_pylist()
    for i, (got, want) in enumerate(zip(w, EXPECTED_WEIGHTS[name])):
        for j, (g, e) in enumerate(zip(got, want)):
            if name == "A" and (i, j) == (1, 1):  # token-level, truncated at 2.0
                assert math.isnan(g), (name, i, j, g)
            else:
                assert _close(g, e, 1e-5), (name, i, j, g, e)
    assert t.column("response_mask_after_rs").to_pylist() == EXPECTED_MASK[name]
    got = {k: v for k, v in res.per_step[0].items() if k.startswith("rollout_corr/")}
    for k, want in EXPECTED_METRICS[name].items():
        assert _close(got[k], want, 1e-4, 1e-6), (k, got[k], want)
    # the same NaN at a mask=1 token is refused (verl's weights and statistics would be NaN)
    rows[1][4] = [nan, 0.0, -2.5, -0.1]
    with pytest.raises(AdvcliError, match="column 'rollout_log_probs', row 1, position 0: value nan is not finite"):
        _run(tmp_path, CONFIGS[name], src=_write(tmp_path / "bad.parquet", [tuple(r) for r in rows]))


@pytest.mark.parametrize("level, runs", [("token", False), ("sequence", True)])
def test_optimal_token_baseline_reading_token_weights_refuses_a_masked_nan(tmp_path, level, runs):
    """verl's optimal_token_baseline reads the token-level IS weights (w·rollout_is_weights², then a cumsum over the
    masked positions, core_algos.py L933/L937 @1dda039b): a NaN weight at a mask=0 token spreads into the trained
    tokens after it, so a NaN rollout log-prob there is refused; sequence-level weights stay finite and run."""
    nan = float("nan")
    rows = [list(r) for r in ROWS]
    rows[1][4] = [-0.2, nan, -2.5, -0.1]
    pi2 = pa.array([[0.5] * len(r[2]) for r in rows], pa.list_(pa.float32()))
    src = _write(tmp_path / "in.parquet", [tuple(r) for r in rows], extra={"sum_pi_squared": pi2})
    settings = {P + "rollout_is": level, P + "rollout_is_threshold": 2.0}
    if runs:
        t, _ = _run(tmp_path, settings, src=src, est="optimal_token_baseline")
        assert all(math.isfinite(a) for row, m in zip(t.column("advantages").to_pylist(), [r[2] for r in rows])
                   for a, k in zip(row, m) if k)
    else:
        with pytest.raises(AdvcliError, match="column 'rollout_log_probs', row 1, position 1: value nan"):
            _run(tmp_path, settings, src=src, est="optimal_token_baseline")
