"""--flavor nemo against numbers produced by NeMo RL's own estimators.

EXPECTED below was computed by running the unmodified classes of
``nemo_rl/algorithms/advantage_estimator.py`` and ``calculate_baseline_and_std_per_prompt`` /
``calculate_kl`` (``nemo_rl/algorithms/utils.py``) at NVIDIA-NeMo/RL @ 7ea279ab on CPU (torch 2.13,
float32) on ROWS, padded to [B, T] with mask 0, prompt ids = the group letter's index. Only the
first L_i positions of each row are compared (advcli keeps the rows ragged). They are NeMo's numbers at
that commit, so the runs here name it: ``--flavor nemo@7ea279a`` (the newest state, with #4158 and #3837,
is tested in tests/flavors/test_releases.py).
"""
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import output_lists, run_table

import advcli
from advcli.errors import AdvcliError
from advcli.ops.groups import GroupIndex

# (prompt_id, reward, reward/fmt, reward/acc, mask, old_log_probs, ref_log_probs, teacher_log_probs, values).
# Groups scattered: a = [1, 0, 0.5, 0] (LOO std 0 for row 0), b = [1, 0] (n = 2), c = [0.7] (alone),
# d = 0.9×3 (all equal, non-dyadic); interior masked spans, masked tails, a row of length 1,
# log-ratios beyond ±20 (rows 0 and 5).
ROWS = [  # (prompt_id, reward, reward/fmt, reward/acc, mask, old, ref, teacher, values)
 ("a", 1.0, 1.0, 0.5, [1,1,1,0], [-0.5,-1.0,-0.2,-3.0], [-0.7,-0.9,-25.0,-1.0], [-0.4,-1.2,-0.1,-0.5], [0.1,0.2,0.3,0.4]),
 ("b", 1.0, 0.0, 1.0, [1], [-0.3], [-0.2], [-0.1], [0.5]),
 ("d", 0.9, 1.0, 0.0, [1,0,0,1,1], [-1.0,-2.0,-0.5,-0.1,-0.3], [-1.1,-2.5,-0.6,-0.2,-0.35], [-0.9,-1.0,-1.0,-0.2,-0.3], [0.3,0.1,-0.2,0.4,0.6]),
 ("a", 0.0, 0.0, 0.5, [0,1,1,1,0,0], [-0.2,-0.4,-0.6,-0.8,-1.0,-1.2], [-0.25,-0.3,-0.9,-0.7,-1.1,-1.0], [-0.2,-0.5,-0.5,-0.6,-0.9,-1.0], [0.0,0.1,0.2,0.3,0.2,0.1]),
 ("c", 0.7, 1.0, 1.0, [1,1], [-0.1,-0.2], [-0.15,-0.1], [-0.3,-0.1], [0.9,0.8]),
 ("a", 0.5, 1.0, 0.0, [1,1,1,1,1], [-0.5,-0.5,-0.5,-0.5,-0.5], [-0.4,-0.6,-0.3,-0.7,-22.0], [-0.5,-0.4,-0.6,-0.3,-0.2], [0.2,0.2,0.2,0.2,0.2]),
 ("d", 0.9, 0.0, 0.5, [1,1,0], [-0.3,-0.6,-0.9], [-0.2,-0.9,-0.8], [-0.25,-0.5,-0.7], [0.4,0.5,0.6]),
 ("b", 0.0, 1.0, 1.0, [1,0,1], [-1.5,-0.2,-0.1], [-1.4,-0.3,-0.3], [-1.2,-0.2,-0.2], [-0.1,0.0,0.1]),
 ("a", 0.0, 0.0, 0.0, [1,1], [-0.05,-0.15], [-0.1,-0.1], [-0.1,-0.2], [0.3,0.3]),
 ("d", 0.9, 1.0, 1.0, [0,1,1,1], [-0.4,-0.3,-0.2,-0.1], [-0.5,-0.2,-0.3,-0.2], [-0.3,-0.3,-0.3,-0.3], [0.5,0.4,0.3,0.2]),
]

EXPECTED = {
    'grpo_default': [2.88674116, 1.0, 0.0, -0.999998093, 0.0, 0.288674623, 0.0, -1.0, -0.999998093, 0.0],
    'grpo_noloo': [1.30557966, 0.707105756, 0.000140622113, -0.783347785, 0.0, 0.261115909, 0.000140622113, -0.707105756, -0.783347785, 0.000140622113],
    'grpo_nonorm': [0.833333313, 1.0, 0.0, -0.5, 0.0, 0.166666657, 0.0, -1.0, -0.5, 0.0],
    'gdpo_w': [1.25773478, -0.382692873, -1.31442595, 0.409096539, -0.0152210658, -0.439538807, -0.382692873, 0.352250725, -1.28817701, 1.80366671],
    'gdpo_noloo': [1.56669831, -0.639602602, -0.382301062, -1.3316893e-06, 1.6174365e-08, 1.36403798e-06, -1.0444665, 0.639602602, -1.56669831, 1.42676735],
    'rpp': [[1.92365968, 1.92365968, 1.92365968, 1.92365968], [1.5359453], [-0.0149119701, -0.0149119701, -0.0149119701, -0.0149119701, -0.0149119701], [-1.17805517, -1.17805517, -1.17805517, -1.17805517, -1.17805517, -1.17805517], [-0.0149121545, -0.0149121545], [0.372802198, 0.372802198, 0.372802198, 0.372802198, 0.372802198], [-0.0149119701, -0.0149119701, -0.0149119701], [-1.56576955, -1.56576955, -1.56576955], [-1.17805517, -1.17805517], [-0.0149119701, -0.0149119701, -0.0149119701, -0.0149119701]],
    'rpp_kl_k1': [[1.975932, 2.06313014, -0.872540355, 2.61538506], [1.69980454], [0.188370436, 0.0721062645, 0.188370436, 0.188370451, 0.202903494], [-0.887073398, -0.843474329, -0.959738493, -0.843474329, -0.901606381, -0.814408243], [0.202903286, 0.24650237], [0.609827936, 0.551695824, 0.638893962, 0.522629797, -2.32584262], [0.246502534, 0.130238384, 0.246502534], [-1.20679986, -1.26493192, -1.293998], [-0.887073398, -0.858007371], [0.188370451, 0.246502534, 0.188370451, 0.188370451]],
    'rpp_kl_k2': [[2.0268476, 2.03121519, -0.879224718, 1.45029211], [1.66722846], [0.211280555, 0.176337808, 0.211280555, 0.211280555, 0.212372512], [-0.879588664, -0.880680561, -0.892328143, -0.880680561, -0.880680561, -0.885048449], [0.212372348, 0.211280376], [0.575267375, 0.575267375, 0.570899546, 0.570899546, -2.33517265], [0.211280555, 0.199632958, 0.211280555], [-1.24466777, -1.24466777, -1.24903548], [-0.879588664, -0.879588664], [0.211280555, 0.211280555, 0.211280555, 0.211280555]],
    'rpp_kl_k3': [[2.02715111, 2.0310998, -0.879357815, 0.754528284], [1.66710413], [0.211219877, 0.181607172, 0.211219877, 0.211219862, 0.212270498], [-0.879715919, -0.880863667, -0.891243994, -0.880863667, -0.880766511, -0.885590255], [0.212270334, 0.211122558], [0.575117946, 0.575215101, 0.570391357, 0.571169436, -2.33533955], [0.211122751, 0.200742394, 0.211122766], [-1.24485898, -1.24476194, -1.24880755], [-0.879715919, -0.879728079], [0.211219862, 0.211122751, 0.211219862, 0.211219862]],
    'rpp_nobase_kl': [[1.10328007, 1.10363042, 0.845279455, 0.990313828], [1.10363042], [0.845154345, 0.84252578, 0.845154345, 0.845154345, 0.845247686], [-1.48111391, -1.48121583, -1.4821372, -1.48121583, -1.48120725, -1.48163533], [0.328278482, 0.328176498], [-0.188792646, -0.188784018, -0.189212248, -0.189143151, -0.447143614], [0.845145702, 0.844224393, 0.845145702], [-1.48121583, -1.48120725, -1.48156619], [-1.48111391, -1.48111498], [0.845154345, 0.845145702, 0.845154345, 0.845154345]],
    'opd': [[0.099999994, -0.200000048, 0.100000001, 0.0], [0.200000018], [0.100000024, 0.0, -0.0, -0.100000001, 0.0], [0.0, -0.099999994, 0.100000024, 0.199999988, 0.0, 0.0], [-0.200000018, 0.100000001], [0.0, 0.099999994, -0.100000024, 0.199999988, 0.300000012], [0.0500000119, 0.100000024, 0.0], [0.299999952, 0.0, -0.100000001], [-0.0500000007, -0.049999997], [0.0, 0.0, -0.100000009, -0.200000018]],
    'raw_norm': [[1.07688797, 1.07688797, 1.07688797, 1.07688797], [1.07688797], [0.82001555, 0.82001555, 0.82001555, 0.82001555, 0.82001555], [-1.49183571, -1.49183571, -1.49183571, -1.49183571, -1.49183571, -1.49183571], [0.306270838, 0.306270838], [-0.207473859, -0.207473859, -0.207473859, -0.207473859, -0.207473859], [0.82001555, 0.82001555, 0.82001555], [-1.49183571, -1.49183571, -1.49183571], [-1.49183571, -1.49183571], [0.82001555, 0.82001555, 0.82001555, 0.82001555]],
    'raw_plain': [[1.0, 1.0, 1.0, 1.0], [1.0], [0.899999976, 0.899999976, 0.899999976, 0.899999976, 0.899999976], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.699999988, 0.699999988], [0.5, 0.5, 0.5, 0.5, 0.5], [0.899999976, 0.899999976, 0.899999976], [0.0, 0.0, 0.0], [0.0, 0.0], [0.899999976, 0.899999976, 0.899999976, 0.899999976]],
    'gae_default': ([[1.62688184, 1.4510479, 1.26595938, 0.0], [0.696456611], [0.869442999, 0.0, 0.0, 0.653743804, 0.126953676], [0.0, -0.942999601, -1.25409055, -1.58155477, 0.0, 0.0], [-1.28256571, -1.01205194], [-0.0315050445, 0.00511576841, 0.0436639823, 0.0842410848, 0.12695384], [0.639506221, 0.411705166, 0.0], [-0.428311437, 0.0, -1.01205182], [-1.53884184, -1.58155477], [0.0, 0.516351283, 0.881544888, 1.26595938]], [[0.926750004, 0.964999974, 1.0, 0.400000006], [1.0], [0.86074996, 0.584999979, 0.284999967, 0.88499999, 0.899999976], [-0.0757499859, 0.0242500156, 0.0150000155, 0.0, 0.200000003, 0.100000001], [0.704999983, 0.699999988], [0.444351852, 0.457212508, 0.470749974, 0.485000014, 0.5], [0.879999995, 0.899999976, 0.600000024], [0.00500000268, -0.100000001, 0.0], [0.0150000155, 0.0], [0.936749935, 0.836749971, 0.86499995, 0.899999976]]),
    'gae_kl_g099': ([[0.741800904, 0.5584957, 0.302638739, 0.0], [1.27566075], [1.24560416, 0.0, 0.0, 1.11319005, 0.613686621], [0.0, -0.520865977, -0.912346542, -1.276528, 0.0, 0.0], [-0.957966983, -0.638480842], [-0.754680455, -0.816713333, -0.850530028, -0.942191243, -0.973455608], [1.07797766, 0.892832398, 0.0], [0.00272470061, 0.0, -0.686334372], [-1.19859838, -1.28450358], [0.0, 0.808005035, 1.298774, 1.88180554]], [[0.437658191, 0.480199993, 0.5, 0.400000006], [1.005], [0.795578599, 0.554072499, 0.254072487, 0.854072511, 0.897499979], [-0.0581328794, 0.0418671221, 0.0191550255, 0.00499999523, 0.200000003, 0.100000001], [0.704854965, 0.704999983], [0.0685764849, 0.0491318554, 0.03853181, 0.00980000198, 0.0], [0.843034983, 0.88499999, 0.600000024], [0.00598999858, -0.109999999, -0.00999999791], [0.0294275284, 0.00249999762], [0.858410299, 0.758410335, 0.812245011, 0.894999981]]),
    'gae_nonorm': ([[0.82674998, 0.764999986, 0.699999988, 0.0], [0.5], [0.560749948, 0.0, 0.0, 0.484999955, 0.299999952], [0.0, -0.0757499859, -0.184999987, -0.300000012, 0.0, 0.0], [-0.194999993, -0.100000024], [0.244351864, 0.25721249, 0.270749986, 0.284999996, 0.300000012], [0.479999959, 0.399999976, 0.0], [0.105000004, 0.0, -0.100000001], [-0.284999996, -0.300000012], [0.0, 0.436749965, 0.564999938, 0.699999988]], [[0.926750004, 0.964999974, 1.0, 0.400000006], [1.0], [0.86074996, 0.584999979, 0.284999967, 0.88499999, 0.899999976], [-0.0757499859, 0.0242500156, 0.0150000155, 0.0, 0.200000003, 0.100000001], [0.704999983, 0.699999988], [0.444351852, 0.457212508, 0.470749974, 0.485000014, 0.5], [0.879999995, 0.899999976, 0.600000024], [0.00500000268, -0.100000001, 0.0], [0.0150000155, 0.0], [0.936749935, 0.836749971, 0.86499995, 0.899999976]]),
    'gae_decoupled': ([[1.30178988, 1.40355015, 1.53075051, 0.0], [0.894747972], [0.742107332, 0.0, 0.0, 0.703947246, 0.258745313], [0.0, -0.733418465, -1.14046013, -1.64926219, 0.0, 0.0], [-1.26766062, -1.01325965], [-0.304498345, -0.206808344, -0.0846958682, 0.0679447204, 0.258745492], [0.640346944, 0.576746643, 0.0], [-0.313656837, 0.0, -1.01325965], [-1.4584614, -1.64926219], [0.0, 0.156985074, 0.767547429, 1.53075051]], [[1.0, 1.0, 1.0, 0.400000006], [1.0], [0.899999976, 0.599999964, 0.299999952, 0.899999976, 0.899999976], [-0.100000001, 0.0, 0.0, 0.0, 0.200000003, 0.100000001], [0.699999988, 0.699999988], [0.5, 0.5, 0.5, 0.5, 0.5], [0.899999976, 0.899999976, 0.600000024], [0.0, -0.100000001, 0.0], [0.0, 0.0], [1.0, 0.899999976, 0.899999976, 0.899999976]]),
    'gae_length_adaptive': ([[0.238916814, 0.720968187, 2.16712236, 0.0], [1.37831116], [0.19509396, 0.0, 0.0, 0.589499772, 0.589499533], [0.0, -0.199311689, -0.593717396, -1.7769345, 0.0, 0.0], [-0.98812294, -0.988123178], [-0.440372437, -0.338142455, -0.167759195, 0.11621289, 0.589499772], [-0.199311718, 0.983905315, 0.0], [0.195094019, 0.0, -0.988123059], [-0.593717396, -1.7769345], [0.0, -0.81283164, -0.0678432211, 2.16712236]], [[0.926750004, 0.964999974, 1.0, 0.400000006], [1.0], [0.86074996, 0.584999979, 0.284999967, 0.88499999, 0.899999976], [-0.0757499859, 0.0242500156, 0.0150000155, 0.0, 0.200000003, 0.100000001], [0.704999983, 0.699999988], [0.444351852, 0.457212508, 0.470749974, 0.485000014, 0.5], [0.879999995, 0.899999976, 0.600000024], [0.00500000268, -0.100000001, 0.0], [0.0150000155, 0.0], [0.936749935, 0.836749971, 0.86499995, 0.899999976]]),
    'gae_length_adaptive_nonorm_value': ([[0.0879999921, 0.102000013, 0.199999988, 0.0], [0.504999995], [0.0909999907, 0.0, 0.0, 0.18900004, 0.297499955], [0.0, 0.102999993, 0.0820000321, -0.295000017, 0.0, 0.0], [-0.110499978, -0.0950000286], [-0.00124189444, -0.0128541989, -0.01774, -0.0780000091, -0.200000003], [0.099999994, 0.38499999, 0.0], [0.203999996, 0.0, -0.109999999], [-0.00549998879, -0.297500014], [0.0, -0.09799999, -0.107000008, 0.694999993]], [[0.485000014, 0.5, 0.5, 0.400000006], [1.005], [0.869689763, 0.583525002, 0.28352499, 0.883525014, 0.897499979], [-0.104949512, -0.0049495101, -0.0100499988, 0.00499999523, 0.200000003, 0.100000001], [0.695449948, 0.704999983], [0.000147998333, -0.00490100682, 9.99867916e-05, -0.0100000054, 0.0], [0.881150007, 0.88499999, 0.600000024], [-0.00490000844, -0.109999999, -0.00999999791], [-2.50041485e-05, 0.00249999762], [0.97723949, 0.877239466, 0.881049991, 0.894999981]]),
}


PINNED = "nemo@7ea279a"  # the commit EXPECTED was computed at


def _write(path, rows=ROWS, component_order=("reward/fmt", "reward/acc")):
    cols = {"prompt_id": pa.array([r[0] for r in rows]), "reward": pa.array([r[1] for r in rows], pa.float32())}
    idx = {"reward/fmt": 2, "reward/acc": 3}
    for name in component_order:  # stored unsorted: NeMo sorts the reward/* names
        cols[name] = pa.array([r[idx[name]] for r in rows], pa.float32())
    cols["response_mask"] = pa.array([r[4] for r in rows], pa.list_(pa.int8()))
    for k, name in ((5, "old_log_probs"), (6, "ref_log_probs"), (7, "teacher_log_probs"), (8, "values")):
        cols[name] = pa.array([r[k] for r in rows], pa.list_(pa.float32()))
    pq.write_table(pa.table(cols), path)
    return path


def _run(tmp_path, settings, chunk_rows=3, column="advantages"):
    src = _write(os.path.join(tmp_path, "in.parquet"))
    t, _ = run_table(src, os.path.join(tmp_path, "out.parquet"), PINNED, settings, chunk_rows=chunk_rows)
    return output_lists(t)


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"row {i}"
        for t, (x, y) in enumerate(zip(g, w)):
            assert abs(x - y) <= atol + rtol * abs(y), f"row {i} position {t}: {x} != {y}"


def _rows_of(per_row):
    return [[a] * len(r[4]) for a, r in zip(per_row, ROWS)]


# ------------------------------------------------------------------------------- GRPO loop
@pytest.mark.parametrize("key,settings", [
    ("grpo_default", {}),
    ("grpo_noloo", {"grpo.adv_estimator.use_leave_one_out_baseline": False}),
    ("grpo_nonorm", {"grpo.adv_estimator.normalize_rewards": False}),
    ("grpo_noloo", {"grpo.use_leave_one_out_baseline": False}),  # the yaml's top-level alias
])
def test_grpo(tmp_path, key, settings):
    got = _run(tmp_path, {"grpo.adv_estimator.name": "grpo", **settings})
    # masked positions keep the advantage (NeMo broadcasts to [B, T] without masking)
    _close(got["advantages"], _rows_of(EXPECTED[key]))


def test_grpo_chunking_does_not_matter(tmp_path):
    a = _run(tmp_path, {}, chunk_rows=1)["advantages"]
    b = _run(tmp_path, {}, chunk_rows=100)["advantages"]
    assert a == b


def test_grpo_edge_cases_by_hand():
    # spec/nemo.md §11 and the upstream unit test ([1,2,3] -> baseline [2.5,2,1.5], std [.7071,1.4142,.7071])
    g = GroupIndex.from_codes(torch.tensor([0, 0, 0]))
    b, s = g.onepass_baseline_std(torch.tensor([1.0, 2.0, 3.0]), True)
    assert torch.allclose(b, torch.tensor([2.5, 2.0, 1.5]))
    assert torch.allclose(s, torch.tensor([0.70710677, 1.4142135, 0.70710677]))
    # n = 2 leave-one-out: k/(k−1) = inf times 0 -> NaN -> std 0
    b, s = GroupIndex.from_codes(torch.tensor([0, 0])).onepass_baseline_std(torch.tensor([1.0, 0.0]), True)
    assert b.tolist() == [0.0, 1.0] and s.tolist() == [0.0, 0.0]
    # a group of one: baseline = own reward, std 0
    b, s = GroupIndex.from_codes(torch.tensor([0])).onepass_baseline_std(torch.tensor([0.7]), True)
    assert b.tolist() == [pytest.approx(0.7)] and s.tolist() == [0.0]


def _nemo_loo_reference(r: list[float]) -> torch.Tensor:
    """NeMo RL's float32 path for one LOO group, written out from ``calculate_baseline_and_std_per_prompt``
    (nemo_rl/algorithms/utils.py L149-196 @7ea279ab) and ``GRPOAdvantageEstimator`` (L82-96): the same
    ``torch.matmul`` calls on a fresh vector, so it gives whatever this machine's BLAS gives."""
    v = torch.tensor(r, dtype=torch.float32)
    n = v.numel()
    w = 1 - torch.eye(n, dtype=torch.float32)
    k = torch.tensor(float(n), dtype=torch.float32) - 1
    b = torch.matmul(w, v) / k
    q = torch.matmul(w, torch.pow(v, 2)) / k
    std = ((q - b.square()) * (k / (k - 1))).sqrt().nan_to_num(0)
    adv = v - b
    return torch.where(std > 0, adv / (std + torch.tensor(1e-6, dtype=torch.float32)), adv)


@pytest.mark.parametrize("pos", [0, 2, 4, 7])
def test_grpo_float32_hazard_7x03_1x09(pos):
    """7×0.3 + 1×0.9: the 0.9 row's leave-one-out set {0.3 ×7} has std 0 in exact arithmetic, so NeMo
    gives it the raw 0.6; in float32 NeMo's matmul may leave a residue (std ~9e-5, A ~6367), and whether
    it does depends on the BLAS's summation order for that position, i.e. on the CPU. So the test holds
    advcli to NeMo's own calls on this machine, never to one machine's literal."""
    from advcli.estimators.loo import grpo_loo_adv

    r = [0.3] * 7
    r.insert(pos, 0.9)
    g = GroupIndex.from_codes(torch.zeros(8, dtype=torch.int64))
    a = grpo_loo_adv(g, torch.tensor(r), True, True, 1e-6)
    want = _nemo_loo_reference(r)
    assert torch.equal(a, want)  # bit for bit, artefact or not
    # either the intended 0.6 or the float32 artefact (a std residue far below the rewards' scale)
    assert float(a[pos]) == pytest.approx(0.6, abs=1e-6) or float(a[pos]) > 1000
    assert torch.allclose(a[[i for i in range(8) if i != pos]], torch.tensor(-0.37796), atol=1e-5)
    # float64 (of the float32 rewards a dump holds) gives the intended 0.6: LOO std exactly 0 -> unnormalised
    a64 = grpo_loo_adv(g, torch.tensor(r).double(), True, True, 1e-6)
    assert float(a64[pos]) == pytest.approx(0.6)


def test_grpo_hazard_through_the_cli(tmp_path):
    rows = [("h", 0.3, 0, 0, [1, 1], [0, 0], [0, 0], [0, 0], [0, 0])] * 7
    rows = rows[:2] + [("h", 0.9, 0, 0, [1, 0, 1], [0] * 3, [0] * 3, [0] * 3, [0] * 3)] + rows[2:]
    src = _write(os.path.join(tmp_path, "h.parquet"), rows)
    out = os.path.join(tmp_path, "o.parquet")
    result = advcli.run(src, out, flavor=PINNED, chunk_rows=2, device="cpu")
    adv = pq.read_table(out).column("advantages").to_pylist()
    want = float(_nemo_loo_reference([0.3, 0.3, 0.9] + [0.3] * 5)[2])  # NeMo's calls on this machine
    assert adv[2] == [pytest.approx(want, rel=1e-6)] * 3
    if want > 1000:  # the artefact happened here: the run must flag the group
        flagged = [d for d in result.diagnostics if d["kind"] == "float32_cancellation" and d["count"]]
        assert flagged and flagged[0]["count"] == 1, result.diagnostics
    advcli.run(src, out, flavor=PINNED, chunk_rows=2, device="cpu", force=True, precision="float64")
    assert pq.read_table(out).column("advantages").to_pylist()[2][0] == pytest.approx(0.6, abs=1e-6)


def test_advantage_clip(tmp_path):
    got = _run(tmp_path, {"grpo.advantage_clip_low": -0.9, "grpo.advantage_clip_high": 1.5})
    _close(got["advantages"], _rows_of([min(max(a, -0.9), 1.5) for a in EXPECTED["grpo_default"]]))
    got = _run(tmp_path, {"grpo.advantage_clip_high": 0.5})
    _close(got["advantages"], _rows_of([min(a, 0.5) for a in EXPECTED["grpo_default"]]))


@pytest.mark.parametrize("key,settings", [
    ("gdpo_w", {"grpo.adv_estimator.reward_weights": [1.0, 0.5]}),
    ("gdpo_noloo", {"grpo.adv_estimator.use_leave_one_out_baseline": False}),
])
def test_gdpo_sorted_components(tmp_path, key, settings):
    # the file stores reward/fmt before reward/acc; the weights apply to [reward/acc, reward/fmt]
    got = _run(tmp_path, {"grpo.adv_estimator.name": "gdpo", **settings})
    _close(got["advantages"], _rows_of(EXPECTED[key]), atol=5e-6)


def test_gdpo_needs_two_components(tmp_path):
    rows = [r[:1] + r[1:] for r in ROWS]
    src = os.path.join(tmp_path, "one.parquet")
    t = pq.read_table(_write(src, rows)).drop_columns(["reward/fmt"])
    pq.write_table(t, src)
    with pytest.raises(AdvcliError, match="at least 2 reward components"):
        advcli.run(src, None, flavor="nemo", settings={"grpo.adv_estimator.name": "gdpo"}, device="cpu")
    with pytest.raises(AdvcliError, match="weights"):
        _run(tmp_path, {"grpo.adv_estimator.name": "gdpo", "grpo.adv_estimator.reward_weights": [1, 2, 3]})


# ----------------------------------------------------------------------- REINFORCE++ / OPD
@pytest.mark.parametrize("key,settings", [
    ("rpp", {}),
    ("rpp_kl_k1", {"loss_fn.use_kl_in_reward": True, "loss_fn.reference_policy_kl_penalty": 0.1,
                   "loss_fn.reference_policy_kl_type": "k1"}),
    ("rpp_kl_k2", {"loss_fn.use_kl_in_reward": True, "loss_fn.reference_policy_kl_penalty": 0.1,
                   "loss_fn.reference_policy_kl_type": "k2"}),
    ("rpp_kl_k3", {"loss_fn.use_kl_in_reward": True, "loss_fn.reference_policy_kl_penalty": 0.1}),
    ("rpp_nobase_kl", {"loss_fn.use_kl_in_reward": True, "grpo.adv_estimator.minus_baseline": False}),
])
def test_reinforce_plus_plus(tmp_path, key, settings):
    got = _run(tmp_path, {"grpo.adv_estimator.name": "reinforce_plus_plus", **settings})
    _close(got["advantages"], EXPECTED[key], rtol=1e-4, atol=1e-5)


def test_opd(tmp_path):
    got = _run(tmp_path, {"grpo.adv_estimator.name": "opd"})
    _close(got["advantages"], EXPECTED["opd"])


# ---------------------------------------------------------------------------------- PPO
@pytest.mark.parametrize("key,settings", [
    ("raw_norm", {}),
    ("raw_plain", {"ppo.adv_estimator.normalize_advantages": False}),
])
def test_raw_reward(tmp_path, key, settings):
    got = _run(tmp_path, {"ppo.adv_estimator.name": "raw_reward", **settings})
    _close(got["advantages"], EXPECTED[key], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("key,settings", [
    ("gae_default", {}),
    ("gae_kl_g099", {"ppo.adv_estimator.gae_gamma": 0.99, "ppo.adv_estimator.gae_lambda": 0.9,
                     "loss_fn.use_kl_in_reward": True, "loss_fn.reference_policy_kl_penalty": 0.05,
                     "loss_fn.reference_policy_kl_type": "k1"}),
    ("gae_nonorm", {"ppo.adv_estimator.normalize_advantages": False}),
    ("gae_decoupled", {"ppo.adv_estimator.gae_lambda_value": 1.0, "ppo.adv_estimator.gae_lambda_policy": 0.8}),
    # VAPO length-adaptive λ_i = clamp(1 − 1/max(α·Σm_i, 1), 0, 1) for the advantages (row lengths 1-5: with α = 0.3
    # the rows of ≤ 3 trained tokens get λ = 0), the returns with gae_lambda_value; α wins over gae_lambda_policy
    ("gae_length_adaptive", {"ppo.adv_estimator.length_adaptive_alpha": 0.5}),
    ("gae_length_adaptive_nonorm_value", {"ppo.adv_estimator.length_adaptive_alpha": 0.3,
                                          "ppo.adv_estimator.gae_lambda_value": 1.0,
                                          "ppo.adv_estimator.gae_lambda_policy": 0.5,
                                          "ppo.adv_estimator.normalize_advantages": False,
                                          "ppo.adv_estimator.gae_gamma": 0.99, "loss_fn.use_kl_in_reward": True,
                                          "loss_fn.reference_policy_kl_penalty": 0.05,
                                          "loss_fn.reference_policy_kl_type": "k1"}),
])
def test_gae(tmp_path, key, settings):
    got = _run(tmp_path, {"ppo.adv_estimator.name": "gae", **settings})
    adv, ret = EXPECTED[key]
    _close(got["advantages"], adv, rtol=1e-4, atol=1e-5)  # zeroed at mask 0
    _close(got["returns"], ret, rtol=1e-4, atol=1e-5)  # A + V before whitening, not masked


def test_gae_length_adaptive_by_hand(tmp_path):
    """λ_i = 1 − 1/(α·Σm_i) from the row's trained tokens: a row of 4 tokens, two of them trained, α = 1 → λ = 0.5;
    unnormalised, γ = 1: carried over the holes, A = [δ_1 + 0.5·δ_3, δ_1 + 0.5·δ_3, δ_3, 0] with δ_3 = r − V_3,
    δ_1 = V_3 − V_1 (the next trained value); a row of one trained token: λ = 0 (clamped), A = r − V."""
    from _flavor_rows import assert_rows_close

    got = _run_small(tmp_path, [("p", 1.0, [0, 1, 0, 1], [0.1, 0.2, 0.3, 0.4]), ("q", 2.0, [1], [0.5])],
                     {"ppo.adv_estimator.name": "gae", "ppo.adv_estimator.length_adaptive_alpha": 1.0,
                      "ppo.adv_estimator.normalize_advantages": False})
    d3, d1 = 1.0 - 0.4, 0.4 - 0.2
    assert_rows_close(got["advantages"], [[0.0, d1 + 0.5 * d3, 0.0, d3], [1.5]])
    # returns with gae_lambda (0.95): A_1 = d1 + 0.95·d3; masked positions carry the next trained one's A + V
    assert_rows_close(got["returns"], [[d1 + 0.95 * d3 + 0.1, d1 + 0.95 * d3 + 0.2, d3 + 0.3, d3 + 0.4], [2.0]])


@pytest.mark.parametrize("estimator", ["grpo", "gdpo", "reinforce_plus_plus"])
def test_reward_scaling_maps_the_reward_and_each_component(tmp_path, estimator):
    """grpo.reward_scaling (scale_rewards, grpo.py L1831-1874 @7ea279ab): r ← tmin + (clamp(r, smin, smax) − smin)/
    (smax − smin)·(tmax − tmin) on total_reward and every reward/* component, before the estimator: the run equals
    the run on rewards mapped here (source [0.2, 0.8] clamps 0, 0.9 and 1)."""
    smin, smax, tmin, tmax = 0.2, 0.8, -1.0, 3.0

    def mapped(r):
        return tmin + (min(max(r, smin), smax) - smin) / (smax - smin) * (tmax - tmin)

    settings = {"grpo.adv_estimator.name": estimator, "grpo.reward_scaling.enabled": True,
                "grpo.reward_scaling.source_min": smin, "grpo.reward_scaling.source_max": smax,
                "grpo.reward_scaling.target_min": tmin, "grpo.reward_scaling.target_max": tmax}
    got = _run(tmp_path, settings)
    rows = [(r[0], mapped(r[1]), mapped(r[2]), mapped(r[3])) + r[4:] for r in ROWS]
    src = _write(os.path.join(tmp_path, "mapped.parquet"), rows)
    t, _ = run_table(src, os.path.join(tmp_path, "want.parquet"), PINNED, {"grpo.adv_estimator.name": estimator},
                     chunk_rows=3)
    _close(got["advantages"], output_lists(t)["advantages"], rtol=1e-5, atol=1e-5)
    plain = _run(tmp_path, {"grpo.adv_estimator.name": estimator})
    assert plain["advantages"] != got["advantages"]


@pytest.mark.parametrize("smin, said", [(2.0, "every reward becomes target_max"), (1.0, "divides by 0")])
def test_reward_scaling_without_a_source_range_is_refused_by_its_keys(tmp_path, smin, said):
    """source_min ≥ source_max: torch.clamp(min > max) gives source_max everywhere, mapped to target_max (every
    advantage 0), or a division by 0: refused naming NeMo's own keys, not advcli's reward.range_map."""
    with pytest.raises(AdvcliError) as refused:
        _run(tmp_path, {"grpo.reward_scaling.enabled": True, "grpo.reward_scaling.source_min": smin,
                        "grpo.reward_scaling.source_max": 1.0})
    assert said in str(refused.value) and "grpo.reward_scaling.source_min" in str(refused.value)
    assert "range_map" not in str(refused.value)


@pytest.mark.parametrize("estimator", ["grpo", "reinforce_plus_plus"])
def test_reward_shaping_dapo_overlong_is_the_rewards_shaped_first(tmp_path, estimator):
    """apply_reward_shaping's DAPO branch (reward_functions.py L117-170 @7ea279ab): r + min(−(n − (max − L))/L·p, 0),
    n the token count of the row's first assistant message (llm_message_utils.py L773-774), the first run of its
    mask's ones (other turns are mask 0), not capped: with L = 2, max 5, p = 0.4, the rows whose first run is 4
    and 5 tokens long lose 0.2 and 0.4 (a row of 6 tokens [0,1,1,1,0,0] has a first run of 3: none). The same run
    as on rewards shaped by hand."""
    settings = {"grpo.adv_estimator.name": estimator, "grpo.reward_shaping.enabled": True,
                "grpo.reward_shaping.overlong_buffer_length": 2, "grpo.reward_shaping.overlong_buffer_penalty": 0.4,
                "grpo.reward_shaping.max_response_length": 5}
    got = _run(tmp_path, settings)

    def first_run(mask):
        start = mask.index(1) if 1 in mask else len(mask)
        rest = mask[start:]
        return rest.index(0) if 0 in rest else len(rest)

    assert [first_run(r[4]) for r in ROWS] == [3, 1, 1, 3, 2, 5, 2, 1, 2, 3]
    rows = [(r[0], r[1] - max(first_run(r[4]) - 3, 0) / 2 * 0.4) + r[2:] for r in ROWS]
    src = _write(os.path.join(tmp_path, "shaped.parquet"), rows)
    t, _ = run_table(src, os.path.join(tmp_path, "want.parquet"), PINNED, {"grpo.adv_estimator.name": estimator},
                     chunk_rows=3)
    _close(got["advantages"], output_lists(t)["advantages"], rtol=1e-5, atol=1e-5)
    assert _run(tmp_path, {"grpo.adv_estimator.name": estimator})["advantages"] != got["advantages"]


def test_reward_shaping_stop_properly_scales_the_truncated_rows_only(tmp_path):
    """stop_properly_penalty_coef c: r·c on the truncated rows, and the DAPO keys are ignored (L66-115)."""
    from _flavor_rows import run_rows

    rows = [dict(prompt_id="a", reward=r, mask=[1] * k, truncated=cut, old=[-0.5] * k, ref=[-0.5] * k)
            for r, k, cut in ((1.0, 9, True), (0.5, 2, False), (0.0, 3, False), (1.0, 9, True))]
    settings = {"grpo.adv_estimator.name": "grpo", "grpo.adv_estimator.use_leave_one_out_baseline": False,
                "grpo.reward_shaping.enabled": True, "grpo.reward_shaping.stop_properly_penalty_coef": 0.5,
                "grpo.reward_shaping.overlong_buffer_length": 1, "grpo.reward_shaping.overlong_buffer_penalty": 1.0,
                "grpo.reward_shaping.max_response_length": 2}
    got = run_rows(tmp_path, rows, "nemo", settings)[0]["advantages"]
    # the truncated rows' 1.0 become 0.5; the DAPO keys would have cut the 9-token rows to −7.0
    shaped = [dict(r, reward=0.5 if r["truncated"] else r["reward"]) for r in rows]
    want = run_rows(tmp_path, shaped, "nemo", {"grpo.adv_estimator.name": "grpo",
                                               "grpo.adv_estimator.use_leave_one_out_baseline": False})[0]
    assert got == want["advantages"] and got[0][0] > 0 and got[0] == got[1][:1] * 9


@pytest.mark.parametrize("settings,words", [
    ({"grpo.reward_shaping.enabled": True}, "raises ValueError"),
    ({"grpo.reward_shaping.enabled": True, "grpo.reward_shaping.stop_properly_penalty_coef": 1.5}, "in [0, 1]"),
    ({"grpo.reward_shaping.enabled": True, "grpo.reward_shaping.overlong_buffer_length": 2,
      "grpo.reward_shaping.overlong_buffer_penalty": -1.0, "grpo.reward_shaping.max_response_length": 5}, ">= 0"),
])
def test_reward_shaping_the_trainer_refuses(tmp_path, settings, words):
    with pytest.raises(AdvcliError, match=re.escape(words)):
        _run(tmp_path, settings)


@pytest.mark.parametrize("settings, words", [
    ({"grpo.overlong_filtering": True}, "does not read at this release"),
    ({"grpo.seq_logprob_error_threshold": 2.0, "grpo.adv_estimator.name": "reinforce_plus_plus"},
     "response_mask 0 in the input"),
    ({"ppo.adv_estimator.name": "gae", "ppo.seq_logprob_error_threshold": 1.5}, "response_mask 0 in the input"),
])
def test_row_filters_run_on_the_masks_given(tmp_path, settings, words):
    """overlong_filtering and seq_logprob_error_threshold only zero rows' sample mask (grpo.py L3136-3145,
    L2581-2618 @7ea279ab); the estimator sees token_mask·sample_mask (L3289-3299), the input's response_mask here:
    the numbers are those of the same run without the key (at 7ea279a grpo reads no mask at all), and the run says
    which. They were refused."""
    import advcli

    base = {k: v for k, v in settings.items() if not k.endswith(("filtering", "threshold"))}
    with_key, without = _run(tmp_path, settings), _run(tmp_path, base)
    assert with_key == without
    src = _write(tmp_path / "note.parquet")
    res = advcli.run(str(src), str(tmp_path / "note_out.parquet"), flavor="nemo@7ea279a", device="cpu", force=True,
                     settings=settings)
    assert words in res.estimator_note, res.estimator_note


def test_advantage_clip_low_above_high_gives_high(tmp_path):
    """_clip_grpo_advantages (grpo.py L2302-2313 @7ea279ab): clamp(min=lo) then clamp(max=hi), no check of the
    pair: with lo > hi every advantage is hi (it was refused)."""
    out = _run(tmp_path, {"grpo.advantage_clip_low": 1.0, "grpo.advantage_clip_high": 0.5})
    assert all(x == 0.5 for row in out["advantages"] for x in row)


def test_overlong_buffer_length_0_is_refused(tmp_path):
    """apply_reward_shaping divides every row's excess length by it in Python ints (reward_functions.py L165):
    ZeroDivisionError."""
    with pytest.raises(AdvcliError, match="overlong_buffer_length=0"):
        _run(tmp_path, {"grpo.reward_shaping.enabled": True, "grpo.reward_shaping.overlong_buffer_length": 0,
                        "grpo.reward_shaping.overlong_buffer_penalty": 1.0,
                        "grpo.reward_shaping.max_response_length": 512})


@pytest.mark.parametrize("settings,named", [
    ({"grpo.invalid_tool_call_advantage": -1.0}, "grpo.invalid_tool_call_advantage=-1.0"),
    ({"grpo.length_penalty.longest_total_penalty": 0.5}, "grpo.length_penalty.longest_total_penalty"),
])
def test_loop_steps_advcli_does_not_reproduce_are_refused(tmp_path, settings, named):
    """What the loop does from information a Parquet input does not hold is refused with what to do;
    advcli.rewards_shaped (the rewards given are after it, as in NeMo's dump) runs the reward and mask steps."""
    with pytest.raises(AdvcliError, match=named.replace(".", r"\.")):
        _run(tmp_path, settings)
    if "invalid_tool_call_advantage" not in named:
        _run(tmp_path, {**settings, "advcli.rewards_shaped": True})


def test_unknown_key_suggests(tmp_path):
    with pytest.raises(AdvcliError, match="grpo.adv_estimator.normalize_rewards"):
        _run(tmp_path, {"grpo.adv_estimator.normalise_rewards": True})


# ------------------------------------------------------------------- tiny and empty batches
def _run_small(tmp_path, rows, settings):
    """rows: (prompt_id, reward, mask, values); log-probs are equal (no KL)."""
    from _flavor_rows import run_rows

    dicts = [dict(prompt_id=p, reward=r, mask=m, old=[-0.5] * len(m), ref=[-0.5] * len(m), values=v)
             for p, r, m, v in rows]
    return run_rows(tmp_path, dicts, "nemo", settings)[0]


def test_reinforce_plus_plus_without_a_valid_token_is_nan(tmp_path):
    """advantage_estimator.py L262-265: μ = Σ a·M / Σ M with no epsilon: Σ M = 0 gives 0/0 = NaN at
    every position (masked positions are not zeroed). (advcli gave ±5000 with Σ M + 1e-8.)"""
    from _flavor_rows import assert_rows_close

    nan = float("nan")
    got = _run_small(tmp_path, [("p", 1.0, [0, 0], [0.0, 0.0]), ("p", 0.0, [0], [0.0])],
                     {"grpo.adv_estimator.name": "reinforce_plus_plus"})
    assert_rows_close(got["advantages"], [[nan, nan], [nan]])


def test_reinforce_plus_plus_baseline_keeps_nemo_s_float32_residue(tmp_path):
    """minus_baseline takes calculate_baseline_and_std_per_prompt's mean (advantage_estimator.py L235-242,
    utils.py L104-198 @7ea279ab): one matmul per group, which leaves ±6e-8 on a group of six 0.9 rewards; with
    KL in the reward the batch whitening divides by a std the KL terms make small, so those bits show (1e-4
    off with an exact group mean). The reference makes NeMo's calls on this machine."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, L, beta = 11, 3, 0.01
    lp = (-rng.exponential(1.0, (n, L))).astype(np.float32)
    ref = (lp + rng.normal(0, 0.05, (n, L))).astype(np.float32)
    pids = ["a"] * 4 + ["b"] + ["c"] * 6
    rewards = np.float32([0.9] * 4 + [0.0887] + [0.9] * 6)
    src = os.path.join(tmp_path, "in.parquet")
    pq.write_table(pa.table({"prompt_id": pids, "reward": pa.array(rewards),
                             "response_mask": pa.array([[1] * L] * n, pa.list_(pa.int8())),
                             "old_log_probs": pa.array(lp.tolist(), pa.list_(pa.float32())),
                             "ref_log_probs": pa.array(ref.tolist(), pa.list_(pa.float32()))}), src)
    settings = {"grpo.adv_estimator.name": "reinforce_plus_plus", "loss_fn.use_kl_in_reward": True,
                "loss_fn.reference_policy_kl_type": "k1", "loss_fn.reference_policy_kl_penalty": beta}
    got = np.array(run_table(src, os.path.join(tmp_path, "o.parquet"), PINNED, settings)[0]
                   .column("advantages").to_pylist(), dtype=np.float32)
    r = torch.tensor(rewards)
    base = torch.empty(n)
    for g in ("a", "b", "c"):
        rows = [i for i, p in enumerate(pids) if p == g]
        v = r[rows]
        if len(rows) > 1:  # calculate_baseline_and_std_per_prompt, leave_one_out_baseline=False
            base[rows] = torch.matmul(torch.ones(len(rows), len(rows)), v) / torch.tensor(float(len(rows)))
        else:
            base[rows] = v
    mask = torch.ones(n, L)
    adv = (r - base).unsqueeze(-1).expand(mask.shape)
    kl = -(torch.tensor(ref) - torch.tensor(lp)).clamp(-20.0, 20.0)  # calculate_kl k1 (utils.py L42-101)
    adv = adv - beta * kl.clamp(-10.0, 10.0)
    mean = (adv * mask).sum() / mask.sum()
    var = ((adv - mean).pow(2) * mask).sum() / mask.sum()
    want = ((adv - mean) * var.clamp(min=1e-8).rsqrt()).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reinforce_plus_plus_all_equal_is_exactly_zero(tmp_path):
    """minus_baseline off, every a = 1: μ = 3/3 = 1 exactly, σ² = 0 → max(σ², 1e-8): A = 0. A mean
    over Σ M + 1e-8 would leave (1 − 3/(3 + 1e-8))·1e4 ≈ 3.3e-5."""
    got = _run_small(tmp_path, [("p", 1.0, [1, 1, 0], [0.0] * 3), ("q", 1.0, [1], [0.0])],
                     {"grpo.adv_estimator.name": "reinforce_plus_plus", "grpo.adv_estimator.minus_baseline": False})
    assert got["advantages"] == [[0.0, 0.0, 0.0], [0.0]]


def test_raw_reward_divides_by_max_n_1(tmp_path):
    """L292-293: μ = Σ a·M / max(Σ M, 1). One valid token (r = 1): μ = 1, σ² = 0 → rstd = 1e4;
    A = (r − 1)·1e4 everywhere (not masked): row 0 → 0 exactly, row 1 (r = 0.5) → −5000."""
    got = _run_small(tmp_path, [("p", 1.0, [1, 0], [0.0, 0.0]), ("q", 0.5, [0], [0.0])],
                     {"ppo.adv_estimator.name": "raw_reward"})
    assert got["advantages"][0] == [0.0, 0.0]
    assert got["advantages"][1] == pytest.approx([-5000.0], rel=1e-6)


def test_gae_whitening_of_one_valid_token(tmp_path):
    """_reward_whiten with one mask=1 token: masked_var multiplies a variance of exactly 0 by
    1/(1 − 1) = inf → NaN at that token; masked_fill(~mask, 0) then zeroes every other position
    (L493-495). GAE by hand: δ_0 = 1 − 0.25 = 0.75 (the masked token after it carries nv = g = 0);
    returns = A + V = [1.0, 0.5] and [0 + 0.5]."""
    from _flavor_rows import assert_rows_close

    got = _run_small(tmp_path, [("p", 1.0, [1, 0], [0.25, 0.5]), ("q", 0.0, [0], [0.5])],
                     {"ppo.adv_estimator.name": "gae"})
    assert_rows_close(got["advantages"], [[float("nan"), 0.0], [0.0]])
    assert_rows_close(got["returns"], [[1.0, 0.5], [0.5]])


@pytest.mark.parametrize("order", [0, 1])
def test_the_current_key_wins_over_its_old_name_in_any_order(order):
    """grpo_math_1B.yaml's adv_estimator.normalize_rewards is ${grpo.normalize_rewards}: an explicit value of the
    current key beats the interpolated old one, so given both, the current one decides whatever the order."""
    from advcli.flavors import resolve

    pairs = [("grpo.normalize_rewards", False), ("grpo.adv_estimator.normalize_rewards", True)]
    cfg, _ = resolve("nemo", pairs if order == 0 else pairs[::-1])
    assert cfg["estimator"]["normalize"] is True


def test_dapo_overlong_counts_the_first_assistant_message_of_a_multi_turn_row(tmp_path):
    """NeMo's overlong length is the first assistant message's (llm_message_utils.py L773-774 @7ea279ab), not the
    row's: a row of 10 assistant tokens, 20 tool tokens (mask 0) and 10 more assistant tokens has n = 10 ≤ 30 − 10:
    no penalty. One group, rewards [1, 0, 0, 0], GRPO with the leave-one-out baseline: by hand 1 for row 0 (its
    peers' std is 0: not divided) and −(1/3)/(√(1/3) + 1e-6) for the others. Counting the row's 40 tokens would give
    row 0 a penalty of −2 (reward −1) and flip every sign."""
    from _flavor_rows import run_rows

    rows = [dict(prompt_id="a", reward=1.0, mask=[1] * 10 + [0] * 20 + [1] * 10)] + \
        [dict(prompt_id="a", reward=0.0, mask=[1] * 10) for _ in range(3)]
    settings = {"grpo.adv_estimator.name": "grpo", "grpo.reward_shaping.enabled": True,
                "grpo.reward_shaping.overlong_buffer_length": 10, "grpo.reward_shaping.overlong_buffer_penalty": 1.0,
                "grpo.reward_shaping.max_response_length": 30}
    got = run_rows(tmp_path, rows, "nemo", settings)[0]["advantages"]
    other = -(1 / 3) / ((1 / 3) ** 0.5 + 1e-6)
    assert [g[0] for g in got] == pytest.approx([1.0, other, other, other], abs=1e-5)


# ---------------------------------------------------------------- the GitHub releases v0.5.0-v0.7.0
def test_release_tags_gdpo_sums_the_numbered_reward_columns(tmp_path):
    """NeMo RL v0.6.0 and v0.7.0 take gdpo's components from the keys reward1, reward2, ... sorted by number
    (get_gdpo_reward_component_keys, nemo_rl/algorithms/utils.py L35-38 @v0.7.0); #2597 (in 7ea279ab) made them
    the reward/* keys. The same components under the other names give 7ea279a's numbers (EXPECTED, NeMo's own
    classes); a reward/* column is not a component there, nor reward1 at 7ea279a."""
    src = _write(os.path.join(tmp_path, "in.parquet"))
    t = pq.read_table(src)
    t = t.rename_columns([{"reward/acc": "reward1", "reward/fmt": "reward2"}.get(c, c) for c in t.column_names])
    t = t.append_column("reward/zz", pa.array([9.0] * t.num_rows, pa.float32()))
    pq.write_table(t, src)
    settings = {"grpo.adv_estimator.name": "gdpo", "grpo.adv_estimator.use_leave_one_out_baseline": False}
    for release in ("0.6.0", "v0.7.0"):
        got, _ = run_table(src, os.path.join(tmp_path, "o.parquet"), f"nemo@{release}", settings)
        _close(output_lists(got)["advantages"], _rows_of(EXPECTED["gdpo_noloo"]), atol=5e-6)
    with pytest.raises(AdvcliError, match="at least 2 reward components"):
        run_table(src, os.path.join(tmp_path, "o.parquet"), PINNED, settings)  # only reward/zz is reward/*


def test_numbered_components_sort_by_their_number():
    from advcli.pipeline.plan import expand_components

    names = ["reward10", "reward2", "reward/a", "reward1", "reward1x", "reward", "xreward3"]
    assert expand_components(["reward{n}"], names, "f") == ["reward1", "reward2", "reward10"]


@pytest.mark.parametrize("release,key", [("0.5.0", "grpo.advantage_clip_low"), ("v0.6.0", "grpo.advantage_clip_low"),
                                         ("0.7.0", "grpo.adv_estimator.reward_weights")])
def test_release_tags_run_without_the_keys_they_never_read(tmp_path, release, key):
    """NeMo RL's configs load any key (pydantic extra='allow', or TypedDicts before): a release whose code never
    reads one runs as if it were not set. Clipping came with #2686 (v0.7.0), gdpo's weights with #2680 (after
    it): advcli runs the release's numbers and says the key had no effect."""
    value = -0.5 if "clip" in key else [1.0, 0.5]
    settings = {key: value}
    if "weights" in key:
        settings["grpo.adv_estimator.name"] = "grpo"
    src = _write(os.path.join(tmp_path, "in.parquet"))
    got, result = run_table(src, os.path.join(tmp_path, "o.parquet"), f"nemo@{release}", settings)
    _close(output_lists(got)["advantages"], _rows_of(EXPECTED["grpo_default"]))
    assert f"{key}=" in result.estimator_note and "has no effect" in result.estimator_note, result.estimator_note


@pytest.mark.parametrize("release,settings,words", [
    ("0.6.0", {"grpo.adv_estimator.name": "opd"}, "knows grpo, gdpo and reinforce_plus_plus"),
    ("0.5.0", {"ppo.adv_estimator.name": "gae"}, "no PPO trainer"),
    ("v0.6.0", {"ppo.adv_estimator.name": "raw_reward"}, "no PPO trainer")])
def test_release_tags_refuse_what_they_would_not_run(release, settings, words):
    from advcli.flavors import resolve

    with pytest.raises(AdvcliError, match=words):
        resolve(f"nemo@{release}", list(settings.items()))
    resolve("nemo", list(settings.items()))


def test_an_empty_response_keeps_its_reward_in_the_group(tmp_path):
    """NeMo's GRPO takes one reward per sample (GRPOAdvantageEstimator → calculate_baseline_and_std_per_prompt,
    advantage_estimator.py L69-98, utils.py L104 @7ea279ab) and never looks at its tokens: a response with no
    generated token (an empty mask list) still counts with its reward. Group [0.3, 0.9 (empty), 0.1], leave-one-out
    baseline and std: row 2 (0.1) gets (0.1 − 0.6)/(std(0.3, 0.9) + 1e-6) = −0.5/0.4242641 = −1.1785; it got
    0.1 − 0.3 (the empty row scored 0) before."""
    rows = [("g", 0.3, 0, 0, [1, 1], [0, 0], [0, 0], [0, 0], [0, 0]), ("g", 0.9, 0, 0, [], [], [], [], []),
            ("g", 0.1, 0, 0, [1], [0], [0], [0], [0])]
    src = _write(os.path.join(tmp_path, "e.parquet"), rows)
    got, _ = run_table(src, os.path.join(tmp_path, "o.parquet"), PINNED, {})
    adv = output_lists(got)["advantages"]
    s02 = (0.18 / 1) ** 0.5  # leave-one-out of row 2: {0.3, 0.9}, mean 0.6, unbiased std sqrt(0.18)
    assert adv[2] == [pytest.approx((0.1 - 0.6) / (s02 + 1e-6), rel=1e-5)]
    s01 = (0.32 / 1) ** 0.5  # row 0: {0.9, 0.1}
    assert adv[0] == [pytest.approx((0.3 - 0.5) / (s01 + 1e-6), rel=1e-5)] * 2
    assert adv[1] == []
