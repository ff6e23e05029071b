"""verl 0.6.0's ``mismatch/rollout_is_p25 ... p99`` (``compute_is_metrics``, verl/trainer/ppo/mismatch_helper.py
@v0.6.0 L357-367): ``torch.quantile(rollout_is_weights[response_mask.bool()], q)`` per training batch, of the
weights before truncation, masking and veto (``exp(clamp(lr, ±20))`` per token at the token level; the row's
``exp(clamp(Σ lr·m))`` / ``exp(clamp(Σ lr·m / (Σm + 1e-8)))`` on each of its mask=1 tokens at the sequence /
geometric levels). Expected numbers: numpy's ``quantile`` (linear interpolation, torch.quantile's default) in
float64 over the same weights computed here from the rows; advcli runs in float32 (rtol 1e-5)."""
import math

import numpy as np
import pytest
from conftest import run_table
from test_flavor_verl_rollout_correction import ROWS
from test_release_verl_old_rollout_correction import SETTINGS, _write

from advcli.correction import weights as rc

QS = (25, 50, 75, 95, 99)


def raw_weights(rows, level: str) -> list[float]:
    """The weights compute_is_metrics takes its quantiles of, at each mask=1 token, row by row."""
    out = []
    for _, _, mask, old, roll in rows:
        lr = [o - r for o, r in zip(old, roll)]
        n = sum(mask)
        s = sum(x for x, m in zip(lr, mask) if m)
        for x, m in zip(lr, mask):
            if not m:
                continue
            v = {"token": x, "sequence": s, "geometric": s / (n + 1e-8)}[level]
            out.append(math.exp(min(max(v, -20.0), 20.0)))
    return out


def want(rows, level):
    w = np.array(raw_weights(rows, level), dtype=np.float64)
    return {f"mismatch/rollout_is_p{q}": float(np.quantile(w, q / 100)) for q in QS}


def level_of(settings: dict) -> str:
    return settings.get("algorithm.rollout_is_level", "token")


@pytest.mark.parametrize("name", sorted(SETTINGS["0.6.0"]))
@pytest.mark.parametrize("chunk_rows", [1, 2, 4096])
def test_quantiles_of_the_weights_before_truncation(tmp_path, name, chunk_rows):
    settings = SETTINGS["0.6.0"][name]
    src = _write(tmp_path / "in.parquet")
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", {"algorithm.adv_estimator": "grpo", **settings},
                       chunk_rows=chunk_rows)
    exp = want(ROWS, level_of(settings))
    for k, v in exp.items():
        assert res.per_step[0][k] == pytest.approx(v, rel=1e-5), (name, k)
        assert res.metrics[k] == pytest.approx(v, rel=1e-5), (name, k)


def test_by_hand_token_level():
    """The 9 token weights of ROWS (mask=1 tokens, truncation not applied: row 2's 4.26 stays) sorted, p95 at
    rank 0.95·8 = 7.6 between the 8th and 9th."""
    w = sorted(raw_weights(ROWS, "token"))
    assert len(w) == 9 and w[-1] == pytest.approx(math.exp(1.45))
    assert want(ROWS, "token")["mismatch/rollout_is_p95"] == pytest.approx(w[7] + 0.6 * (w[8] - w[7]))


def _rows_with_steps(order):
    """ROWS twice: step 0 as they are, step 1 with the log-ratios doubled; ``order`` the row order."""
    rows = [(*r, 0) for r in ROWS] + [(p, rw, m, [2 * o for o in old], [2 * x for x in roll], 1)
                                      for p, rw, m, old, roll in ROWS]
    return [rows[i] for i in order]


def _write_steps(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({
        "prompt_id": [f"{r[0]}s{r[5]}" for r in rows], "reward": pa.array([r[1] for r in rows], pa.float32()),
        "response_mask": pa.array([r[2] for r in rows], pa.list_(pa.int8())),
        "old_log_probs": pa.array([r[3] for r in rows], pa.list_(pa.float32())),
        "rollout_log_probs": pa.array([r[4] for r in rows], pa.list_(pa.float32())),
        "step": [r[5] for r in rows]}), str(path))
    return str(path)


@pytest.mark.parametrize("order", ["contiguous", "interleaved"])
def test_each_step_its_own_quantiles(tmp_path, order):
    idx = list(range(10)) if order == "contiguous" else [i // 2 + 5 * (i % 2) for i in range(10)]
    rows = _rows_with_steps(idx)
    src = _write_steps(tmp_path / "in.parquet", rows)
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", {"algorithm.adv_estimator": "grpo",
                                                                   "algorithm.rollout_is_threshold": 2.0},
                       chunk_rows=3)
    for s in (0, 1):
        exp = want([r[:5] for r in rows if r[5] == s], "token")
        for k, v in exp.items():
            assert res.per_step[s][k] == pytest.approx(v, rel=1e-5), (order, s, k)


def test_no_approximate_figure_beyond_the_bounds(tmp_path, monkeypatch):
    """Interleaved steps holding more weights at once than the bound: no quantile, a warning; a step beyond
    torch.quantile's limit: none for it (verl itself raises there), a warning."""
    rows = _rows_with_steps([i // 2 + 5 * (i % 2) for i in range(10)])
    src = _write_steps(tmp_path / "in.parquet", rows)
    sets = {"algorithm.adv_estimator": "grpo", "algorithm.rollout_is_threshold": 2.0}
    monkeypatch.setattr(rc, "QUANTILE_OPEN_LIMIT", 4)
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", sets, chunk_rows=2)
    assert not any("rollout_is_p" in k for e in res.per_step for k in e)
    assert any("order the dump by step" in w for w in res.warnings)
    assert "mismatch/rollout_is_mean" in res.per_step[0]  # the other figures stay
    monkeypatch.setattr(rc, "QUANTILE_OPEN_LIMIT", 2 ** 26)
    monkeypatch.setattr(rc, "QUANTILE_STEP_LIMIT", 8)  # step 0 and 1 have 9 weighted tokens each
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", sets, chunk_rows=2)
    assert not any("rollout_is_p" in k for e in res.per_step for k in e)
    assert any("torch.quantile takes at most 8" in w for w in res.warnings)


def test_later_releases_have_no_quantiles(tmp_path):
    src = _write(tmp_path / "in.parquet")
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.1",
                       {"algorithm.adv_estimator": "grpo", **SETTINGS["0.6.1"]["seqbn"]})
    assert not any("_p25" in k for k in res.per_step[0])


def test_stats_of_the_output_gives_the_same_quantiles(tmp_path):
    """advcli stats on an output made with verl@0.6.0 recomputes the figures from its provenance: the same."""
    import advcli

    src = _write(tmp_path / "in.parquet")
    _, res = run_table(src, tmp_path / "o.parquet", "verl@0.6.0", {"algorithm.adv_estimator": "grpo",
                                                                   "algorithm.rollout_is_threshold": 2.0})
    st = advcli.stats(str(tmp_path / "o.parquet"))
    for q in QS:
        k = f"mismatch/rollout_is_p{q}"
        assert st.metrics[k] == res.metrics[k] == pytest.approx(want(ROWS, "token")[k], rel=1e-5)
