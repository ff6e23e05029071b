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
