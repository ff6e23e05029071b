"""--flavor trl against numbers produced by TRL's own code.

EXPECTED below was computed by exec'ing, unmodified, the advantage blocks of
``GRPOTrainer._generate_and_score_completions`` (trl/trainer/grpo_trainer.py L2679-2730) and
``RLOOTrainer._generate_and_score_completions`` (trl/trainer/rloo_trainer.py L1505-1561) with TRL's
``nanstd`` (trl/trainer/utils.py) at huggingface/trl @ f2cd5771 on CPU (torch 2.13, float32), with
``rewards_per_func`` = the named columns of ROWS and, for RLOO, the log-probs padded to [B, T] with
mask 0. TRL's advantage is one value per sample; advcli broadcasts it over all L_i positions.
"""
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_table

from advcli.errors import AdvcliError

# (reward, acc, fmt, mask, old_log_probs, ref_log_probs); consecutive blocks are the groups. The first
# block of 4 (or 3) is 0.9 everywhere: all equal, non-dyadic. Row 4 has a log-ratio beyond 20 (k1 is
# unclamped in TRL's RLOO).
ROWS = [  # (reward, acc, fmt, mask, old_log_probs, ref_log_probs)
 (0.9, 1.0, 0.0, [1, 1, 0], [-0.5, -0.4, -0.3], [-0.6, -0.2, -0.9]),
 (0.9, 0.0, 1.0, [1], [-1.0], [-0.8]),
 (0.9, 1.0, 1.0, [0, 1, 1, 1], [-0.2, -0.3, -0.4, -0.5], [-0.1, -0.5, -0.2, -0.6]),
 (0.9, 0.5, 0.0, [1, 1], [-0.7, -0.1], [-0.9, -0.3]),
 (1.0, 1.0, 1.0, [1, 0, 1], [-0.3, -2.0, -0.2], [-0.2, -30.0, -0.4]),
 (0.0, 0.0, 1.0, [1, 1, 1, 1, 0], [-0.1, -0.2, -0.3, -0.4, -0.5], [-0.2, -0.2, -0.2, -0.2, -0.2]),
 (1.0, 1.0, 0.0, [1, 1], [-0.6, -0.6], [-0.5, -0.7]),
 (0.0, 0.5, 0.5, [1], [-0.9], [-1.2]),
 (0.25, 0.3, 0.9, [1, 1, 0, 0], [-0.4, -0.5, -0.6, -0.7], [-0.45, -0.55, -0.5, -0.9]),
 (0.8, 0.7, 0.1, [1, 1, 1], [-0.2, -0.25, -0.3], [-0.3, -0.2, -0.1]),
 (0.6, 0.2, 0.8, [0, 1], [-0.8, -0.9], [-0.7, -1.1]),
 (0.1, 0.9, 0.3, [1, 1, 1, 1, 1, 1], [-0.1] * 6, [-0.12, -0.08, -0.1, -0.2, -0.05, -0.1]),
]

EXPECTED = {
    'grpo_group': [0.0, 0.0, 0.0, 0.0, 0.865875423, -0.865875423, 0.865875423, -0.865875423, -0.586064458, 1.13305807, 0.50792259, -1.05491602],
    'grpo_batch': [0.0, 0.0, 0.0, 0.0, 1.23209751, -1.23209751, 1.23209751, -1.23209751, -0.46203658, 0.893270731, 0.400431752, -0.831665874],
    'grpo_none': [0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.5, -0.5, -0.1875, 0.362500012, 0.162500024, -0.337500006],
    'grpo_g3': [0.000595611695, 0.000595611695, 0.000595611695, 0.484094083, 0.665629447, -1.14972353, 1.12068164, -0.800486803, -0.320194721, 0.831819475, 0.277273089, -1.10909295],
    'grpo_multi_w': [0.261061937, -0.78318584, 1.30530977, -0.78318584, 1.31715655, -1.02445519, 0.146350726, -0.439052194, -0.198574498, -0.198574498, -0.992873073, 1.39002275],
    'grpo_multi_batch': [0.455351621, -1.16367602, 1.66962254, -0.961297691, 1.5178386, -1.31546009, 0.303567678, -0.505946159, -0.182140455, -0.0202378277, -0.586897492, 0.789276242],
    'grpo_nts': [0.460109472, -1.14600658, 1.59758186, -0.911684692, 1.54326844, -1.20032001, 0.171474233, -0.514422894, -0.256731451, -0.0270168912, -0.824228466, 1.10797715],
    'rloo_default': [-0.00499999523, 0.00499999523, 0.0149999857, -0.0149999857, 0.985000014, -0.985000014, 1.01499999, -1.01499999, -0.5625, 0.5625, 0.492500007, -0.492500037],
    'rloo_g4': [0.00999993086, 0.0166665316, -0.00333338976, -0.0233333707, 0.663333297, -0.650000036, 0.669999957, -0.683333337, -0.25333333, 0.49666667, 0.206666708, -0.450000018],
    'rloo_beta0': [5.96046448e-08, 5.96046448e-08, 5.96046448e-08, 5.96046448e-08, 0.666666627, -0.666666687, 0.666666627, -0.666666687, -0.25, 0.483333349, 0.216666698, -0.450000018],
    'rloo_multi_clip_norm': [1.18044615, -1.14312029, 1.16178334, -1.19910955, 0.87017113, -1.4347322, 0.879502654, -0.314941198, -0.121310487, -0.0979817361, -0.830511808, 1.04980421],
    'rloo_g6_norm': [0.373559713, 0.386980981, 0.346717149, 0.306453347, 0.615143359, -2.02885461, 1.46515954, -1.25936627, -0.56145817, 0.948439181, 0.364612341, -0.957386672],
}


def _run(tmp_path, settings, chunk_rows=5):
    cols = {"reward": pa.array([r[0] for r in ROWS], pa.float32()), "acc": pa.array([r[1] for r in ROWS], pa.float32()),
            "fmt": pa.array([r[2] for r in ROWS], pa.float32()),
            "response_mask": pa.array([r[3] for r in ROWS], pa.list_(pa.int8())),
            "old_log_probs": pa.array([r[4] for r in ROWS], pa.list_(pa.float32())),
            "ref_log_probs": pa.array([r[5] for r in ROWS], pa.list_(pa.float32()))}
    src = os.path.join(tmp_path, "in.parquet")
    pq.write_table(pa.table(cols), src)
    t, _ = run_table(src, os.path.join(tmp_path, "out.parquet"), "trl", settings, chunk_rows=chunk_rows)
    return t.column("advantages").to_pylist()


def _check(got, per_row, rtol=1e-5, atol=1e-6):
    assert len(got) == len(per_row)
    for i, (g, a) in enumerate(zip(got, per_row)):
        assert len(g) == len(ROWS[i][3]), f"row {i}"
        for t, x in enumerate(g):  # every position, masked ones included
            assert abs(x - a) <= atol + rtol * abs(a), f"row {i} position {t}: {x} != {a}"


@pytest.mark.parametrize("key,settings", [
    ("grpo_group", {"num_generations": 4}),
    ("grpo_group", {"num_generations": 4, "scale_rewards": True}),
    ("grpo_batch", {"num_generations": 4, "scale_rewards": "batch"}),
    ("grpo_none", {"num_generations": 4, "scale_rewards": "none"}),
    ("grpo_none", {"num_generations": 4, "scale_rewards": False}),
    ("grpo_g3", {"num_generations": 3}),
    ("grpo_multi_w", {"num_generations": 4, "reward_funcs": ["acc", "fmt"], "reward_weights": [1.0, 0.5]}),
    ("grpo_multi_batch", {"num_generations": 4, "reward_funcs": ["acc", "fmt"], "reward_weights": [0.7, 0.3],
                          "scale_rewards": "batch"}),
    ("grpo_nts", {"num_generations": 4, "reward_funcs": ["acc", "fmt"], "reward_weights": [2.0, 1.0],
                  "multi_objective_aggregation": "normalize_then_sum"}),
])
def test_grpo(tmp_path, key, settings):
    _check(_run(tmp_path, {"trainer": "grpo", **settings}), EXPECTED[key])


def test_grpo_float32_hazard_0_9x3(tmp_path):
    # three equal values: the float32 sum and the deviations round alike in any summation order, so this
    # literal holds on every machine (groups of more equal values are machine-dependent: tests/_float32_refs.py)
    # an all-0.9 group of 3: the float32 mean is one ulp off, σ = 0, so A = 6e-8/(0 + 1e-4) ≈ 6e-4 (TRL's own value)
    got = _run(tmp_path, {"num_generations": 3})
    assert got[0][0] == pytest.approx(0.000595611695, rel=1e-6)


@pytest.mark.parametrize("key,settings", [
    ("rloo_default", {}),
    ("rloo_g4", {"num_generations": 4}),
    ("rloo_beta0", {"num_generations": 4, "beta": 0.0}),
    ("rloo_multi_clip_norm", {"num_generations": 4, "reward_funcs": ["acc", "fmt"], "reward_weights": [1.0, 0.5],
                              "beta": 0.02, "reward_clip_range": [-1.0, 1.0], "normalize_advantages": True}),
    ("rloo_g6_norm", {"num_generations": 6, "normalize_advantages": True}),
])
def test_rloo(tmp_path, key, settings):
    # the KL sum enters the reward in advcli in float64 then rounds; TRL multiplies in float32
    _check(_run(tmp_path, {"trainer": "rloo", **settings}), EXPECTED[key], rtol=1e-5, atol=2e-6)


def test_chunking_does_not_matter(tmp_path):
    s = {"trainer": "grpo", "num_generations": 4, "scale_rewards": "batch"}
    assert _run(tmp_path, s, chunk_rows=1) == _run(tmp_path, s, chunk_rows=64)


@pytest.mark.parametrize("settings,match", [
    ({"scale_rewards": "grup"}, "group"),
    ({"reward_funcs": ["acc", "fmt"], "reward_weights": [1.0]}, "reward_weights"),
    ({"trainer": "grpo", "normalize_advantages": True}, "RLOOConfig"),
    ({"trainer": "rloo", "scale_rewards": "batch"}, "GRPOConfig"),
    ({"num_generations": 5}, "groups of 5"),
    ({"scale_rewards": None}, "unknown value None"),  # TRL: "Invalid value for scale_rewards: None"
    ({"num_generation": 4}, "num_generations"),
])
def test_bad_settings(tmp_path, settings, match):
    with pytest.raises(AdvcliError, match=match):
        _run(tmp_path, settings)


@pytest.mark.parametrize("trainer", ["grpo", "rloo"])
def test_mask_truncated_completions_is_taken_and_said(tmp_path, trainer):
    """GRPOConfig/RLOOConfig.mask_truncated_completions (TRL 0.17.0 / 0.22.0 on) zeroes the truncated completions'
    completion_mask: GRPO's advantages never read it (the same numbers), RLOO's KL sum does, through the mask advcli
    reads from the input (the run says so); it was refused as not a setting. TRL 0.15.0 has no such field."""
    from conftest import SAMPLE

    import advcli

    base = {"trainer": trainer, "num_generations": 8, "advcli.group_by": "id"}
    runs = []
    for extra in ({}, {"mask_truncated_completions": True}):
        res = advcli.run(SAMPLE, str(tmp_path / f"o{len(runs)}.parquet"), flavor="trl", settings={**base, **extra})
        runs.append((pq.read_table(tmp_path / f"o{len(runs)}.parquet").column("advantages").to_pylist(), res))
    assert runs[0][0] == runs[1][0]
    assert "mask_truncated_completions zeroes the truncated completions' mask" in runs[1][1].estimator_note
    with pytest.raises(AdvcliError, match="not a field of TRL 0.15.0"):
        advcli.run(SAMPLE, str(tmp_path / "old.parquet"), flavor="trl@0.15.0",
                   settings={**base, "trainer": "grpo", "mask_truncated_completions": True})
