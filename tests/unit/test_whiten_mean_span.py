"""The whitening's fourth moment sum (``advantage.whiten_mean_span``): Σv·u, the mean's numerator under its own
weights, exact over any split of the rows and through :meth:`MomentSums.merge` (how the Ray engine gathers its
workers' sums into a run's, which starts with three); and the positions ``prefix`` keeps."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import run_main

from advcli.ops.ragged import Ragged
from advcli.ops.whiten import MomentSums, WhitenSpec, prefix_kept, scope_mean_rstd

LENGTHS = [4, 4, 4]
MASK = torch.tensor([1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1], dtype=torch.float32)
ADV = torch.tensor([1, 1, 1, 0, .5, .5, 0, 0, -1, -1, -1, -1], dtype=torch.float32)
SPEC = WhitenSpec(unbiased=False, eps=1e-8, eps_mode="max", divisor="n")


def test_prefix_keeps_each_rows_first_sum_of_mask_positions():
    layout = Ragged.from_lengths(torch.tensor(LENGTHS))
    assert prefix_kept(layout, MASK).tolist() == [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1]


def test_the_mean_takes_its_own_weights_and_the_count_stays_the_masks():
    """u = 1 everywhere: μ = Σ A / Σ m = (3 + 1 − 4)/8 = 0, var = Σ A²·m / 8 = 6.5/8 (the hole's A = 1 in the sum
    only); without u, μ = Σ A·m / Σ m = −1/8."""
    layout = Ragged.from_lengths(torch.tensor(LENGTHS))
    scope = torch.zeros(3, dtype=torch.int64)
    four = MomentSums.zeros(1, mean_sum=True)
    four.add_rows(*MomentSums.row_partials(ADV, MASK, layout, scope, torch.ones_like(MASK)))
    mean, rstd = scope_mean_rstd(four, SPEC)
    assert float(mean[0]) == 0.0 and float(four.count[0]) == 8.0
    assert math.isclose(float(rstd[0]), 1 / math.sqrt(6.5 / 8), rel_tol=1e-12)
    three = MomentSums.zeros(1)
    three.add_rows(*MomentSums.row_partials(ADV, MASK, layout, scope))
    assert float(scope_mean_rstd(three, SPEC)[0][0]) == -1 / 8


def test_parts_merge_into_a_run_that_started_with_three_sums():
    """Each row a worker's part (one row per batch): merged into ``MomentSums.zeros(1)`` as gather_moments does, the
    same totals, bit for bit, as one accumulation."""
    layout = Ragged.from_lengths(torch.tensor(LENGTHS))
    u = prefix_kept(layout, MASK)
    whole = MomentSums.zeros(1, mean_sum=True)
    whole.add_rows(*MomentSums.row_partials(ADV, MASK * u, layout, torch.zeros(3, dtype=torch.int64), u))
    run = MomentSums.zeros(1)
    for i in range(3):
        sl = slice(4 * i, 4 * i + 4)
        part = MomentSums.zeros(1, mean_sum=True)
        part.add_rows(*MomentSums.row_partials(ADV[sl], (MASK * u)[sl], Ragged.from_lengths(torch.tensor([4])),
                                               torch.zeros(1, dtype=torch.int64), u[sl]))
        run.merge(part)
    assert [t.tolist() for t in run.tensors()] == [t.tolist() for t in whole.tensors()]
    assert float(whole.total_mean[0]) == -1.0 and float(whole.count[0]) == 7.0  # (1 + 1 + .5 + .5 − 4), 1 + 2 + 4


@pytest.mark.parametrize("extra,says", [
    (["--set", "advantage.whiten_one_pass=true", "--estimator", "reinforce_plus_plus"], "whiten_one_pass"),
    (["--set", "advantage.batch_normalize=true", "--estimator", "reinforce_plus_plus"], "batch_normalize"),
    (["--estimator", "grpo"], "row-level estimator grpo"),
])
def test_a_mean_span_the_pipeline_cannot_honour_is_refused(capsys, sample_path, tmp_path, extra, says):
    """`row` / `prefix` are two-pass token-level whitening: with the one-pass sums, SkyRL's batch normalisation or a
    row-level estimator they would be ignored, so the run stops before reading the data (exit 2, nothing written)."""
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", sample_path, "-o", str(out), "--flavor", "advcli", "--set", "advantage.whiten=true",
                             "--set", "advantage.whiten_mean_span=row", *extra], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not out.exists()
