"""Run statistics (advcli.stats) checked against figures computed independently from the output file
with numpy, using verl's definitions (verl/trainer/ppo/metric_utils.py::compute_data_metrics and
ray_trainer.py::apply_kl_penalty @1dda039b)."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import advcli
from advcli import stats as st


def _write(path, cols):
    pq.write_table(pa.table(cols), path)
    return str(path)


def _dump(tmp_path):
    """2 steps, groups of 3 scattered, interior and trailing masked spans, one empty (aborted) row."""
    rng = np.random.default_rng(7)
    rows = 18
    lens = rng.integers(1, 9, rows)
    lens[5] = 0
    masks, lps, refs, vals = [], [], [], []
    for i, n in enumerate(lens):
        m = (rng.random(n) > 0.25).astype(np.int8)
        if n:
            m[0] = 1
        masks.append(m.tolist())
        lps.append((-rng.random(n) * 2).astype(np.float32).tolist())
        refs.append((-rng.random(n) * 2).astype(np.float32).tolist())
        vals.append(rng.normal(size=n).astype(np.float32).tolist())
    pid = [f"p{(i % 6)}" for i in range(rows)]  # groups of 3, rows not contiguous
    step = [0 if (i % 6) < 3 else 1 for i in range(rows)]
    reward = rng.choice([0.0, 1.0, 0.5], rows).astype(np.float32)
    path = _write(tmp_path / "in.parquet", {
        "prompt_id": pid, "step": pa.array(step, pa.int64()), "reward": pa.array(reward, pa.float32()),
        "response_mask": pa.array(masks, pa.list_(pa.int8())),
        "old_log_probs": pa.array(lps, pa.list_(pa.float32())), "ref_log_probs": pa.array(refs, pa.list_(pa.float32())),
        "values": pa.array(vals, pa.list_(pa.float32()))})
    return path


def _flat(col):
    return [np.asarray(x, dtype=np.float64) for x in col.to_pylist()]


def _expected_block(rows, inp, out, beta, with_values=False):
    """verl compute_data_metrics over the rows ``rows`` (indices), from the files."""
    reward = inp.column("reward").to_numpy().astype(np.float64)
    masks = [np.asarray(m, bool) for m in inp.column("response_mask").to_pylist()]
    lengths = np.array([len(m) for m in masks])
    tlr = _flat(out.column("token_level_rewards"))
    adv = _flat(out.column("advantages"))
    ret = _flat(out.column("returns"))
    na = [i for i in rows if lengths[i] > 0]
    score = reward[na]  # token_level_scores.sum(-1): the reward sits at L_i − 1
    seq_reward = np.array([tlr[i].sum() for i in na])
    va = np.concatenate([adv[i][masks[i]] for i in rows])
    vr = np.concatenate([ret[i][masks[i]] for i in rows])
    lp = _flat(inp.column("old_log_probs"))
    ref = _flat(inp.column("ref_log_probs"))
    kl_row = [((lp[i] - ref[i]) * masks[i]).sum() / (masks[i].sum() + 1e-8) for i in rows]
    e = {"critic/score/mean": score.mean(), "critic/score/max": score.max(), "critic/score/min": score.min(),
         "critic/rewards/mean": seq_reward.mean(), "critic/rewards/max": seq_reward.max(),
         "critic/rewards/min": seq_reward.min(),
         "critic/advantages/mean": va.mean(), "critic/advantages/max": va.max(), "critic/advantages/min": va.min(),
         "critic/returns/mean": vr.mean(), "critic/returns/max": vr.max(), "critic/returns/min": vr.min(),
         "response_length/mean": lengths[rows].mean(), "response_length/max": lengths[rows].max(),
         "response_length/min": lengths[rows].min(),
         "actor/reward_kl_penalty": float(np.mean(kl_row)), "actor/reward_kl_penalty_coeff": beta}
    if with_values:
        v = _flat(inp.column("values"))
        vv = np.concatenate([v[i][masks[i]] for i in rows])
        e.update({"critic/values/mean": vv.mean(), "critic/values/max": vv.max(), "critic/values/min": vv.min(),
                  "critic/vf_explained_var": 1 - np.var(vr - vv, ddof=1) / (np.var(vr, ddof=1) + 1e-5)})
    return e, va


@pytest.mark.parametrize("chunk_rows", [4, 1000])
def test_grpo_metrics_per_step_and_overall_match_output(tmp_path, chunk_rows):
    src = _dump(tmp_path)
    out_path = tmp_path / "out.parquet"
    res = advcli.run(src, out_path, flavor="verl", chunk_rows=chunk_rows, force=True,
                     settings={"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True,
                               "algorithm.kl_ctrl.kl_coef": 0.1})
    inp, out = pq.read_table(src), pq.read_table(out_path)
    steps = inp.column("step").to_numpy()
    for s, entry in zip((0, 1), res.per_step):
        assert entry["step"] == s
        exp, _ = _expected_block(list(np.nonzero(steps == s)[0]), inp, out, 0.1)
        for k, v in exp.items():
            assert entry[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    exp, va = _expected_block(list(range(inp.num_rows)), inp, out, 0.1)
    m = res.metrics
    for k, v in exp.items():
        assert m[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    # advcli's additions: exact token quantiles (row-constant advantages) and histogram
    assert m["critic/advantages/quantiles_exact"] is True
    for q in st.QUANTILES:
        assert m[f"critic/advantages/p{q}"] == pytest.approx(np.quantile(va, q / 100), abs=1e-6), q
    h = res.histograms["advantages"]
    counts, _ = np.histogram(va, bins=len(h["counts"]), range=(va.min(), va.max()))
    assert h["counts"] == counts.tolist() and sum(h["counts"]) == va.size == m["critic/advantages/count"]
    assert m["response/aborted_ratio"] == pytest.approx(1 / 18)
    # group figures: 6 groups of 3, solve rate = share of rows with reward > 0
    reward = inp.column("reward").to_numpy()
    assert m["groups/count"] == 6 and m["groups/size/mean"] == 3 and m["groups/singleton_share"] == 0
    assert m["groups/solve_rate"] == pytest.approx(np.mean(reward > 0))
    assert res.histograms["group_size"]["counts"] == [0, 0, 6]
    json.dumps({"m": res.metrics, "p": res.per_step, "h": res.histograms, "d": res.diagnostics}, allow_nan=False)


def test_gae_values_and_explained_variance(tmp_path):
    src = _dump(tmp_path)
    out_path = tmp_path / "out.parquet"
    res = advcli.run(src, out_path, flavor="verl", chunk_rows=5, force=True,
                     settings={"algorithm.adv_estimator": "gae", "algorithm.gamma": 0.9, "algorithm.lam": 0.8,
                               "algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.05})
    inp, out = pq.read_table(src), pq.read_table(out_path)
    exp, va = _expected_block(list(range(inp.num_rows)), inp, out, 0.05, with_values=True)
    for k, v in exp.items():
        assert res.metrics[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    # token-varying advantages: the reservoir holds every token of this small run, so quantiles are exact
    assert res.metrics["critic/advantages/quantiles_exact"] is True
    for q in st.QUANTILES:
        assert res.metrics[f"critic/advantages/p{q}"] == pytest.approx(np.quantile(va, q / 100), abs=1e-6)
    h = res.histograms["advantages"]
    assert sum(h["counts"]) + h["underflow"] + h["overflow"] == va.size
    e = np.asarray(h["edges"])
    inside = va[(va >= e[0]) & (va <= e[-1])]
    assert h["counts"] == np.histogram(inside, bins=e)[0].tolist()


def test_padded_response_length_is_last_valid_position(tmp_path):
    """Fixed-width lists: verl's response length (attention mask) is the last mask=1 position + 1."""
    mask = pa.array([[1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], pa.list_(pa.int8(), 5))
    src = _write(tmp_path / "p.parquet", {"prompt_id": ["a", "a", "b", "b"],
                                          "reward": pa.array([1, 0, 1, 1], pa.float32()), "response_mask": mask})
    res = advcli.run(src, tmp_path / "o.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    assert res.metrics["response_length/mean"] == pytest.approx((2 + 3 + 5 + 1) / 4)
    assert res.metrics["response_length/max"] == 5 and res.metrics["response_length/min"] == 1


def test_weighted_quantiles_equal_numpy_on_expanded_values():
    v = torch.tensor([0.5, -1.0, 2.0, 0.0])
    w = torch.tensor([3, 1, 2, 0])
    expanded = np.repeat(v.numpy(), w.numpy())
    q = st.quantiles(v, w)
    for p in st.QUANTILES:
        assert q[f"p{p}"] == pytest.approx(np.quantile(expanded, p / 100))


def test_reservoir_is_uniform_bounded_and_chunk_independent():
    x = torch.arange(10_000, dtype=torch.float64)
    a, b = st._Reservoir(500), st._Reservoir(500)
    a.add(x, torch.arange(10_000))
    for lo in range(0, 10_000, 733):  # other chunking, same global indices
        hi = min(lo + 733, 10_000)
        b.add(x[lo:hi], torch.arange(lo, hi))
    assert a.values.numel() == 500
    assert sorted(a.values.tolist()) == sorted(b.values.tolist())
    assert abs(float(a.values.mean()) - 4999.5) < 400  # a uniform sample of 0..9999
