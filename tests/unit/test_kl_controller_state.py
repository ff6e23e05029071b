"""The run's KL controller lives in its run state, not in its plan (issue 42, part 3): ``kl_coefs`` steps the
state's controller over the scopes in order (the coefficient carried in by the engine: Ray's per-step driver
gives each step a copy of its one controller), and leaves the plan as it was. The values are verl's
AdaptiveKLController computed here by hand: β ← β · (1 + clip(kl/target − 1, ±0.2) · n/horizon) after each
scope of n rows with mean KL kl (verl/trainer/ppo/core_algos.py L153-212 @1dda039b)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from advcli.ops.groups import GroupIndex
from advcli.ops.kl import KLController
from advcli.pipeline.plan import RunState
from advcli.pipeline.rows import kl_coefs


def _plan(coef=0.1, controller="adaptive"):
    kl = SimpleNamespace(coef=coef, controller=controller, target=0.05, horizon=100.0, coef_min=None, update_rows=None)
    return SimpleNamespace(run=SimpleNamespace(kl=kl), kl_on=True)


SCOPES = GroupIndex(torch.tensor([0, 0, 1, 1, 1, 2]), 3)  # scopes of 2, 3 and 1 rows
KL_MEAN = torch.tensor([0.02, 0.04, 0.10, 0.08, 0.12, 0.05], dtype=torch.float64)


def _by_hand(beta: float) -> tuple[list[float], float]:
    betas = []
    for rows in ([0, 1], [2, 3, 4], [5]):
        current = sum(float(KL_MEAN[i]) for i in rows) / len(rows)
        betas.append(beta)
        beta *= 1 + min(max(current / 0.05 - 1, -0.2), 0.2) * len(rows) / 100.0
    return betas, beta


def test_the_state_controller_is_stepped_from_the_coefficient_carried_in():
    plan = _plan()
    ctl = KLController.of(plan, 0.3)  # as Ray's driver gives a step: the value the earlier steps left
    state = RunState(kl=ctl)
    betas, kls = kl_coefs(plan, SCOPES, KL_MEAN, state)
    want, end = _by_hand(0.3)
    assert betas == pytest.approx(want, rel=1e-15) and state.kl is ctl and ctl.value == pytest.approx(end, rel=1e-15)
    assert kls == pytest.approx([0.03, 0.1, 0.05])
    assert plan.run.kl.coef == 0.1  # the plan's coefficient: not where the carry lives


def test_a_new_state_gets_the_plans_controller_and_no_state_steps_nothing_kept():
    plan = _plan()
    state = RunState()
    betas, _ = kl_coefs(plan, SCOPES, KL_MEAN, state)
    want, end = _by_hand(0.1)
    assert betas == pytest.approx(want, rel=1e-15) and state.kl.value == pytest.approx(end, rel=1e-15)
    assert kl_coefs(plan, SCOPES, KL_MEAN)[0] == betas  # a controller of its own, from kl.coef again
    fixed = RunState()
    assert kl_coefs(_plan(controller="fixed"), SCOPES, KL_MEAN, fixed)[0] == [0.1] * 3 and fixed.kl.value == 0.1
