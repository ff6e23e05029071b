"""--flavor slime against numbers produced by slime's own code, and against the formulas in float64.

EXPECTED below was computed by running slime's unmodified functions at THUDM/slime @ 624b824a on CPU
(torch 2.13, float32, ``compute_approx_kl`` compiled by torch inductor, a single-rank gloo group):
``RolloutManager._post_process_rewards`` (slime/ray/rollout.py L608-633) on each step's rewards,
then ``compute_advantages_and_returns`` (slime/backends/megatron_utils/loss.py L704-880) on the
step's rows as slime's own per-sample lists of unpadded tensors (loss_masks int32 = mask,
rollout_batch_size = rows // n unless the configuration sets it). Step 0 holds prompts a (rewards
1, 0, 0.5, 0) and b (0.7 four times: an all-equal non-dyadic group), step 1 prompt c; interior
masked spans, masked tails and heads, a row of length 1, a log-ratio of 12 (row 5, token 4).

The float64 tests compare ``--precision float64`` with :func:`reference`, slime's formulas written
here as plain Python loops in float64 (spec/slime.md §2-§6), independent of advcli.
"""
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_table

from advcli.errors import AdvcliError
from advcli.flavors import get as get_flavor
from advcli.runs.explain import keys_text

# (step, prompt_id, reward, mask, old_log_probs, ref_log_probs, rollout_log_probs, teacher_log_probs, values)
ROWS = [
 (0, "a", 1.0, [1, 1, 1, 0], [-0.5, -1.0, -0.2, -3.0], [-0.7, -0.9, -1.5, -1.0], [-0.45, -1.1, -0.2, -2.9], [-0.4, -1.2, -0.1, -0.5], [0.1, 0.2, 0.3, 0.4]),
 (0, "a", 0.0, [0, 1, 1, 1, 0, 0], [-0.2, -0.4, -0.6, -0.8, -1.0, -1.2], [-0.25, -0.3, -0.9, -0.7, -1.1, -1.0], [-0.2, -0.4, -0.7, -0.8, -1.0, -1.1], [-0.2, -0.5, -0.5, -0.6, -0.9, -1.0], [0.0, 0.1, 0.2, 0.3, 0.2, 0.1]),
 (0, "a", 0.5, [1], [-0.3], [-0.2], [-0.35], [-0.1], [0.5]),
 (0, "a", 0.0, [1, 0, 1], [-1.5, -0.2, -0.1], [-1.4, -0.3, -0.3], [-1.5, -0.25, -0.1], [-1.2, -0.2, -0.2], [-0.1, 0.0, 0.1]),
 (0, "b", 0.7, [1, 1], [-0.1, -0.2], [-0.15, -0.1], [-0.1, -0.25], [-0.3, -0.1], [0.9, 0.8]),
 (0, "b", 0.7, [1, 1, 1, 1, 1], [-0.5, -0.5, -0.5, -0.5, -0.5], [-0.4, -0.6, -0.3, -0.7, -12.5], [-0.5, -0.55, -0.5, -0.45, -0.5], [-0.5, -0.4, -0.6, -0.3, -0.2], [0.2, 0.2, 0.2, 0.2, 0.2]),
 (0, "b", 0.7, [1, 1, 0], [-0.3, -0.6, -0.9], [-0.2, -0.9, -0.8], [-0.3, -0.6, -1.0], [-0.25, -0.5, -0.7], [0.4, 0.5, 0.6]),
 (0, "b", 0.7, [0, 1, 1, 1], [-0.4, -0.3, -0.2, -0.1], [-0.5, -0.2, -0.3, -0.2], [-0.4, -0.35, -0.2, -0.1], [-0.3, -0.3, -0.3, -0.3], [0.5, 0.4, 0.3, 0.2]),
 (1, "c", 2.0, [1, 1], [-0.05, -0.15], [-0.1, -0.1], [-0.05, -0.2], [-0.1, -0.2], [0.3, 0.3]),
 (1, "c", -1.0, [1, 1, 1, 0, 1], [-1.0, -2.0, -0.5, -0.1, -0.3], [-1.1, -2.5, -0.6, -0.2, -0.35], [-1.0, -2.1, -0.5, -0.1, -0.3], [-0.9, -1.0, -1.0, -0.2, -0.3], [0.3, 0.1, -0.2, 0.4, 0.6]),
 (1, "c", 0.25, [1, 1, 1], [-0.7, -0.1, -0.9], [-0.6, -0.3, -0.9], [-0.7, -0.15, -0.9], [-0.5, -0.2, -0.8], [0.1, -0.1, 0.2]),
 (1, "c", 1.0, [1, 0], [-0.2, -0.8], [-0.3, -0.5], [-0.25, -0.8], [-0.2, -0.6], [0.6, 0.5]),
]

CONFIGS = {
    "grpo_n4": {"n_samples_per_prompt": 4},
    "grpo_n1": {"n_samples_per_prompt": 1},  # given: left at its default 1 the run is refused (singletons)
    "drgrpo": {"n_samples_per_prompt": 4, "grpo_std_normalization": False},
    "grpo_fallback": {"n_samples_per_prompt": 4, "rollout_batch_size": 1},
    "grpo_whiten_opd": {"n_samples_per_prompt": 4, "normalize_advantages": True, "use_opd": True, "opd_type": "sglang",
                        "opd_kl_coef": 0.5, "kl_coef": 0.05, "kl_loss_type": "k3"},
    "rfpp_k3": {"advantage_estimator": "reinforce_plus_plus", "n_samples_per_prompt": 4, "kl_coef": 0.1,
                "kl_loss_type": "k3", "gamma": 0.99, "normalize_advantages": True},
    "rfpp_baseline_lowvar_opd": {"advantage_estimator": "reinforce_plus_plus_baseline", "n_samples_per_prompt": 4,
                                 "kl_coef": 0.1, "kl_loss_type": "low_var_kl", "normalize_advantages": True,
                                 "use_opd": True, "opd_type": "megatron", "use_rollout_logprobs": True},
    "ppo": {"advantage_estimator": "ppo", "kl_coef": 0.05, "kl_loss_type": "k2", "gamma": 0.99, "lambd": 0.95},
    "ppo_whiten": {"advantage_estimator": "ppo", "normalize_advantages": True, "kl_coef": 0.02,
                   "use_rollout_logprobs": True},
}
EXPECTED = {
    'grpo_n4': ([[1.30557966, 1.30557966, 1.30557966, 1.30557966], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [0.261115938], [-0.783347785, -0.783347785, -0.783347785], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [1.13681281, 1.13681281], [-1.23566616, -1.23566616, -1.23566616, -1.23566616, -1.23566616], [-0.247133225, -0.247133225, -0.247133225], [0.345986515, 0.345986515]],
        [[1.30557966, 1.30557966, 1.30557966, 1.30557966], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [0.261115938], [-0.783347785, -0.783347785, -0.783347785], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [1.13681281, 1.13681281], [-1.23566616, -1.23566616, -1.23566616, -1.23566616, -1.23566616], [-0.247133225, -0.247133225, -0.247133225], [0.345986515, 0.345986515]]),
    'grpo_n1': ([[0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0], [0, 0, 0], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0]],
        [[0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0], [0, 0, 0], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0]]),
    'drgrpo': ([[0.625, 0.625, 0.625, 0.625], [-0.375, -0.375, -0.375, -0.375, -0.375, -0.375], [0.125], [-0.375, -0.375, -0.375], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [1.4375, 1.4375], [-1.5625, -1.5625, -1.5625, -1.5625, -1.5625], [-0.3125, -0.3125, -0.3125], [0.4375, 0.4375]],
        [[0.625, 0.625, 0.625, 0.625], [-0.375, -0.375, -0.375, -0.375, -0.375, -0.375], [0.125], [-0.375, -0.375, -0.375], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [1.4375, 1.4375], [-1.5625, -1.5625, -1.5625, -1.5625, -1.5625], [-0.3125, -0.3125, -0.3125], [0.4375, 0.4375]]),
    'grpo_fallback': ([[1.29074383, 1.29074383, 1.29074383, 1.29074383], [-1.50005376, -1.50005376, -1.50005376, -1.50005376, -1.50005376, -1.50005376], [-0.104654975], [-1.50005376, -1.50005376, -1.50005376], [0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503, 0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503, 0.453504503], [1.13681281, 1.13681281], [-1.23566616, -1.23566616, -1.23566616, -1.23566616, -1.23566616], [-0.247133225, -0.247133225, -0.247133225], [0.345986515, 0.345986515]],
        [[1.29074383, 1.29074383, 1.29074383, 1.29074383], [-1.50005376, -1.50005376, -1.50005376, -1.50005376, -1.50005376, -1.50005376], [-0.104654975], [-1.50005376, -1.50005376, -1.50005376], [0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503, 0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503], [0.453504503, 0.453504503, 0.453504503, 0.453504503], [1.13681281, 1.13681281], [-1.23566616, -1.23566616, -1.23566616, -1.23566616, -1.23566616], [-0.247133225, -0.247133225, -0.247133225], [0.345986515, 0.345986515]]),
    'grpo_whiten_opd': ([[2.07912612, 1.84338105, 2.07912612, 3.9650867], [-1.28248453, -1.36106622, -1.20390284, -1.12532127, -1.20390284, -1.12532115], [0.51619333], [-1.04673946, -1.28248453, -1.36106622], [-0.208512098, 0.0272329971], [-0.0513486937, 0.0272329915, -0.129930407, 0.10581468, 0.184396386], [-0.012057839, 0.0272330157, 0.10581468], [0.0272329915, -0.0513486937, -0.129930392, -0.208512098], [1.49693167, 1.49693167], [-0.989349842, -0.502369761, -1.31400335, -1.09756768, -1.04345882], [0.134527713, -0.0277990159, 0.0804187879], [0.668171167, 0.776388884]],
        [[1.30557966, 1.30557966, 1.30557966, 1.30557966], [-0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785, -0.783347785], [0.261115938], [-0.783347785, -0.783347785, -0.783347785], [0, 0], [0, 0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [1.13681281, 1.13681281], [-1.23566616, -1.23566616, -1.23566616, -1.23566616, -1.23566616], [-0.247133225, -0.247133225, -0.247133225], [0.345986515, 0.345986515]]),
    'rfpp_k3': ([[1.23271024, 1.25468612, 1.27419662, -0.57540226], [-0.585239887, -0.585339248, -0.584414899, -0.57641679, -0.57540226, -0.57540226], [0.404545844], [-0.580018461, -0.579040349, -0.579077125], [0.782966316, 0.796930909], [-1.33888578, -1.34557295, -1.35239387, -1.35600066, -1.36017358], [0.77526921, 0.789937079, -0.57540226], [0.754300177, 0.767731488, 0.782323241, 0.796996295], [1.51935804, 1.53632855], [-0.970332086, -0.978202522, -0.977488995, -0.985431612, -0.993866622], [0.0542905182, 0.0567982383, 0.0604864843], [0.692628205, -0.150363415]],
        [[0.921601176, 0.93280226, 0.942746818, 0], [-0.00501425564, -0.00506490469, -0.00459374487, -0.000517094159, 0, 0], [0.4994829], [-0.00235289312, -0.00185434229, -0.00187307305], [0.69236511, 0.699482918], [-0.389150143, -0.392558634, -0.396035284, -0.3978737, -0.400000632], [0.688441873, 0.695918143, 0], [0.677753866, 0.684599876, 0.692037344, 0.699516237], [1.97975135, 1.99987292], [-0.972218513, -0.981550276, -0.980704248, -0.990121663, -1.0001229], [0.242653579, 0.245626926, 0.25], [0.999516249, 0]]),
    'rfpp_baseline_lowvar_opd': ([[1.87459993, 1.4525435, 1.86223447, 7.45721531], [-1.08664274, -1.37052298, -0.526060343, -0.522226155, -0.804897308, -0.804991603], [1.03110075], [-0.239460617, -0.945259988, -1.3743571], [-0.591803014, 0.394878089], [-0.0273862388, 0.397876769, -0.314741701, 0.390080422, -2.00528336], [0.11399661, 0.245299652, 0.816320896], [0.255473703, 0.112112381, -0.31005758, -0.592823207], [1.41984284, 1.46174395], [-0.987799346, -0.148650795, -1.49460709, -1.1567353, -1.07196248], [0.152490228, -0.0591474138, 0.0684590116], [0.659631014, 0.78222537]],
        [[0.672119856, 0.522859693, 0.667746842, 2.6464107], [-0.375122935, -0.475517094, -0.176873088, -0.175517112, -0.275483727, -0.275517076], [0.37381658], [-0.0755171478, -0.325122952, -0.47687307], [-0.200122952, 0.148816586], [-0.000517097127, 0.149877071, -0.1021403, 0.147119895, -0.699999988], [0.0494829156, 0.0959182009, 0.297859728], [0.0995162502, 0.048816558, -0.100483753, -0.200483754], [1.38737714, 1.43698287], [-1.46298373, -0.469532132, -2.06298375, -1.66298378, -1.5626229], [-0.113017112, -0.363570809, -0.212500036], [0.487377048, 0.632514119]]),
    'ppo': ([[0.651492476, 0.589571953, 0.523999929, 0.49999997], [0.0360779464, -0.066836305, -0.174998745, -0.286814213, -0.196240515, -0.101000004], [-0.000250011683], [0.103285812, 0.00375949591, -0.101000004], [-0.202347636, -0.100250006], [-2.43499136, -2.58664656, -2.74789643, -2.91855025, -3.10000014], [0.269273758, 0.185564876, 0.0997499824], [0.123946235, 0.242632866, 0.36776489, 0.499750018], [1.59572887, 1.69993758], [-1.051157, -0.903675675, -0.637347817, -1.31110883, -1.60006249], [0.124305502, 0.344024986, 0.049999997], [0.362883836, 0.497749984]],
        [[0.7514925, 0.789571941, 0.823999941, 0.899999976], [0.0360779464, 0.0331636965, 0.0250012577, 0.0131857991, 0.00375948846, -0.00100000203], [0.499749988], [0.00328581035, 0.00375949591, -0.00100000203], [0.69765234, 0.699750006], [-2.23499131, -2.38664651, -2.54789639, -2.71855021, -2.9000001], [0.669273734, 0.685564876, 0.699750006], [0.623946249, 0.642632842, 0.667764902, 0.699750006], [1.89572883, 1.99993753], [-0.751156986, -0.803675652, -0.837347806, -0.911108851, -1.00006247], [0.224305511, 0.244024992, 0.25], [0.96288383, 0.997749984]]),
    'ppo_whiten': ([[2.10009146, 1.81328404, 1.49930525, 1.27589738], [-0.653259754, -0.952143312, -1.26008391, -1.54991031, -1.25404584, -0.946105242], [-0.641183615], [-0.357395291, -0.665335894, -0.964219332], [-1.24800766, -0.943086267], [0.134705916, 0.128667861, 0.131686836, 0.119610719, 0.134705827], [0.255466819, -0.0524736717, -0.336262167], [-0.0554926582, 0.252447933, 0.545293391, 0.853233933], [1.49880528, 1.49966216], [-1.08575535, -0.912651539, -0.648710966, -1.16116691, -1.33084309], [0.16881907, 0.338495135, 0.083981052], [0.388198256, 0.474750191]],
        [[1.01100004, 1.01600003, 1.01200008, 1.03799999], [-0.00100000203, 0, -0.00200000405, 0.00200000405, 0, 0.0019999966], [0.503000021], [-0.00300000608, -0.00500000268, -0.00400000066], [0.702000022, 0.703000009], [0.460000038, 0.458000004, 0.458999991, 0.454999983, 0.459999979], [0.699999988, 0.698000014, 0.703999996], [0.697000027, 0.699000001, 0.69600004, 0.698000014], [2.00100017, 2.00200009], [-1.0150001, -1.01300001, -1.005, -1.00300002, -1.00100005], [0.248999983, 0.247000009, 0.25], [1.00500011, 1.00600004]]),
}


def _write(path, rows=ROWS, with_step=True, extra=None):
    cols = {"prompt_id": pa.array([r[1] for r in rows]), "reward": pa.array([r[2] for r in rows], pa.float32()),
            "response_mask": pa.array([r[3] for r in rows], pa.list_(pa.int8()))}
    for k, name in ((4, "old_log_probs"), (5, "ref_log_probs"), (6, "rollout_log_probs"), (7, "teacher_log_probs"),
                    (8, "values")):
        cols[name] = pa.array([r[k] for r in rows], pa.list_(pa.float32()))
    if with_step:
        cols["step"] = pa.array([r[0] for r in rows], pa.int64())
    cols.update(extra or {})
    pq.write_table(pa.table(cols), path)
    return path


def _run(tmp_path, settings, rows=ROWS, chunk_rows=3, precision=None, with_step=True, columns=None, extra=None,
         flavor="slime"):
    src = _write(os.path.join(tmp_path, "in.parquet"), rows, with_step, extra)
    t, res = run_table(src, os.path.join(tmp_path, "out.parquet"), flavor, settings, chunk_rows=chunk_rows,
                       precision=precision, columns=columns)
    return t.column("advantages").to_pylist(), t.column("returns").to_pylist(), res


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"row {i}"
        for t, (x, y) in enumerate(zip(g, w)):
            if math.isnan(y):
                assert math.isnan(x), f"row {i} position {t}: {x} is not NaN"
            else:
                assert abs(x - y) <= atol + rtol * abs(y), f"row {i} position {t}: {x} != {y}"


# ------------------------------------------------------------------------- float64 reference
def reference(rows, keys):
    """slime's semantics in float64, one step at a time, with Python loops (spec/slime.md)."""
    est = keys.get("advantage_estimator", "grpo")
    n = keys.get("n_samples_per_prompt", 1)
    beta = keys.get("kl_coef", 0.0)
    kind = keys.get("kl_loss_type", "k1")
    gamma, lam = keys.get("gamma", 1.0), keys.get("lambd", 1.0)
    lp_col = 6 if keys.get("use_rollout_logprobs") else 4
    adv_all, ret_all = [], []
    for step in sorted({r[0] for r in rows}):
        rs = [r for r in rows if r[0] == step]
        raw = [float(np.float32(r[2])) for r in rs]
        rbs = keys.get("rollout_batch_size", len(rs) // n)
        size = n if len(rs) == rbs * n else len(rs)  # the whole-batch fallback
        rew = list(raw)
        if keys.get("rewards_normalization", True) and est in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"):
            for g0 in range(0, len(rs), size):
                grp = raw[g0:g0 + size]
                mu = sum(grp) / len(grp)
                c = [x - mu for x in grp]
                if est != "reinforce_plus_plus_baseline" and keys.get("grpo_std_normalization", True) and n != 1:
                    sd = math.sqrt(sum(x * x for x in c) / (len(c) - 1))
                    c = [x / (sd + 1e-6) for x in c]
                rew[g0:g0 + size] = c
        advs, rets = [], []
        for r, ri in zip(rs, rew):
            m, L = r[3], len(r[3])
            lr = [float(np.float32(a)) - float(np.float32(b)) for a, b in zip(r[lp_col], r[5])]
            kl = {"k1": lambda x: x, "k2": lambda x: x * x / 2,
                  "k3": lambda x: math.exp(-x) - 1 + x,
                  "low_var_kl": lambda x: max(-10.0, min(10.0, math.exp(-x) - 1 + x))}[kind]
            k = [kl(x) if beta else 0.0 for x in lr]
            if est in ("grpo", "gspo", "cispo"):
                a = [ri] * L
                g = list(a)
            elif est == "reinforce_plus_plus_baseline":
                a = [ri - beta * kt for kt in k]
                g = None
            elif est == "reinforce_plus_plus":
                tok = [-beta * kt * mt for kt, mt in zip(k, m)]
                tok[max(t for t in range(L) if m[t])] += ri
                g, acc = [0.0] * L, 0.0
                for t in reversed(range(L)):
                    acc = tok[t] + gamma * acc
                    g[t] = acc
                a = list(g)
            else:  # ppo
                tok = [-beta * kt for kt in k]
                tok[-1] += ri
                v = [float(np.float32(x)) for x in r[8]]
                a, acc = [0.0] * L, 0.0
                for t in reversed(range(L)):
                    nv = v[t + 1] if t + 1 < L else 0.0
                    acc = tok[t] + gamma * nv - v[t] + gamma * lam * acc
                    a[t] = acc
                g = [x + y for x, y in zip(a, v)]
            if keys.get("use_opd"):
                c = keys.get("opd_kl_coef", 1.0)
                a = [x - c * (float(np.float32(p)) - float(np.float32(q))) for x, p, q in zip(a, r[lp_col], r[7])]
            advs.append(a)
            rets.append(g if g is not None else list(a))
        if keys.get("normalize_advantages"):
            vals = [(x, mt) for a, r in zip(advs, rs) for x, mt in zip(a, r[3])]
            N = sum(mt for _, mt in vals)
            mu = sum(x * mt for x, mt in vals) / N
            var = sum((x - mu) ** 2 * mt for x, mt in vals) / N
            if N >= 2:
                var *= N / (N - 1)
            advs = [[(x - mu) / math.sqrt(var + 1e-8) for x in a] for a in advs]
        adv_all += advs
        ret_all += rets
    return adv_all, ret_all


# --------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_slime(tmp_path, name):
    adv, ret, _ = _run(tmp_path, CONFIGS[name])
    want_adv, want_ret = EXPECTED[name]
    _close(adv, want_adv)
    _close(ret, want_ret)


@pytest.mark.parametrize("release", ["0.2.4", "v0.3.0", "0.3.1"])
def test_the_github_releases_give_the_commits_numbers(tmp_path, release):
    """slime v0.2.4, v0.3.0 and v0.3.1 have 624b824a's _post_process_rewards, compute_approx_kl, returns,
    baselines, GAE and distributed_masked_whiten (read at each tag, and run on random batches against advcli):
    EXPECTED, from 624b824a's functions, holds for each (REINFORCE++'s per-token loop before #2205 rounds
    differently only past float32 noise, within _close's tolerance)."""
    for name in ("grpo_n4", "drgrpo", "grpo_whiten_opd", "rfpp_k3", "ppo_whiten"):
        adv, ret, _ = _run(tmp_path, CONFIGS[name], flavor=f"slime@{release}")
        _close(adv, EXPECTED[name][0])
        _close(ret, EXPECTED[name][1])


def test_cispo_came_with_2067():
    """--advantage-estimator cispo is not among the choices of slime v0.2.4 and v0.3.0 (arguments.py L809-815
    @v0.2.4, L873-879 @v0.3.0): argparse would not start; v0.3.1 has it."""
    from advcli.flavors import resolve

    for release in ("0.2.4", "v0.3.0"):
        with pytest.raises(AdvcliError, match="no cispo"):
            resolve(f"slime@{release}", [("advantage_estimator", "cispo"), ("n_samples_per_prompt", 4)])
    resolve("slime@0.3.1", [("advantage_estimator", "cispo"), ("n_samples_per_prompt", 4)])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_float64_is_the_formula(tmp_path, name):
    adv, ret, _ = _run(tmp_path, CONFIGS[name], precision="float64")
    want_adv, want_ret = reference(ROWS, CONFIGS[name])
    # the output lists are float32: the float64 result is rounded once when it is written
    _close(adv, want_adv, rtol=3e-7, atol=1e-7)
    _close(ret, want_ret, rtol=3e-7, atol=1e-7)


def test_float64_reference_is_slimes_float32(tmp_path):
    """The loop reference agrees with slime's own float32 numbers to float32 rounding (so the two
    independent sources check each other)."""
    for name in CONFIGS:
        want_adv, want_ret = reference(ROWS, CONFIGS[name])
        _close(EXPECTED[name][0], want_adv, rtol=1e-4, atol=1e-5)
        _close(EXPECTED[name][1], want_ret, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["grpo_fallback", "grpo_whiten_opd", "rfpp_k3", "rfpp_baseline_lowvar_opd",
                                  "ppo_whiten"])
def test_chunk_rows_do_not_matter(tmp_path, name):
    runs = [_run(tmp_path, CONFIGS[name], chunk_rows=c)[:2] for c in (1, 7, 4096)]
    assert runs[0] == runs[1] == runs[2]


def test_steps_are_separate_batches(tmp_path):
    """Without the step column the 12 rows are one rollout: group c moves into blocks of 4 of one batch, and
    whitening spans both steps."""
    keys = CONFIGS["grpo_whiten_opd"]
    adv, ret, _ = _run(tmp_path, keys, with_step=False)
    one_step = [(0,) + tuple(r[1:]) for r in ROWS]
    want_adv, want_ret = reference(one_step, keys)
    _close(adv, want_adv, rtol=1e-4, atol=1e-5)
    _close(ret, want_ret, rtol=1e-4, atol=1e-5)


def test_row_count_not_a_multiple_of_n_is_one_group(tmp_path):
    """7 rows with n = 4 and no rollout_batch_size: 7 ≠ (7 // 4)·4, so slime normalises the whole batch."""
    rows = [(0,) + tuple(r[1:]) for r in ROWS[:7]]
    adv, _, _ = _run(tmp_path, {"n_samples_per_prompt": 4}, rows=rows)
    raw = np.array([r[2] for r in rows], np.float64)
    c = raw - raw.mean()
    want = c / (c.std(ddof=1) + 1e-6)
    _close(adv, [[w] * len(r[3]) for w, r in zip(want.tolist(), rows)], rtol=1e-5, atol=1e-6)


def test_prompt_ids_that_disagree_with_the_blocks_warn(tmp_path):
    """slime never reads ids: blocks of n rows are the groups; advcli says so in a warning."""
    extra = {"prompt_id": pa.array(["a", "a", "a", "b", "b", "b", "b", "b", "c", "c", "c", "c"])}
    adv, _, res = _run(tmp_path, {"n_samples_per_prompt": 4}, extra=extra)
    _close(adv, EXPECTED["grpo_n4"][0])
    assert any("positional group of 4" in w for w in res.warnings)


def test_rollout_log_probs_column_can_be_mapped(tmp_path):
    keys = CONFIGS["rfpp_baseline_lowvar_opd"]
    rlp = pa.array([r[6] for r in ROWS], pa.list_(pa.float32()))
    adv, ret, _ = _run(tmp_path, keys, extra={"engine_lp": rlp, "rollout_log_probs": pa.array(
        [[0.0] * len(r[3]) for r in ROWS], pa.list_(pa.float32()))}, columns={"rollout_log_probs": "engine_lp"})
    _close(adv, EXPECTED["rfpp_baseline_lowvar_opd"][0])
    _close(ret, EXPECTED["rfpp_baseline_lowvar_opd"][1])


def test_nondyadic_equal_group_is_a_flagged_float32_artefact(tmp_path):
    """12 × 0.7 in one positional group: slime's float32 [G, n] mean misses 0.7 by an ulp, and the residue
    over (tiny std + 1e-6) is far from 0 (spec/slime.md §2). Asserted through the same torch calls, not a
    literal; float64 gives 0 and the diagnostics name slime's rule."""
    rows = [(0, "p", 0.7, [1, 1], [-0.1, -0.2], [-0.1, -0.2], [-0.1, -0.2], [-0.1, -0.2], [0.0, 0.0])] * 12
    adv, _, res = _run(tmp_path, {"n_samples_per_prompt": 12}, rows=rows)
    r = torch.tensor([0.7] * 12, dtype=torch.float32).reshape(-1, 12)
    r = r - r.mean(dim=-1, keepdim=True)
    r = r / (r.std(dim=-1, keepdim=True) + 1e-6)
    assert [a[0] for a in adv] == r.flatten().tolist()
    diag = [d for d in res.diagnostics if d["kind"] == "float32_cancellation"]
    if abs(r[0, 0].item()) > 1e-4:  # where this machine's float32 mean is off by an ulp (it is on x86 CPUs)
        assert diag[0]["count"] == 1 and "_post_process_rewards" in diag[0]["explanation"]
    adv64, _, _ = _run(tmp_path, {"n_samples_per_prompt": 12}, rows=rows, precision="float64")
    assert all(x == 0.0 for a in adv64 for x in a)


def test_one_pass_whitening_cancellation_is_flagged(tmp_path):
    """Rewards 100 + a little, no reward normalisation, whitening: slime's one-pass float32 variance
    E[x²] − E[x]² loses every digit; float64 is the two-pass math."""
    rows = [(0, f"p{i // 4}", 100.0 + 0.01 * i, [1, 1, 0], [-0.1] * 3, [-0.1] * 3, [-0.1] * 3, [-0.1] * 3,
             [0.0] * 3) for i in range(8)]
    keys = {"n_samples_per_prompt": 4, "rewards_normalization": False, "normalize_advantages": True}
    adv, ret, res = _run(tmp_path, keys, rows=rows)
    diag = [d for d in res.diagnostics if d["kind"] == "float32_whitening"]
    assert diag and diag[0]["count"] == 1 and "distributed_masked_whiten" in diag[0]["explanation"]
    adv64, _, _ = _run(tmp_path, keys, rows=rows, precision="float64")
    want, _ = reference(rows, keys)
    _close(adv64, want, rtol=1e-6, atol=1e-6)
    assert all(math.isfinite(x) for a in adv64 for x in a)


def test_one_valid_token_whitens_with_the_biased_variance(tmp_path):
    """N = 1: slime skips Bessel's correction, var = 0, so (x − μ)·rsqrt(1e-8) = (x − μ)·1e4."""
    rows = [(0, "p", 1.0, [1, 0], [-0.1] * 2, [-0.1] * 2, [-0.1] * 2, [-0.3, -0.1], [0.0] * 2),
            (0, "q", 0.0, [0, 0, 0], [-0.1] * 3, [-0.1] * 3, [-0.1] * 3, [-0.1] * 3, [0.0] * 3)]
    keys = {"advantage_estimator": "ppo", "normalize_advantages": True, "gamma": 0.5}
    adv, _, _ = _run(tmp_path, keys, rows=rows, precision="float64")
    want, _ = reference(rows, keys)
    # row 0: A = [0.5·1, 1]; μ = 0.5; row 1 (all masked) A = 0 → (0 − 0.5)·1e4
    _close(adv, want, rtol=3e-7, atol=1e-6)
    assert adv[1] == pytest.approx([-5000.0] * 3, rel=1e-6)


@pytest.mark.parametrize("settings,words", [
    ({"advantage_estimator": "reinforce_plus_plus"}, "require advantage normalization"),
    ({"advantage_estimator": "reinforce_plus_plus_baseline"}, "settings={'normalize_advantages': True}"),  # the library's words
    ({"use_opd": True}, "--opd-type must be specified"),
    ({"use_opd": True, "opd_type": "vllm"}, "opd_type"),
    ({"advantage_estimator": "rloo"}, "advantage_estimator"),
    ({"kl_loss_type": "k4"}, "kl_loss_type"),
    ({"n_samples_per_prompt": 0}, "n_samples_per_prompt"),
    ({"rollout_batch_size": 0}, "rollout_batch_size"),
    ({"normalize_advantage": True}, "normalize_advantages"),  # a misspelt key: did you mean
    # slime_validate_args asserts not (kl_coef != 0 and kl_loss_coef != 0) (arguments.py L1846 @624b824a)
    ({"advantage_estimator": "reinforce_plus_plus", "normalize_advantages": True, "kl_coef": 0.01,
      "kl_loss_coef": 0.01}, "Only one of kl_coef and kl_loss_coef"),
])
def test_refusals(tmp_path, settings, words):
    with pytest.raises(AdvcliError) as e:
        _run(tmp_path, settings)
    assert words in str(e.value) + str(getattr(e.value, "hint", ""))


def test_the_kl_loss_keys_run_and_change_no_advantage(tmp_path):
    """slime's scripts pass --use-kl-loss --kl-loss-coef (the actor's loss): taken, the advantages those of the run
    without them."""
    plain = _run(tmp_path, {"advantage_estimator": "grpo", "n_samples_per_prompt": 4})[0]
    got = _run(tmp_path, {"advantage_estimator": "grpo", "n_samples_per_prompt": 4, "use_kl_loss": True,
                          "kl_loss_coef": 0.01})[0]
    assert got == plain


def test_rfpp_row_without_a_trained_token_is_refused(tmp_path):
    rows = list(ROWS)
    rows[2] = (0, "a", 0.5, [0], [-0.3], [-0.2], [-0.35], [-0.1], [0.5])
    with pytest.raises(AdvcliError, match="ppo_utils.py L415"):
        _run(tmp_path, CONFIGS["rfpp_k3"], rows=rows)


def test_whitening_a_step_without_valid_tokens_is_refused(tmp_path):
    rows = [(0, "p", 1.0, [0, 0], [-0.1] * 2, [-0.1] * 2, [-0.1] * 2, [-0.1] * 2, [0.0] * 2)]
    with pytest.raises(AdvcliError, match="global mask sum is zero"):
        _run(tmp_path, {"normalize_advantages": True, "n_samples_per_prompt": 1}, rows=rows)


def test_explain_lists_the_keys_with_defaults():
    text = keys_text(get_flavor("slime"))
    for key in ("advantage_estimator", "n_samples_per_prompt", "rollout_batch_size", "grpo_std_normalization",
                "rewards_normalization", "kl_coef", "kl_loss_type", "use_rollout_logprobs", "gamma", "lambd",
                "normalize_advantages", "use_opd", "opd_type", "opd_kl_coef"):
        assert key in text
    assert 'default "grpo"' in text and 'default "k1"' in text


def test_opd_at_slimes_default_n1_runs(tmp_path):
    """Issue 41.9: on-policy distillation at n_samples_per_prompt left at slime's default 1 (the method's normal
    case) runs as slime runs it: the grpo term is 0 (n = 1 turns the std off, each singleton centred to 0) and
    A_t = −opd_kl_coef·(lp_t − teacher_t) on every position (spec: loss.py L663-700, case slime_opd_grpo_n1);
    returns 0 (grpo's returns are the advantages before OPD). Without OPD the default 1 is still refused."""
    rows = [(r[0], f"q{i}", *r[2:]) for i, r in enumerate(ROWS)]  # one response per prompt, as slime's default
    adv, ret, _ = _run(tmp_path, {"use_opd": True, "opd_type": "sglang", "opd_kl_coef": 0.5}, rows=rows)
    want = [[-0.5 * (lp - t) for lp, t in zip(r[4], r[7])] for r in rows]
    _close(adv, want)
    _close(ret, [[0.0] * len(r[3]) for r in rows])
    with pytest.raises(AdvcliError, match="n_samples_per_prompt is not set and defaults to 1") as refused:
        _run(tmp_path, {}, rows=rows)
    # every prompt_id of these rows is its own: the hint says so and names the key's value that runs them
    assert "every prompt_id of the input has one row" in refused.value.hint
    assert "{'n_samples_per_prompt': 1}" in refused.value.hint  # the library's words for --set KEY=1
    adv, _, _ = _run(tmp_path, {"n_samples_per_prompt": 1}, rows=rows)  # slime's groups of one: centred to 0
    _close(adv, [[0.0] * len(r[3]) for r in rows])


def test_group_by_id_on_rollout_ordered_rows_gives_the_blocks_bits(tmp_path):
    """--set advcli.group_by=id (a reordered dump's way out) takes slime's [G, n] reshape on each group's rows
    gathered, so on a dump in rollout order it gives the positional run's advantages bit for bit (as index sums
    the group mean and std once differed in the last bit: 54 of 240 rows by 1.2e-7); a shuffled copy gives each
    row its own group's advantage to float32 rounding."""
    import advcli

    rng = np.random.default_rng(3)
    n, groups = 6, 40
    rewards = rng.choice([0.0, 0.1, 0.3, 0.7, 0.9, 1.0], size=n * groups)
    lengths = rng.integers(1, 9, size=n * groups)
    table = pa.table({"prompt_id": [f"p{i // n}" for i in range(n * groups)], "reward": rewards,
                      "rid": np.arange(n * groups), "response_mask": [[1] * int(k) for k in lengths]})
    pos = advcli.run(table, None, flavor="slime", settings={"n_samples_per_prompt": n}).output_table
    ids = advcli.run(table, None, flavor="slime",
                     settings={"n_samples_per_prompt": n, "advcli.group_by": "id"}).output_table
    assert pos.column("advantages").equals(ids.column("advantages"))
    perm = rng.permutation(n * groups)
    shuf = advcli.run(table.take(perm), None, flavor="slime",
                      settings={"n_samples_per_prompt": n, "advcli.group_by": "id"}).output_table
    want = pos.column("advantages").to_pylist()
    got = dict(zip(shuf.column("rid").to_pylist(), shuf.column("advantages").to_pylist()))
    for r in range(n * groups):
        np.testing.assert_allclose(got[r], want[r], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("given", ["disable_rewards_normalization", "disable-rewards-normalization",
                                   "--disable-rewards-normalization"])
@pytest.mark.parametrize("route", ["set", "config"])
def test_a_disable_flag_names_its_key_inverted(tmp_path, given, route):
    """slime's --disable-rewards-normalization given as a key: the hint said "Did you mean
    'rewards_normalization'?", and a user who followed it set that key true, slime's default, the opposite of
    their run. It names the key and the value false."""
    from advcli.flavors import resolve

    if route == "set":
        args = ([(given, True)], None)
    else:
        path = tmp_path / "slime.yaml"
        path.write_text(f"{given}: true\n")
        args = ([], str(path))
    with pytest.raises(AdvcliError) as e:
        resolve("slime", *args)
    assert ("is the key 'rewards_normalization' inverted: --set rewards_normalization=false"
            in e.value.message), e.value.message
    assert "Did you mean" not in e.value.message


@pytest.mark.parametrize("mean, std, line", [("group", "none", "normalise        r − mean_group\n"),
                                             ("none", "batch", "normalise        r/(std_batch + 1e-06)"),
                                             ("group", "group", "normalise        (r − mean_group)/(std_group + 1e-06)")])
def test_explain_writes_the_normalisation_that_runs(capsys, mean, std, line):
    """explain's reward normalisation line: with std none nothing is divided (slime's default centres only), so the
    line shows no division (it showed (r − mean_group)/(std_none + 1e-06))."""
    from conftest import run_main

    code, out, err = run_main(["explain", "--flavor", "advcli", "--set", f"reward.normalize.mean={mean}", "--set",
                               f"reward.normalize.std={std}"], capsys)
    assert code == 0, err
    assert line in out and "std_none" not in out


def test_reward_key_names_the_column_option(tmp_path):
    """slime's --reward-key picks one of the reward model's outputs; advcli picks the reward column with --column
    reward=NAME: --set reward_key=acc is refused with exactly that, and the hint's way runs."""
    from conftest import SAMPLE

    import advcli

    out = tmp_path / "o.parquet"
    settings = {"n_samples_per_prompt": 8, "advcli.group_by": "id"}
    with pytest.raises(AdvcliError) as e:
        advcli.run(SAMPLE, str(out), flavor="slime", settings={**settings, "reward_key": "acc"})
    assert "advcli takes it another way" in str(e.value) and "columns={'reward': 'acc'}" in e.value.hint
    advcli.run(SAMPLE, str(out), flavor="slime", settings=settings, columns={"reward": "acc"})
    assert out.exists()
