"""verl's V1 trainer pads a batch whose size is not a multiple of its DP/mini-batch multiple with synthetic
no-op rows and dumps the padded batch (verl/trainer/ppo/padding_utils.py upsample_batch_to_divisible_size
@1dda039b and 0.9.1): key pad<32 hex>_<i>_0, empty input and output (one EOS token decoded with
skip_special_tokens), score 0, the first sample's gts. The dump built here: a step of 104 real rows (13
prompts × 8, five of them with equal rewards) padded to 112.

Expected values computed here from verl's formulas with the pad rows in the batch, as verl computes them:
GRPO per uid (the pads share one uid: their own group, all 0), GPG with α = B / #{s ≠ 0} where B counts the
pads. Figures, filters and group counts leave the pads out (verl's own metrics use non_padding_mask)."""
import json
import uuid

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main

N, P, PADS = 8, 13, 8


def records(step=3, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for p in range(P):
        pu = str(uuid.UUID(int=int(rng.integers(1 << 62)) + p))
        uniform = p < 5
        for s in range(N):
            score = 0.0 if uniform and p % 2 else (1.0 if uniform else float(rng.choice([0.0, 0.5, 1.0])))
            recs.append({"input": f"user\nq{p}\nassistant\n", "output": f"a{s}", "gts": str(p), "score": score,
                         "step": step, "uid": f"{pu}_{s}_0"})
    pad = "pad" + uuid.UUID(int=int(rng.integers(1 << 62))).hex
    recs += [{"input": "", "output": "", "gts": recs[0]["gts"], "score": 0.0, "step": step, "uid": f"{pad}_{i}_0"}
             for i in range(PADS)]
    return recs


def write(d, recs):
    d.mkdir()
    (d / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def expected(recs, estimator):
    """verl's GRPO (norm by std, eps 1e-6, unbiased std) / GPG over the whole padded batch."""
    s = np.array([r["score"] for r in recs], np.float64)
    g = [r["uid"].rsplit("_", 2)[0] for r in recs]
    out = np.zeros_like(s)
    alpha = len(s) / max(np.count_nonzero(s), 1)
    for key in dict.fromkeys(g):
        idx = [i for i, k in enumerate(g) if k == key]
        x = s[idx]
        mu, sd = x.mean(), x.std(ddof=1)
        out[idx] = (x - mu) / (sd + 1e-6) if estimator == "grpo" else alpha * (x - mu)
    return out


@pytest.mark.parametrize("estimator", ["grpo", "gpg"])
def test_advantages_with_pads_in_the_batch(tmp_path, capsys, estimator):
    recs = records()
    write(tmp_path / "rollout_data", recs)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", tmp_path / "rollout_data", "-o", out, "--flavor", "verl", "--set",
                             f"algorithm.adv_estimator={estimator}"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert len(t) == P * N + PADS and sum(r["is_padding"] for r in t) == PADS
    exp = expected(recs, estimator)
    got = np.array([r["advantages"] for r in t], np.float64)
    np.testing.assert_allclose(got, exp, atol=1e-5)
    if estimator == "gpg":  # the pads change GPG's α: without them every advantage would differ
        assert not np.allclose(got[:-PADS], expected(recs[:-PADS], "gpg")[:], atol=1e-3)
    assert " ".join(err.split()).count("8 synthetic padding row(s) set aside") == 1


def real_figures(recs):
    """The figures of the real rows only, as verl's metrics give them (non_padding_mask)."""
    real = recs[:-PADS]
    s = np.array([r["score"] for r in real])
    groups: dict = {}
    for r in real:
        groups.setdefault(r["uid"].rsplit("_", 2)[0], []).append(r["score"])
    uniform = sum(len(set(v)) == 1 for v in groups.values())
    return len(real), len(groups), uniform, float(s.mean()), float((s > 0).mean())


def test_run_figures_and_diagnostics_leave_pads_out(tmp_path, capsys):
    recs = records()
    write(tmp_path / "rollout_data", recs)
    rows, groups, uniform, mean, solved = real_figures(recs)
    assert (rows, groups, uniform) == (104, 13, 5)
    all_mean = np.mean([r["score"] for r in recs])
    assert abs(mean - all_mean) > 0.01  # the pads would pull the mean down
    code, out, err = run_main(["run", tmp_path / "rollout_data", "-o", tmp_path / "o.parquet", "--flavor", "verl",
                               "--set", "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    m, h = rep["metrics"], rep["group_health"]["overall"]
    assert m["critic/score/mean"] == pytest.approx(mean) and m["groups/count"] == groups
    assert m["groups/all_equal_share"] == pytest.approx(uniform / groups)
    assert (h["groups"], h["rows"], h["uniform_groups"]) == (groups, rows, uniform)
    assert h["solved_share"] == pytest.approx(solved)
    assert rep["per_step"][0]["rows"] == rows
    diag = {d["kind"]: d["count"] for d in rep["diagnostics"]}
    assert diag["all_equal_groups"] == uniform
    assert sum("8 synthetic padding row(s) set aside" in n for n in json.dumps(rep).split('"')) == 1


def test_stats_and_inspect_leave_pads_out(tmp_path, capsys):
    recs = records()
    write(tmp_path / "rollout_data", recs)
    rows, groups, uniform, mean, _ = real_figures(recs)
    code, out, err = run_main(["stats", tmp_path / "rollout_data", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["rows"] == rows and rep["metrics"]["groups/count"] == groups
    assert rep["metrics"]["critic/score/mean"] == pytest.approx(mean)
    assert rep["group_health"]["overall"]["uniform_groups"] == uniform
    assert "8 synthetic padding row(s) set aside" in rep["note"]
    code, out, err = run_main(["inspect", tmp_path / "rollout_data"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert f"{rows} rows (+ 8 padding rows set aside)" in text and f"groups {groups} (sizes: {groups}×8)" in text
    assert f"{uniform} groups where every reward is equal" in text
    assert f"reward mean {mean:.6f}" in text


def test_filters_leave_pads_out(tmp_path, capsys):
    recs = records()
    write(tmp_path / "rollout_data", recs)
    rows, groups, uniform, _, _ = real_figures(recs)
    conv = tmp_path / "c.parquet"
    assert run_main(["convert", tmp_path / "rollout_data", "-o", conv], capsys)[0] == 0
    code, out, err = run_main(["filter", conv, "-o", tmp_path / "f.parquet", "--drop-uniform", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert (rep["groups"], rep["rows"], rep["uniform_groups"], rep["groups_dropped"]) == (groups, rows, uniform,
                                                                                          uniform)
    assert rep["padding_rows"] == PADS
    kept = pq.read_table(tmp_path / "f.parquet").to_pylist()
    assert len(kept) == rows - uniform * N and not any(r["is_padding"] for r in kept)
    # --solve-rate: a group is kept on its own rows' mean; the pads are in no group
    means = {}
    for r in recs[:-PADS]:
        means.setdefault(r["uid"].rsplit("_", 2)[0], []).append(r["score"])
    want = sum(0.1 <= np.mean(v) <= 0.9 for v in means.values())
    code, out, err = run_main(["filter", conv, "-o", tmp_path / "g.parquet", "--solve-rate", "0.1:0.9", "--json"],
                              capsys)
    assert code == 0, err
    assert json.loads(out)["groups_kept"] == want


def test_stats_of_the_output_leaves_pads_out_of_the_advantage_figures(tmp_path, capsys):
    """The run's output is response-level (one advantage per row, no mask column): stats counted the pads' advantages
    (0) as valid tokens. It now gives the run's own figures: the mean over the 104 real rows of verl's GRPO, as verl's
    metrics take it (non_padding_mask), per step too."""
    recs = records()
    write(tmp_path / "rollout_data", recs)
    out = tmp_path / "o.parquet"
    code, run_out, err = run_main(["run", tmp_path / "rollout_data", "-o", out, "--flavor", "verl", "--set",
                                   "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    real = expected(recs, "grpo")[:-PADS]
    code, stats_out, err = run_main(["stats", out, "--json"], capsys)
    assert code == 0, err
    for rep in (json.loads(run_out), json.loads(stats_out)):
        m = rep["metrics"]
        assert m["critic/advantages/count"] == P * N
        assert m["critic/advantages/mean"] == pytest.approx(real.mean(), abs=1e-6)
        assert m["critic/advantages/min"] == pytest.approx(real.min(), abs=1e-5)
        assert rep["per_step"][0]["critic/advantages/mean"] == pytest.approx(real.mean(), abs=1e-6)


def test_the_whole_run_kl_penalty_is_the_row_weighted_mean_of_the_steps(tmp_path, capsys):
    """actor/reward_kl_penalty per step is verl's: the mean over the step's rows of each row's masked-mean KL, the
    padding rows (mask 0: KL 0) in that mean, as verl computes it before it drops them from its metrics. The whole
    run's value is the row-weighted mean of the steps' values over their real rows (docs/reports.md); it was the mean
    of the real rows' KL, which differs where a step has padding. By hand (k1 = old − ref): step 1 = one real row of
    KL 0.5 and a pad: 0.25; step 2 = two real rows of KL 0.2 and 0.4: 0.3; whole run (0.25·1 + 0.3·2)/3."""
    import pyarrow as pa

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({
        "prompt_id": ["a", "pad", "b", "b"], "step": [1, 1, 2, 2],
        "reward": pa.array([1.0, 0.0, 0.0, 1.0], pa.float32()),
        "response_mask": pa.array([[1, 1], [0], [1, 1], [1]], pa.list_(pa.int8())),
        "old_log_probs": pa.array([[-1.0, -1.0], [0.0], [-1.0, -1.0], [-1.0]], pa.list_(pa.float32())),
        "ref_log_probs": pa.array([[-1.5, -1.5], [0.0], [-1.2, -1.2], [-1.4]], pa.list_(pa.float32())),
        "is_padding": [False, True, False, False]}), src)
    code, out, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=reinforce_plus_plus", "--set",
                               "algorithm.use_kl_in_reward=true", "--set", "algorithm.kl_penalty=kl", "--set",
                               "algorithm.kl_ctrl.kl_coef=0.1", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    steps = [s["actor/reward_kl_penalty"] for s in rep["per_step"]]
    assert steps == pytest.approx([0.25, 0.3], abs=1e-6)
    assert rep["metrics"]["actor/reward_kl_penalty"] == pytest.approx((0.25 + 0.3 * 2) / 3, abs=1e-6)
