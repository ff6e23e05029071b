"""Run statistics (advcli.figures) checked against figures computed independently from the output file
with numpy, using verl's definitions (verl/trainer/ppo/metric_utils.py::compute_data_metrics and
ray_trainer.py::apply_kl_penalty @1dda039b)."""
import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_main

import advcli
from advcli import figures as st
from advcli.ops.ragged import Ragged
from advcli.pipeline.observe import RunObserver


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
    for _i, n in enumerate(lens):
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
    # per step too, as verl logs them every step (row 5, the empty one, is in step 1: p5)
    lens = np.array([len(x) for x in inp.column("response_mask").to_pylist()])
    for s, entry in zip((0, 1), res.per_step):
        L = lens[steps == s]
        assert entry["response/aborted_ratio"] == pytest.approx(np.mean(L == 0))
        assert entry["response_length_non_aborted/mean"] == pytest.approx(L[L > 0].mean())
        assert entry["response_length_non_aborted/min"] == L[L > 0].min()
    assert res.per_step[1]["response/aborted_ratio"] == pytest.approx(1 / 9)
    # group figures: 6 groups of 3, solved share = share of rows with reward > 0
    reward = inp.column("reward").to_numpy()
    assert m["groups/count"] == 6 and m["groups/size/mean"] == 3 and m["groups/singleton_share"] == 0
    assert m["groups/solved_share"] == pytest.approx(np.mean(reward > 0))
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


# ------------------------------------------------------------------------ row-level: rows vs tokens
def _mixed_dump(path, padded=False, seed=5, trl=False):
    """3 steps, groups of 1..4 (rows scattered), interior and trailing masked spans, rows with no
    valid token and empty rows (fixed-width lists with mask-0 padding when ``padded``). ``trl``: no
    id or step column (TRL groups consecutive rows) and missing (NaN) rewards in some rows."""
    rng = np.random.default_rng(seed)
    rows = 60
    pid = [f"p{int(k)}" for k in rng.integers(0, 22, rows)]
    step = [int(p[1:]) % 3 for p in pid]
    lens = rng.integers(0, 11, rows)
    width = int(lens.max())
    masks, lps, refs = [], [], []
    for i, n in enumerate(lens):
        m = (rng.random(n) > 0.3).astype(np.int8)
        if i % 9 == 4:
            m[:] = 0  # no valid token
        if padded:
            m = np.concatenate([m, np.zeros(width - n, np.int8)])
        masks.append(m.tolist())
        lps.append((-rng.random(len(m)) * 2).astype(np.float32).tolist())
        refs.append((-rng.random(len(m)) * 2).astype(np.float32).tolist())
    ltype = (lambda t: pa.list_(t, width)) if padded else pa.list_
    reward = rng.choice([0.0, 1.0, 0.25, 0.7], rows).astype(np.float32)
    cols = {"prompt_id": pid, "step": pa.array(step, pa.int64())}
    if trl:
        cols = {}
        reward[[1, 8, 9, 10, 11, 30]] = np.nan  # rows 8-11: a whole group unscored
    return _write(path, {
        **cols, "reward": pa.array(reward, pa.float32()), "response_mask": pa.array(masks, ltype(pa.int8())),
        "old_log_probs": pa.array(lps, ltype(pa.float32())), "ref_log_probs": pa.array(refs, ltype(pa.float32()))})


ROW_CONFIGS = {
    # verl grpo, KL in the reward (token-varying rewards, row-constant advantages), 3 steps
    "verl_grpo_kl": ("verl", {"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True,
                              "algorithm.kl_ctrl.kl_coef": 0.1}),
    # whitened per step, clipped, re-masked, returns = the final advantages
    "whiten_clip": ("advcli", {"estimator.name": "rloo", "advantage.whiten": True, "advantage.clip": 0.8,
                               "advantage.remask": True, "advantage.returns": "advantages"}),
    # whitened (centre only), returns the estimator's (unwhitened) ones, unmasked output
    "whiten_returns_estimator": ("advcli", {"estimator.name": "grpo_loo", "advantage.whiten": True,
                                            "advantage.whiten_scale": False, "advantage.clip": [-0.3, 0.5]}),
    # group z-score of the reward: the group of one gets NaN advantages
    "nan_rows": ("advcli", {"estimator.name": "grpo", "reward.normalize.mean": "group",
                            "reward.normalize.std": "group"}),
    "opo": ("verl", {"algorithm.adv_estimator": "opo"}),
    # TRL: missing rewards (NaN) allowed, nan-aware group statistics, unmasked output, KL in the reward
    "trl_nan_rewards": ("trl", {"trainer": "grpo", "num_generations": 4}),
    "trl_rloo": ("trl", {"trainer": "rloo", "num_generations": 4}),
}


def _run_both(tmp_path, monkeypatch, src, flavor, settings, chunk_rows=7):
    """The run with the row-constant statistics, then with the token-by-token ones."""
    calls = {"rows": 0, "tokens": 0}
    row_chunk, tok_chunk = st.FigureCollector.add_row_values, st.FigureCollector.add_partials

    def rows(self, *a, **k):
        calls["rows"] += 1
        return row_chunk(self, *a, **k)

    def toks(self, *a, **k):
        calls["tokens"] += 1
        return tok_chunk(self, *a, **k)
    monkeypatch.setattr(st.FigureCollector, "add_row_values", rows)
    monkeypatch.setattr(st.FigureCollector, "add_partials", toks)
    fast = advcli.run(src, tmp_path / "fast.parquet", flavor=flavor, settings=settings, chunk_rows=chunk_rows,
                      force=True, device="cpu")
    assert calls["rows"] > 1 and calls["tokens"] == 0  # the row path was taken, chunk by chunk
    monkeypatch.setattr(RunObserver, "ROW_PATH", False)
    slow = advcli.run(src, tmp_path / "slow.parquet", flavor=flavor, settings=settings, chunk_rows=chunk_rows,
                      force=True, device="cpu")
    assert calls["tokens"] > 1
    return fast, slow


def _same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and b is not None:
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), where
    else:
        assert a == b, where


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", list(ROW_CONFIGS))
def test_row_path_gives_the_token_path_figures(tmp_path, monkeypatch, name, padded):
    """Every figure of the row-constant path (metrics, per-step blocks, histograms, diagnostics) equals
    the token-by-token one on the same run: per-step scopes, whitening, clip, NaN rows, rows without
    valid tokens, empty rows, fixed-width lists."""
    flavor, settings = ROW_CONFIGS[name]
    src = _mixed_dump(tmp_path / "in.parquet", padded=padded, trl=flavor == "trl")
    fast, slow = _run_both(tmp_path, monkeypatch, src, flavor, settings)
    assert fast.metrics["critic/advantages/quantiles_exact"] is True
    assert len(fast.per_step) == (1 if flavor == "trl" else 3)
    _same(fast.metrics, slow.metrics, "metrics")
    _same(fast.per_step, slow.per_step, "per_step")
    _same(fast.histograms, slow.histograms, "histograms")
    _same(fast.diagnostics, slow.diagnostics, "diagnostics")


def _valid_tokens(out_path, col):
    t = pq.read_table(out_path)
    masks = [np.asarray(m, bool) for m in t.column("response_mask").to_pylist()]
    vals = [np.asarray(a, np.float64) for a in t.column(col).to_pylist()]
    return np.concatenate([v[m] for v, m in zip(vals, masks)]), masks, vals


def test_row_path_nan_rows_against_the_file(tmp_path, monkeypatch):
    """NaN advantages (a group of one under a group z-score): count/nonfinite/mean/min/max, quantiles
    and histogram of the finite valid tokens, the rows flagged, all from the output file."""
    flavor, settings = ROW_CONFIGS["nan_rows"]
    src = _mixed_dump(tmp_path / "in.parquet")
    fast, _ = _run_both(tmp_path, monkeypatch, src, flavor, settings, chunk_rows=5)
    va, masks, vals = _valid_tokens(tmp_path / "fast.parquet", "advantages")
    fin = va[np.isfinite(va)]
    assert 0 < fin.size < va.size  # some NaN tokens, some finite ones
    m = fast.metrics
    assert m["critic/advantages/count"] == fin.size and m["critic/advantages/nonfinite"] == va.size - fin.size
    assert m["critic/advantages/mean"] == pytest.approx(fin.mean(), rel=1e-9, abs=1e-12)
    assert m["critic/advantages/std"] == pytest.approx(fin.std(), rel=1e-9, abs=1e-12)
    assert (m["critic/advantages/min"], m["critic/advantages/max"]) == (fin.min(), fin.max())
    for q in st.QUANTILES:
        assert m[f"critic/advantages/p{q}"] == pytest.approx(np.quantile(fin, q / 100), abs=1e-9)
    h = fast.histograms["advantages"]
    assert h["counts"] == np.histogram(fin, bins=st.BINS, range=(fin.min(), fin.max()))[0].tolist()
    bad = [i for i, (v, mk) in enumerate(zip(vals, masks)) if (~np.isfinite(v[mk])).any()]
    d = next(x for x in fast.diagnostics if x["kind"] == "nonfinite_advantages")
    assert d["count"] == len(bad) > 0 and [e["row"] for e in d["examples"]] == bad[:10]


def test_row_path_stops_on_advantages_that_are_not_the_row_values(tmp_path, monkeypatch):
    """The per-chunk check of the row path's assumption (one token per row against the row value)."""
    src = _mixed_dump(tmp_path / "in.parquet")
    add = RunObserver.add
    monkeypatch.setattr(RunObserver, "add", lambda self, row0, layout, mask, adv, ret, tlr, tok, *seen:
                        add(self, row0, layout, mask, adv + 0.001, ret, tlr, tok, *seen))
    with pytest.raises(RuntimeError, match="internal"):
        advcli.run(src, tmp_path / "o.parquet", flavor="verl", settings={"algorithm.adv_estimator": "grpo"},
                   force=True, device="cpu")


# ---------------------------------------------------------------------------- token-varying path
def _token_chunks(seed=3, rows=90, scopes=3, nonfinite=True):
    """Ragged rows with token-varying values (some NaN/±inf), rows with no valid token, empty rows."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 40, (rows,), generator=g)
    lens[7] = 0
    T = int(lens.sum())
    mask = (torch.rand(T, generator=g) > 0.25).to(torch.float32)
    lay = Ragged.from_lengths(lens)
    mask[lay.offsets[11]:lay.offsets[12]] = 0  # row 11: no valid token
    adv = torch.randn(T, generator=g, dtype=torch.float32)
    if nonfinite:
        adv[torch.randint(0, T, (6,), generator=g)] = float("nan")
        adv[torch.randint(0, T, (2,), generator=g)] = float("inf")
    ret = adv * 2 + 0.5
    vals = torch.randn(T, generator=g, dtype=torch.float32)
    tlr = torch.randn(T, generator=g, dtype=torch.float32)
    codes = torch.randint(0, scopes, (rows,), generator=g)
    return lens, mask, adv, ret, vals, tlr, codes


def _feed(lens, mask, adv, ret, vals, tlr, codes, cuts, reservoir=st.RESERVOIR):
    from advcli.ops.groups import GroupIndex

    R = lens.numel()
    rs = st.FigureCollector(R, reservoir=reservoir)
    lay = Ragged.from_lengths(lens)
    valid = lay.row_sum((mask > 0).to(torch.int64))
    rs.set_rows(raw_score=torch.zeros(R), score=torch.zeros(R), scopes=GroupIndex.from_codes(codes),
                step_values=list(range(int(codes.max()) + 1)), groups=None, valid_len=valid, has_values=True)
    bounds = [0] + [c for c in cuts if 0 < c < R] + [R]
    for a, b in itertools.pairwise(bounds):
        t0, t1 = int(lay.offsets[a]), int(lay.offsets[b])
        rs.add_chunk(a, Ragged.from_lengths(lens[a:b]), mask[t0:t1], adv[t0:t1], ret[t0:t1], tlr[t0:t1],
                     vals[t0:t1])
    return rs


def _brute(x, m, scope_tok, s=None):
    sel = m & ((scope_tok == s) if s is not None else True)
    v = x[sel].astype(np.float64)
    f = v[np.isfinite(v)]
    return {"count": f.size, "nonfinite": v.size - f.size, "mean": f.mean() if f.size else None,
            "min": f.min() if f.size else None, "max": f.max() if f.size else None,
            "std": f.std() if f.size else None}


def test_token_path_figures_per_scope_against_brute_force():
    lens, mask, adv, ret, vals, tlr, codes = _token_chunks()
    rs = _feed(lens, mask, adv, ret, vals, tlr, codes, cuts=[5, 6, 30, 31, 70])
    row_of = np.repeat(np.arange(lens.numel()), lens.numpy())
    scope_tok = codes.numpy()[row_of]
    m = mask.numpy() > 0
    for acc, x in ((rs.adv, adv.numpy()), (rs.ret, ret.numpy()), (rs.val, vals.numpy()),
                   (rs.ret_minus_val, ret.numpy().astype(np.float64) - vals.numpy())):
        for s in (None, 0, 1, 2):
            got, want = acc.figures(s), _brute(x, m, scope_tok, s)
            assert got["count"] == want["count"] and got["nonfinite"] == want["nonfinite"], s
            for k in ("mean", "min", "max", "std"):
                assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-14), (s, k)
    # per row: valid tokens, Σ token_level_rewards (float64), mean advantage (NaN where a token is)
    lay = Ragged.from_lengths(lens)
    for i in range(lens.numel()):
        a, b = int(lay.offsets[i]), int(lay.offsets[i + 1])
        mi = m[a:b]
        assert int(rs.valid[i]) == mi.sum()
        assert float(rs.seq_reward[i]) == pytest.approx(tlr[a:b].double().sum().item(), rel=1e-12, abs=1e-12)
        va = adv[a:b].numpy()[mi].astype(np.float64)
        want = va.mean() if va.size else float("nan")
        got = float(rs.row_advantage()[i])
        assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=1e-14), i
    assert not rs.row_constant()


def test_token_path_is_independent_of_chunking():
    """Same bits for every figure, sample and histogram whatever the chunks (row sums are per row)."""
    data = _token_chunks(seed=9, rows=120)
    ref = _feed(*data, cuts=[], reservoir=100).finish()
    for cuts in ([1, 2, 3, 50], list(range(0, 120, 7)), [119]):
        got = _feed(*data, cuts=cuts, reservoir=100).finish()
        assert got == ref, cuts
    # the sample: the valid tokens at the drawn ordinals (input order), the non-finite ones left out
    mask, adv = data[1], data[2]
    valid = adv[mask > 0].double().numpy()
    k = st.sample_ordinals(valid.size, 100)
    want = valid[k][np.isfinite(valid[k])]
    assert bool((~np.isfinite(valid)).any())
    assert np.array_equal(_feed(*data, cuts=[33], reservoir=100).reservoir.values, want)
    # with a sample holding every token, the quantiles are exact (finite valid tokens)
    exact = _feed(*data, cuts=[10, 40]).finish()["metrics"]
    a = adv.numpy()[mask.numpy() > 0].astype(np.float64)
    a = a[np.isfinite(a)]
    assert exact["critic/advantages/quantiles_exact"] is True
    assert ref["metrics"]["critic/advantages/quantiles_exact"] is False
    for q in st.QUANTILES:
        assert exact[f"critic/advantages/p{q}"] == pytest.approx(np.quantile(a, q / 100), abs=1e-12)


def test_token_path_histogram_counts_every_finite_token_against_numpy():
    lens, mask, adv, ret, vals, tlr, codes = _token_chunks(seed=4, rows=200)
    adv[-40:-30], adv[-20:-15], mask[-40:] = 50.0, -40.0, 1.0  # outside the edges fixed early on
    h = _feed(lens, mask, adv, ret, vals, tlr, codes, cuts=[3, 100], reservoir=50).finish()
    h = h["histograms"]["advantages"]
    a = adv.numpy()[mask.numpy() > 0].astype(np.float64)
    a = a[np.isfinite(a)]
    head = a[:50]  # the edges come from the run's first `reservoir` finite valid tokens
    span = head.max() - head.min()
    e = np.asarray(h["edges"])
    assert e[0] == head.min() - span / 2 and e[-1] == head.max() + span / 2
    inside = a[(a >= e[0]) & (a <= e[-1])]
    assert h["counts"] == np.histogram(inside, bins=e)[0].tolist()
    assert (h["underflow"], h["overflow"]) == ((a < e[0]).sum(), (a > e[-1]).sum()) == (5, 10)


def test_stream_histogram_is_exact_at_bin_edges():
    """Values on the edges and one ulp either side land where a binary search over the edges puts
    them (numpy's rule: [e_k, e_k+1), the last bin closed), through np.histogram's linear map."""
    hist = st.StreamHistogram(bins=50, seed_tokens=2)
    hist.add(np.array([-1.3, 2.9]))  # edges from these two
    assert hist.linear
    e = hist.edges
    x = np.concatenate([e, np.nextafter(e, np.inf), np.nextafter(e, -np.inf), np.linspace(e[0], e[-1], 997)])
    hist.add(x)
    want = np.histogram(np.concatenate([[-1.3, 2.9], x[(x >= e[0]) & (x <= e[-1])]]), bins=e)[0]
    assert hist.counts.tolist() == want.tolist()
    assert hist.under == 1 and hist.over == 1  # one ulp outside the outer edges


def test_sample_ordinals_one_per_stratum_and_chunk_independent():
    total, size = 10_007, 500
    k = st.sample_ordinals(total, size)
    assert k.size == size and bool((k[1:] > k[:-1]).all()) and int(k[0]) >= 0 and int(k[-1]) < total
    strata = np.arange(size) * total // size
    assert np.array_equal(np.searchsorted(k, strata), np.arange(size))  # one in each stratum
    x = np.arange(total, dtype=np.float64)
    a, b = st.TokenSample(size), st.TokenSample(size)
    a.prepare(total)
    b.prepare(total)
    a.add(x)
    for lo in range(0, total, 733):
        b.add(x[lo:lo + 733])
    assert np.array_equal(a.values, x[k]) and np.array_equal(b.values, a.values)
    assert not a.exact and abs(float(a.values.mean()) - (total - 1) / 2) < 50  # stratified: close to the mean
    small = st.TokenSample(size)
    small.prepare(300)
    small.add(x[:120])
    small.add(x[120:300])
    assert small.exact and np.array_equal(small.values, x[:300])


def test_the_collector_gives_the_same_figures_fed_torch_tensors_or_numpy_arrays():
    """The run hands torch tensors over, ``advcli stats`` numpy arrays (offsets, code arrays): both reach
    the one numpy implementation through ``to_numpy``, so the figures are the same to the bit."""
    lens, mask, adv, ret, vals, tlr, codes = _token_chunks()
    from_torch = _feed(lens, mask, adv, ret, vals, tlr, codes, cuts=[7, 40]).finish()
    R = lens.numel()
    rs = st.FigureCollector(R)
    offsets = np.concatenate([[0], np.cumsum(lens.numpy())]).astype(np.int64)
    m, a, r, t, v = (x.numpy() for x in (mask, adv, ret, tlr, vals))
    valid = np.add.reduceat((m > 0).astype(np.int64), offsets[:-1]) * (lens.numpy() > 0)
    c = codes.numpy()
    rs.set_rows(raw_score=np.zeros(R), score=np.zeros(R), scopes=st.Codes(c, int(c.max()) + 1),
                step_values=list(range(int(c.max()) + 1)), groups=None, valid_len=valid, has_values=True)
    for lo, hi in ((0, 7), (7, 40), (40, R)):
        t0, t1 = offsets[lo], offsets[hi]
        rs.add_chunk(lo, offsets[lo:hi + 1] - t0, m[t0:t1], a[t0:t1], r[t0:t1], t[t0:t1], v[t0:t1])
    assert json.dumps(rs.finish(), sort_keys=True) == json.dumps(from_torch, sort_keys=True)


def test_to_numpy_takes_a_tensor_that_needs_grad_or_is_bfloat16():
    x = torch.tensor([0.5, -1.25, 3.0], requires_grad=True)
    assert st.to_numpy(x).tolist() == [0.5, -1.25, 3.0]
    assert st.to_numpy(x.detach().to(torch.bfloat16), np.float64).tolist() == [0.5, -1.25, 3.0]  # exact in bf16
    assert st.to_numpy([1, 2], np.int64).dtype == np.int64


def test_stats_and_other_commands_read_a_response_level_output(tmp_path, capsys):
    """AReaL's dump holds one reward and a token count (response_length) per response, so its run writes
    scalar advantages, returns and token_level_rewards. ``advcli stats`` on that output, as a file and as
    a directory, gives the figures computed here from the file (each row's value over its
    response_length tokens, as the run weighs it) and the run's own; compare and audit read it too."""
    from conftest import run_main
    from test_format_areal import build, save_config

    trial = tmp_path / "trial"
    build(trial)
    save_config(trial)
    d = tmp_path / "outs"
    d.mkdir()
    out = d / "o.parquet"
    code, printed, err = run_main(["run", trial, "-o", out, "--flavor", "areal", "--json"], capsys)
    assert code == 0, err
    ran = json.loads(printed)["metrics"]
    t = pq.read_table(out)
    assert t.schema.field("advantages").type == pa.float32() and "response_mask" not in t.schema.names
    L = t.column("response_length").to_numpy().astype(np.float64)
    adv = t.column("advantages").to_numpy().astype(np.float64)
    ret = t.column("returns").to_numpy().astype(np.float64)
    tlr = t.column("token_level_rewards").to_numpy().astype(np.float64)
    expected = {"critic/advantages/mean": (adv * L).sum() / L.sum(), "critic/advantages/max": adv.max(),
                "critic/advantages/min": adv.min(), "critic/returns/mean": (ret * L).sum() / L.sum(),
                "response_length/mean": L.mean(), "response_length/max": L.max(),
                "critic/rewards/mean": tlr.mean(), "critic/rewards/max": tlr.max(), "critic/rewards/min": tlr.min()}
    assert abs(tlr).max() > 0  # the sequence reward, not the first token's (0: the reward sits on the last)
    for target in (out, d):
        code, printed, err = run_main(["stats", target, "--json"], capsys)
        assert code == 0, err
        got = json.loads(printed)["metrics"]
        assert got["critic/advantages/count"] == ran["critic/advantages/count"] == L.sum()
        for k, v in expected.items():
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-6), k
            assert got[k] == pytest.approx(ran[k], rel=1e-6, abs=1e-6), k
    code, printed, err = run_main(["audit", d, "--flavor", "areal", "--json"], capsys)  # the directory
    assert code == 0, err
    assert json.loads(printed)["agree"]
    other = tmp_path / "scaled.parquet"
    code, _, err = run_main(["run", trial, "-o", other, "--flavor", "areal", "--set", "actor.reward_scaling=1.0", "-q"],
                            capsys)
    assert code == 0, err
    code, printed, err = run_main(["compare", out, other, "--json"], capsys)
    assert code in (0, 1), err
    code, printed, err = run_main(["audit", out, "--flavor", "areal", "--json"], capsys)
    assert code == 0, err
    assert json.loads(printed)["agree"]
    code, _, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    kept = tmp_path / "kept.parquet"
    code, printed, err = run_main(["filter", d / "o.parquet", "-o", kept, "--drop-uniform", "--json"], capsys)
    assert code == 0, err
    assert pq.read_schema(kept).field("advantages").type == pa.float32()


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_stats_of_an_output_gives_the_runs_reward_kl_figures(tmp_path, capsys, precision):
    """``advcli stats`` on the output of a run with the KL in the reward gives ``actor/reward_kl_penalty`` and
    ``actor/reward_kl_penalty_coeff`` per step and overall, as the run reported them, and as computed here
    from the file: verl's low_var_kl (k3 of x = clamp(ref − logp, ±20), clamped to ±10), each row's
    Σ kld·m / (Σm + 1e-8), the step's mean over rows, and the adaptive controller stepped by hand
    (AdaptiveKLController.update, verl core_algos.py L153-212 @1dda039b: β ← β·(1 + clip(kl/target − 1, ±0.2)
    · n/horizon), so step 1's β depends on step 0's KL. The reference column has another name, given to the
    run with ``columns``: stats reads the output's own record of it."""
    from conftest import run_main

    src = _dump(tmp_path)
    t = pq.read_table(src)
    t = t.rename_columns(["ref_lp" if n == "ref_log_probs" else n for n in t.column_names])
    renamed = _write(tmp_path / "renamed.parquet", {n: t.column(n) for n in t.column_names})
    out = tmp_path / "out.parquet"
    coef, target, horizon = 0.2, 0.05, 30.0
    res = advcli.run(renamed, out, flavor="verl", force=True, columns={"ref_log_probs": "ref_lp"},
                     settings={"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True,
                               "algorithm.kl_penalty": "low_var_kl", "algorithm.kl_ctrl.type": "adaptive",
                               "algorithm.kl_ctrl.kl_coef": coef, "algorithm.kl_ctrl.target_kl": target,
                               "algorithm.kl_ctrl.horizon": horizon}, precision=precision)
    masks = [np.asarray(m, np.float64) for m in t.column("response_mask").to_pylist()]
    lp, ref = _flat(t.column("old_log_probs")), _flat(t.column("ref_lp"))
    kl_row = []
    for m, a, b in zip(masks, lp, ref):
        x = np.clip(b - a, -20, 20)
        kld = np.clip(np.exp(x) - x - 1, -10, 10) * m
        kl_row.append(kld.sum() / (m.sum() + 1e-8))
    kl_row = np.array(kl_row)
    steps = t.column("step").to_numpy()
    betas, kls, beta = [], [], coef
    for s in (0, 1):
        current = kl_row[steps == s].mean()
        betas.append(beta)
        kls.append(current)
        beta *= 1 + np.clip(current / target - 1, -0.2, 0.2) * (steps == s).sum() / horizon
    assert betas[1] != pytest.approx(coef)  # the controller moved: step 1 tests the replay
    code, printed, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    got = json.loads(printed)
    for s in (0, 1):
        for report in (got["per_step"][s], res.per_step[s]):
            assert report["actor/reward_kl_penalty"] == pytest.approx(kls[s], rel=1e-5, abs=1e-7)
            assert report["actor/reward_kl_penalty_coeff"] == pytest.approx(betas[s], rel=1e-9)
        for k in ("actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff"):
            assert got["per_step"][s][k] == res.per_step[s][k], k  # the same operations: the same floats
    rows = np.array([(steps == s).sum() for s in (0, 1)], np.float64)
    assert got["metrics"]["actor/reward_kl_penalty"] == pytest.approx(kl_row.mean(), rel=1e-5)
    assert got["metrics"]["actor/reward_kl_penalty_coeff"] == pytest.approx((np.array(betas) * rows).sum() / rows.sum())
    for k in ("actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff"):
        assert got["metrics"][k] == res.metrics[k], k
    assert got["release"] == res.release  # and the release that made the output, as the run said it


def test_stats_leaves_the_reward_kl_out_where_the_output_lacks_the_log_probs(tmp_path, capsys):
    """An output slimmed afterwards (the log-prob columns dropped, advcli's record kept) has nothing to recompute
    the KL from: stats leaves those figures out rather than guess them, and gives the others."""
    from conftest import run_main

    src = _dump(tmp_path)
    out = tmp_path / "out.parquet"
    advcli.run(src, out, flavor="verl", force=True,
               settings={"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True})
    slim = tmp_path / "slim.parquet"
    t = pq.read_table(out)
    pq.write_table(t.select([n for n in t.column_names if n not in ("old_log_probs", "ref_log_probs")]), slim)
    assert b"advcli" in pq.read_schema(slim).metadata
    for path, has_kl in ((out, True), (slim, False)):
        code, printed, err = run_main(["stats", path, "--json"], capsys)
        assert code == 0, err
        got = json.loads(printed)
        assert ("actor/reward_kl_penalty" in got["metrics"]) is has_kl
        assert got["metrics"]["critic/advantages/count"] > 0


def test_stats_names_the_file_and_row_of_a_null_reward_in_a_directory(tmp_path, capsys):
    """A directory of step files, the second with a null reward at its row 3: stats names that file and row
    (it once named the first file, with no row)."""
    from conftest import run_main

    t = pq.read_table(_dump(tmp_path))
    d = tmp_path / "steps"
    d.mkdir()
    steps = t.column("step").to_numpy()
    for s in (0, 1):
        part = t.filter(pa.array(steps == s))
        if s == 1:
            reward = part.column("reward").to_pylist()
            reward[3] = None
            part = part.set_column(part.column_names.index("reward"), "reward", pa.array(reward, pa.float32()))
        pq.write_table(part, d / f"step_{s}.parquet")
    code, _, err = run_main(["stats", d], capsys)
    assert code == 2 and f"{d / 'step_1.parquet'}: column 'reward', row 3: null value" in " ".join(err.split()), err


@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_stats_refuses_an_infinite_reward_as_run_does_and_leaves_nan_out(tmp_path, capsys, bad):
    """An infinite reward gave `critic/score/mean –` and a solved share over fewer rows, unsaid: refused now with
    run's message (file, column, the row counted within its file across chunks), from the command and from
    advcli.stats. A NaN reward is a missing one (reports.md): left out of the figures, as before."""
    from conftest import run_main

    from advcli.errors import AdvcliError

    masks = pa.array([[1, 1], [1, 1, 1], [1], [1, 1]], pa.list_(pa.int8()))
    src = _write(tmp_path / "inf.parquet", {"prompt_id": [0, 0, 1, 1], "reward": [1.0, 0.0, bad, 1.0],
                                            "response_mask": masks})
    want = f"{src}: column 'reward', row 2: reward {bad} is not finite"
    code, out, err = run_main(["stats", src, "--chunk-rows", "1"], capsys)
    assert code == 2 and want in " ".join(err.split()) and "hint:" in err and "critic/score" not in out + err
    with pytest.raises(AdvcliError, match=want.replace(".", r"\.")):
        advcli.stats(src)
    nan = _write(tmp_path / "nan.parquet", {"prompt_id": [0, 0, 1, 1], "reward": [1.0, 0.0, float("nan"), 0.5],
                                            "response_mask": masks})
    res = advcli.stats(nan)
    assert res.metrics["critic/score/mean"] == pytest.approx(1.5 / 3)  # (1 + 0 + 0.5) / 3 rows with a reward
    assert res.metrics["groups/solved_share"] == pytest.approx(2 / 3)


def test_stats_padded_reads_lengths_as_run_padded_does(tmp_path, capsys):
    """A ragged file right-padded to one width: --padded gives verl's response length (last mask=1 position + 1,
    by hand here), the default the list length; an output of a --padded run is read so without the flag."""
    from conftest import run_main

    masks = [[1, 1, 0], [1, 0, 1, 0, 0], [0, 1], [1]]
    width = max(map(len, masks))
    padded = [m + [0] * (width - len(m)) for m in masks]
    src = _write(tmp_path / "p.parquet", {"prompt_id": [0, 0, 1, 1], "reward": [1.0, 0.0, 0.5, 1.0],
                                          "response_mask": pa.array(padded, pa.list_(pa.int8())),
                                          "old_log_probs": pa.array([[-0.5] * width] * 4, pa.list_(pa.float32()))})
    verl_len = [max(i for i, v in enumerate(m) if v) + 1 for m in masks]  # 2, 3, 2, 1
    code, out, err = run_main(["stats", src, "--json", "--padded"], capsys)
    assert code == 0, err
    assert json.loads(out)["metrics"]["response_length/mean"] == pytest.approx(np.mean(verl_len))
    code, out, _ = run_main(["stats", src, "--json"], capsys)
    assert json.loads(out)["metrics"]["response_length/mean"] == pytest.approx(width)
    assert advcli.stats(src, padded=True).metrics["response_length/max"] == max(verl_len)
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--padded", "-q", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    assert code == 0, err
    code, out, _ = run_main(["stats", tmp_path / "o.parquet", "--json"], capsys)
    assert json.loads(out)["metrics"]["response_length/mean"] == pytest.approx(np.mean(verl_len))
    code, out, _ = run_main(["stats", tmp_path / "o.parquet", "--json", "--ragged"], capsys)
    assert json.loads(out)["metrics"]["response_length/mean"] == pytest.approx(width)


@pytest.mark.parametrize("kind", [pa.float16(), pa.int32(), pa.string()])
def test_a_scalar_returns_column_beside_token_lists_is_named(tmp_path, capsys, kind):
    """A token-level file (its response_mask lists) whose returns column holds one value a row: stats named no
    column (an internal error, 'operands could not be broadcast'; a string's characters counted as tokens); it
    names the column and its type."""
    values = {pa.float16(): [0.5, -0.5], pa.int32(): [1, 0], pa.string(): ["ab", "c"]}[kind]
    src = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a"], "reward": [1.0, 0.0], "advantages": [[0.5, 0.5], [-0.5]],
                             "returns": pa.array(values, kind), "response_mask": [[1, 1], [1]]}), src)
    code, _, err = run_main(["stats", str(src)], capsys)
    assert code == 2 and f"column 'returns' holds {kind}, one value a row" in err and "internal" not in err, err
