"""OpenRLHF's IS correction (`--flavor openrlhf`, algo.advantage.is_correction_*): the coefficient that
PolicyLoss.forward multiplies the per-token loss by, written as rollout_is_weights, with the kept units as
response_mask_after_rs and the figures vllm_kl / is_filter_ratio. Expected numbers from the formulas by hand
in numpy (float64), independent of advcli and of the package (tests/conformance/test_conformance_openrlhf.py runs the
released package's own PolicyLoss)."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from advcli.cli import app

BASE = {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 4, "algo.kl.init_coef": 0}
C = "algo.advantage.is_correction_"


def make_rows(seed: int = 0, rows: int = 12, spread: float = 0.7) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        n = int(rng.integers(2, 8))
        m = (rng.random(n) > 0.25).astype(np.int8)
        m[int(rng.integers(0, n))] = 1
        old = rng.normal(-1.2, 0.6, n).astype(np.float32)
        roll = (old + rng.normal(0.0, spread, n)).astype(np.float32)
        out.append(dict(prompt_id=f"p{i // 4}", reward=float(rng.integers(0, 2)), mask=m, old=old, roll=roll))
    return out


def write(rows, path, rollout=True) -> str:
    cols = {"prompt_id": [r["prompt_id"] for r in rows], "reward": pa.array([r["reward"] for r in rows], pa.float32()),
            "response_mask": pa.array([r["mask"].tolist() for r in rows], pa.list_(pa.int8())),
            "old_log_probs": pa.array([r["old"].tolist() for r in rows], pa.list_(pa.float32()))}
    if rollout:
        cols["rollout_log_probs"] = pa.array([r["roll"].tolist() for r in rows], pa.list_(pa.float32()))
    pq.write_table(pa.table(cols), path)
    return path


def run(tmp_path, rows, settings: dict, flavor="openrlhf", rollout=True, ok=True):
    src = write(rows, os.path.join(tmp_path, "in.parquet"), rollout)
    out, rep = os.path.join(tmp_path, "out.parquet"), os.path.join(tmp_path, "r.json")
    argv = ["run", src, "-o", out, "--flavor", flavor, "--force", "--device", "cpu", "--report", rep]
    for k, v in {**BASE, **settings}.items():
        argv += ["--set", f"{k}={v}"]
    res = CliRunner().invoke(app, argv)
    if not ok:  # the CLI's AdvcliError (exit 2 from a shell; the runner hands the exception over)
        from advcli.errors import AdvcliError

        assert isinstance(res.exception, AdvcliError), res.output
        return f"{res.exception} {res.exception.hint or ''}"
    assert res.exit_code == 0, res.output
    t = pq.read_table(out)
    return {c: t.column(c).to_pylist() for c in t.column_names}, json.load(open(rep)), res.output


def by_hand(rows, level, mode, gating, low, high):
    """PolicyLoss.forward's coefficient per row (float64), the kept units, and the two figures."""
    coefs, keeps, filt_tok, filt_rows, kl_num, n_all = [], [], 0.0, 0.0, 0.0, 0.0
    for r in rows:
        m = r["mask"].astype(bool)
        old, roll = r["old"].astype(np.float64), r["roll"].astype(np.float64)
        lr = old - roll
        tis = np.exp(lr)
        if gating == "ratio":
            stat = np.exp(lr[m].mean()) * np.ones_like(lr) if level == "seq" else tis
        else:
            p = np.clip(np.exp(roll), 1e-6, 1 - 1e-6)
            q = np.clip(np.exp(old), 1e-6, 1 - 1e-6)
            s = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q)) if gating == "binary_kl" else np.abs(p - q)
            stat = s[m].mean() * np.ones_like(s) if level == "seq" else s
        if mode == "clip":
            coef, keep = np.clip(stat, low, high), np.ones_like(stat, dtype=bool)
        else:
            keep = (stat >= low) & (stat <= high)
            coef = np.where(keep, tis, 0.0)
        filtered = (stat < low) | (stat > high)
        coefs.append(np.where(m, coef, 0.0))
        keeps.append((m & keep).astype(float))
        filt_tok += filtered[m].sum()
        filt_rows += float(filtered[0])
        kl_num += (roll - old)[m].sum()
        n_all += m.sum()
    ratio = filt_rows / len(rows) if level == "seq" else filt_tok / n_all
    return coefs, keeps, kl_num / n_all, ratio


def assert_rows(got, expected, what, rtol=2e-5, atol=1e-6):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(np.array(g, dtype=np.float64), e, rtol=rtol, atol=atol, err_msg=f"{what} row {i}")


CASES = [("token", "mask", "ratio", 0.5, 5.0), ("token", "clip", "ratio", 0.5, 5.0),
         ("seq", "mask", "ratio", 0.8, 1.25),
         ("token", "mask", "ratio", 0.7, 1.4), ("token", "mask", "binary_kl", 0.0, 0.02),
         ("seq", "mask", "binary_kl", 0.0, 0.01), ("token", "mask", "tv", 0.0, 0.05), ("seq", "mask", "tv", 0.0, 0.03)]


@pytest.mark.parametrize("level,mode,gating,low,high", CASES)
def test_coefficient_mask_and_figures_by_hand(tmp_path, level, mode, gating, low, high):
    rows = make_rows(1)
    thr = f"[{low},{high}]" if low else str(high)  # a divergence takes HIGH alone (LOW = 0)
    got, rep, _ = run(tmp_path, rows, {C + "level": level, C + "mode": mode, C + "gating": gating,
                                       C + "threshold": thr})
    coefs, keeps, vllm_kl, ratio = by_hand(rows, level, mode, gating, low, high)
    assert_rows(got["rollout_is_weights"], coefs, "coefficient")
    assert_rows(got["response_mask_after_rs"], keeps, "kept units", rtol=0, atol=0)
    assert 0 < sum(k.sum() for k in keeps) and (mode == "clip" or ratio > 0), "the case gates nothing"
    assert rep["metrics"]["vllm_kl"] == pytest.approx(vllm_kl, rel=1e-5, abs=1e-7)
    assert rep["metrics"]["is_filter_ratio"] == pytest.approx(ratio, rel=1e-6, abs=1e-9)
    # the coefficient acts in the loss: the advantages are those of the run without it
    off, _, _ = run(tmp_path, rows, {})
    assert got["advantages"] == off["advantages"]


def test_unused_column_said_when_off_and_silent_without_it(tmp_path):
    rows = make_rows(2)
    _, _, out = run(tmp_path, rows, {})
    assert "is unused" in " ".join(out.split()) and "is_correction_level" in out.replace("\n", "").replace(" ", "")
    got, _, out = run(tmp_path, rows, {}, rollout=False)
    assert "is unused" not in " ".join(out.split()) and "rollout_is_weights" not in got


def test_old_flags_at_their_release_equal_the_new_ones(tmp_path):
    """0.10.4-0.11.1's is_correction_type: tis = token clip, icepop = token mask, seq-mask-tis = seq mask."""
    rows = make_rows(3)
    for old, new in (("tis", ("token", "clip")), ("icepop", ("token", "mask")), ("seq-mask-tis", ("seq", "mask"))):
        a, ra, _ = run(tmp_path, rows, {C + "enable": "true", C + "type": old, C + "threshold": "[0.8,1.3]"},
                       flavor="openrlhf@0.10.4")
        b, rb, _ = run(tmp_path, rows, {C + "level": new[0], C + "mode": new[1], C + "threshold": "[0.8,1.3]"})
        assert a["rollout_is_weights"] == b["rollout_is_weights"], old
        assert a["response_mask_after_rs"] == b["response_mask_after_rs"], old
        coefs, _, _, _ = by_hand(rows, *new, "ratio", 0.8, 1.3)
        assert_rows(a["rollout_is_weights"], coefs, old)


@pytest.mark.parametrize("flavor,settings,words", [
    ("openrlhf", {C + "level": "seq", C + "mode": "clip"}, "mode=clip requires"),
    ("openrlhf", {C + "level": "token", C + "gating": "tv"}, "upper bound only"),
    ("openrlhf", {C + "enable": "true"}, "replaced is_correction_enable"),
    ("openrlhf@0.10.4", {C + "level": "token"}, "have no such flag"),
    ("openrlhf@0.10.4", {C + "enable": "true", C + "threshold": "2.0"}, "exactly LOW HIGH"),
])
def test_refused_as_openrlhf_refuses(tmp_path, flavor, settings, words):
    out = run(tmp_path, make_rows(4), settings, flavor=flavor, ok=False)
    assert words in " ".join(out.split())


def test_empty_row_is_filtered_at_seq_level():
    """masked_mean divides by Σm without an epsilon: a row with no mask=1 token has a NaN statistic, gets no
    coefficient and counts as filtered among the rows."""
    import torch

    from advcli.correction.weights import Gate, gate_chunk
    from advcli.ops.ragged import Ragged

    layout = Ragged(torch.tensor([0, 2, 4]))
    mask = torch.tensor([1.0, 1.0, 0.0, 0.0])
    old = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    roll = torch.tensor([-1.1, -0.9, -1.0, -1.0])
    out = gate_chunk(Gate("seq", "mask", "ratio", 0.5, 5.0), layout, mask, old, roll)
    assert out.weights.tolist() == pytest.approx([np.exp(0.1), np.exp(-0.1), 0.0, 0.0], rel=1e-6)
    assert out.mask.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert out.rows["g_filtered"][1].tolist() == [0.0, 1.0]


def test_explain_and_keys(tmp_path):
    res = CliRunner().invoke(app, ["explain", "--flavor", "openrlhf", "--set", C + "level=seq", "--set",
                                   C + "gating=binary_kl", "--set", C + "threshold=0.01"])
    assert res.exit_code == 0, res.output
    assert "binary_kl at seq level" in res.output and "is_filter_ratio" in res.output
    res = CliRunner().invoke(app, ["explain", "--flavor", "openrlhf", "--keys"])
    assert res.exit_code == 0 and C + "gating" in res.output and C + "type" in res.output


def test_stats_of_the_output_gives_the_runs_figures(tmp_path):
    """advcli stats of the output: the same advantage figures (over the input mask, which OpenRLHF's estimator
    keeps, not response_mask_after_rs) and the same vllm_kl / is_filter_ratio as the run's report."""
    rows = make_rows(5)
    _, rep, _ = run(tmp_path, rows, {C + "level": "token", C + "threshold": "[0.8,1.2]"})
    res = CliRunner().invoke(app, ["stats", os.path.join(tmp_path, "out.parquet"), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)["metrics"]
    for k in ("critic/advantages/mean", "critic/advantages/min", "critic/advantages/max", "vllm_kl",
              "is_filter_ratio"):
        assert stats[k] == pytest.approx(rep["metrics"][k], rel=1e-9, abs=1e-12), k
    assert 0 < rep["metrics"]["is_filter_ratio"] < 1
