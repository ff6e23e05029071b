"""Entropic advantage weighting (TTT-Discover, "Learning to Discover at Test Time"): the group's rewards
turned into exponential weights, as ``compute_advantages`` of test-time-training/discover
(``ttt_discover/rl/train.py`` @ 733bce97, the ``entropic`` and ``entropic_adaptive_beta`` branches).

The objective ``J_β = log E[exp(β·R)]`` has the gradient weights ``exp(β·r)/E[exp(β·r)]``; with a
leave-one-out mean as the expectation and the constant 1 as the baseline::

    e_i = exp(β·(r_i − max_g r))
    Z_i = (Σ_g e − e_i)/(n − 1)              (n = 1: Z = e)
    A_i = e_i/(Z_i + 1e-12) − 1

``entropic`` takes a fixed β (``adv_estimator_beta``, default 2.0). ``entropic_adaptive_beta`` chooses
β per group so that the tilted distribution ``q_β ∝ exp(β·r)`` sits at a fixed distance from uniform,
``KL(q_β ‖ uniform) = δ = log 2``: starting from β = 1 it doubles β while the KL is below δ (up to
1e6; still below there: that β), then bisects [0, β] 60 times and takes the upper end. A group of one
has β = 0 and gets 0. The search runs for all groups of a size at once (a loop over the doublings and
bisection steps, not over groups), in the score's dtype as the reference does (float32 by default).
"""
from __future__ import annotations

import math

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch  # the registry loads without torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register

SOURCE = "TTT-Discover: test-time-training/discover ttt_discover/rl/train.py compute_advantages @733bce97"
Z_EPS = 1e-12
BETA_MAX = 1e6
BISECTIONS = 60


def entropic_weights(vals: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """[G_n, n] ``e/(Z + 1e-12) − 1`` with the leave-one-out mean Z, for β [G_n] per group."""
    n = vals.shape[1]
    e = torch.exp(beta[:, None] * (vals - vals.max(dim=1, keepdim=True).values))
    z = e if n == 1 else (e.sum(dim=1, keepdim=True) - e) / (n - 1)
    return e / (z + Z_EPS) - 1.0


def kl_to_uniform(vals: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """[G_n] KL(q_β ‖ uniform) = Σ q·(log q + log n), q = softmax(β·(r − max r)) per group."""
    logits = beta[:, None] * (vals - vals.max(dim=1, keepdim=True).values)
    logq = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return (torch.exp(logq) * (logq + math.log(vals.shape[1]))).sum(dim=1)


def adaptive_beta(vals: torch.Tensor, delta: float) -> torch.Tensor:
    """[G_n] the reference's β: double from 1 while KL < δ and β < 1e6, keep β if still below δ, else
    bisect [0, β] 60 times (KL(mid) < δ → lo = mid, else hi = mid) and take hi."""
    g = vals.shape[0]
    hi = torch.ones(g, dtype=vals.dtype)
    while True:
        grow = (hi < BETA_MAX) & (kl_to_uniform(vals, hi) < delta)
        if not bool(grow.any()):
            break
        hi = torch.where(grow, hi * 2.0, hi)
    settled = kl_to_uniform(vals, hi) < delta  # best effort: δ never reached
    lo = torch.zeros_like(hi)
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        below = kl_to_uniform(vals, mid) < delta
        lo = torch.where(below & ~settled, mid, lo)
        hi = torch.where(~below & ~settled, mid, hi)
    return hi


def entropic_advantages(groups, r: torch.Tensor, beta: float | None, delta: float) -> torch.Tensor:
    """[R] entropic advantages; β fixed, or (``beta`` None) solved per group for KL = δ."""
    out = torch.zeros_like(r)
    for n, _, mat in groups.buckets():
        if n < 2:
            continue  # β = 0, e = Z = 1: 1/(1 + 1e-12) − 1, which is 0 in the reference's float32
        vals = r[mat]
        b = (torch.full((vals.shape[0],), float(beta), dtype=r.dtype) if beta is not None
             else adaptive_beta(vals, delta))
        out[mat] = entropic_weights(vals, b)
    return out


def _groups(table: RowTable, name: str):
    """The row groups: present, since these estimators' specs say uses_groups and the plan refuses a run
    without groups before any math (:func:`advcli.pipeline.plan.make_plan`)."""
    return table.groups


def entropic_row(table: RowTable, p: dict) -> torch.Tensor:
    return entropic_advantages(_groups(table, "entropic"), table.score, float(p["beta"]), 0.0)


def check_entropic_adaptive(p: dict) -> None:
    """The target KL δ > 0 (β_g solves KL(q_β ‖ uniform) = δ)."""
    delta = float(p["target_kl"])
    if delta <= 0:
        raise AdvcliError(f"key estimator.target_kl: must be > 0, got {delta}",
                          hint="the reference uses log 2 = 0.6931")


def entropic_adaptive_row(table: RowTable, p: dict) -> torch.Tensor:
    delta = float(p["target_kl"])
    return entropic_advantages(_groups(table, "entropic_adaptive_beta"), table.score, None, delta)


MASK_OUTPUT = Key(True, "multiply the broadcast advantage by the response mask", None, "bool")

register(EstimatorSpec(
    name="entropic", level="row", uses_groups=True, row_constant=True, row_fn=entropic_row,
    zero_for_uniform_groups=True,
    formula="e_i = exp(β·(r_i − max_g r)), Z_i = (Σ_g e − e_i)/(n − 1), A_i = e_i/(Z_i + 1e-12) − 1 "
            "(fixed β); a group of one: 0",
    source=SOURCE + " (adv_estimator=entropic, adv_estimator_beta)",
    params={"beta": Key(2.0, "the fixed β (adv_estimator_beta)", None, "float"), "mask_output": MASK_OUTPUT}))

register(EstimatorSpec(
    name="entropic_adaptive_beta", level="row", uses_groups=True, row_constant=True, row_fn=entropic_adaptive_row,
    check_params=check_entropic_adaptive,
    zero_for_uniform_groups=True,
    formula="β_g solves KL(q_β ‖ uniform) = δ, q_β ∝ exp(β·r) over the group (doubling from 1 up to 1e6, "
            "then 60 bisections of [0, β]); e_i = exp(β_g·(r_i − max_g r)), Z_i = (Σ_g e − e_i)/(n − 1), "
            "A_i = e_i/(Z_i + 1e-12) − 1; a group of one: 0",
    source=SOURCE + " (adv_estimator=entropic_adaptive_beta, δ = log 2)",
    params={"target_kl": Key(math.log(2), "δ, the KL(q_β ‖ uniform) each group's β is solved for (reference: "
                             "log 2)", None, "float"),
            "mask_output": MASK_OUTPUT}))
