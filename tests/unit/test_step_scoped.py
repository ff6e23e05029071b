"""Everything a run resolves is scoped to a step; the one state carried from step to step is the adaptive
KL controller's coefficient, in ascending step order (issue 31: the premise of a driver that resolves one
step at a time).

The check a user can do at the terminal: run a dump whole, then run each step's rows alone with
``algorithm.kl_ctrl.kl_coef`` set to the coefficient verl's controller reaches before that step, computed
here by hand from verl's formula (``AdaptiveKLController.update``, verl/trainer/ppo/core_algos.py
L153-212 @1dda039b: e = clip(current_kl/target - 1, -0.2, 0.2), value *= 1 + e*n_steps/horizon,
n_steps = the step's rows; current_kl = the step's mean KL, read from that step's own run). Each step
alone must give the whole run's token columns bit for bit (groups, whitening and the KL penalty are
per step), and the whole run's per-step β must be the hand-carried coefficient.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_main

from advcli.sample import make_table

TARGET, HORIZON, COEF = 0.01, 500, 0.05
SETTINGS = {
    "gae": ["algorithm.adv_estimator=gae"],  # token-level, advantages whitened per step
    "rloo": ["algorithm.adv_estimator=rloo"],  # row-level groups, KL summed into the score
}


def _run(capsys, path, out, settings, coef, kl_penalty) -> dict:
    argv = ["run", path, "-o", out, "--force", "--flavor", "verl", "--json"]
    for s in settings + ["algorithm.use_kl_in_reward=true", f"algorithm.kl_penalty={kl_penalty}",
                         "algorithm.kl_ctrl.type=adaptive", f"algorithm.kl_ctrl.kl_coef={coef!r}",
                         f"algorithm.kl_ctrl.target_kl={TARGET}", f"algorithm.kl_ctrl.horizon={HORIZON}"]:
        argv += ["--set", s]
    code, stdout, err = run_main(argv, capsys)
    assert code == 0, err
    return json.loads(stdout)


@pytest.mark.parametrize("estimator,kl_penalty", [("gae", "low_var_kl"), ("rloo", "k2")])
def test_each_step_alone_with_the_carried_coefficient_equals_the_whole_run(tmp_path, capsys, estimator, kl_penalty):
    t = make_table(900, 6, 2, 24, 11, shuffle=True, steps=3)
    whole = str(tmp_path / "whole.parquet")
    pq.write_table(t, whole)
    rep = _run(capsys, whole, str(tmp_path / "whole-out.parquet"), SETTINGS[estimator], COEF, kl_penalty)
    out = pq.read_table(str(tmp_path / "whole-out.parquet"))
    steps = t.column("step").to_numpy()
    values = sorted(set(steps.tolist()))
    assert len(values) == 3
    coef, carried = COEF, []
    for s in values:  # ascending step order, as verl's trainer steps
        rows = np.nonzero(steps == s)[0]
        part = str(tmp_path / f"step{s}.parquet")
        pq.write_table(t.take(rows), part)
        one = _run(capsys, part, str(tmp_path / f"step{s}-out.parquet"), SETTINGS[estimator], coef, kl_penalty)
        got = pq.read_table(str(tmp_path / f"step{s}-out.parquet"))
        for col in ("advantages", "returns", "token_level_rewards"):
            want = out.column(col).take(rows).to_pylist()
            assert got.column(col).to_pylist() == want, (estimator, s, col)
        carried.append(coef)
        (step_row,) = one["per_step"]
        err = float(np.clip(step_row["kl"] / TARGET - 1, -0.2, 0.2))
        coef = coef * (1 + err * len(rows) / HORIZON)
    assert [r["kl_coef"] for r in rep["per_step"]] == pytest.approx(carried, rel=1e-12, abs=0)
    assert carried[1] != carried[0]  # the controller did move: the carry is exercised


# A step's numbers are its own: the same rows give the same bits run alone or beside other steps, whatever
# place their groups take among the batch's groups. (NeMo's leave-one-out sums were a batched BLAS product
# whose last bit, on some CPUs, followed the parity of the group's row in the product: a step alone and the
# same step in the whole dump differed by an ulp there, and so did the Ray per-step driver and the local engine.)
DEFAULTS = [("nemo", []), ("verl", ["algorithm.adv_estimator=grpo"]), ("verl", ["algorithm.adv_estimator=rloo"]),
            ("nemo", ["grpo.use_leave_one_out_baseline=false"]), ("skyrl", [])]


@pytest.mark.parametrize("flavor,settings", DEFAULTS)
def test_a_step_alone_equals_the_step_in_the_whole_run(tmp_path, capsys, flavor, settings):
    t = make_table(1200, 6, 2, 40, 7, shuffle=True, steps=3)  # rewards of 0.1: float32 sums are not exact
    scores = np.asarray(t.column("reward").to_pylist(), dtype=np.float64)
    assert np.any(np.abs(scores * 10 - np.round(scores * 10)) < 1e-6) and np.any((scores > 0) & (scores < 1))
    whole = str(tmp_path / "whole.parquet")
    pq.write_table(t, whole)

    def run(path, out):
        argv = ["run", path, "-o", out, "--force", "--flavor", flavor, "--quiet"]
        for s in settings:
            argv += ["--set", s]
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        return pq.read_table(out)

    out = run(whole, str(tmp_path / "whole-out.parquet"))
    steps = t.column("step").to_numpy()
    for s in sorted(set(steps.tolist())):
        rows = np.nonzero(steps == s)[0]
        part = str(tmp_path / f"step{s}.parquet")
        pq.write_table(t.take(rows), part)
        got = run(part, str(tmp_path / f"step{s}-out.parquet"))
        assert got.column("advantages").to_pylist() == out.column("advantages").take(rows).to_pylist(), (flavor, s)


def test_leave_one_out_sums_do_not_depend_on_the_group_place():
    """The baseline and std of one group with non-dyadic rewards, alone and at every place among other groups
    of its size, bit for bit (NeMo's one-pass statistics, leave-one-out and group)."""
    import torch

    from advcli.ops.groups import GroupIndex

    group = torch.tensor([0.1, 0.1, 1.0, 0.1, 1.0, 0.0])
    pick = torch.randint(0, 6, (7, 6), generator=torch.Generator().manual_seed(1))
    others = torch.tensor([0.0, 0.1, 1.0, 0.3, 0.5, 0.7])[pick]
    for loo in (True, False):
        base, std = GroupIndex.from_codes(torch.zeros(6, dtype=torch.int64)).onepass_baseline_std(group, loo)
        want = (base.tolist(), std.tolist())
        assert (want[0][2] != want[0][0]) == loo  # leave-one-out: each row its own baseline
        for place in range(8):
            rows = torch.cat([others[:place], group[None], others[place:]]).reshape(-1)
            g = GroupIndex.from_codes(torch.arange(8).repeat_interleave(6))
            base, std = g.onepass_baseline_std(rows, loo)
            mine = slice(place * 6, place * 6 + 6)
            assert (base[mine].tolist(), std[mine].tolist()) == want, (loo, place)
