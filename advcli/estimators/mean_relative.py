"""Group estimators that divide by the group *mean* instead of its std: MaxRL.

MaxRL ("maximum likelihood RL", arXiv 2602.02710) normalises the group-relative reward by the group's
mean reward, ``A_i = (s_i − μ_g)/(μ_g + eps)``: for 0/1 rewards μ is the pass rate, so a rare success
gets a large advantage. Row-level (exact over every member of a group, then broadcast to tokens).

The implementations differ in eps, groups of one and a non-positive mean; ``maxrl`` takes them as
options:

===================================  =========  =====================  ====================
implementation                       eps        a group of one         μ ≤ 0
===================================  =========  =====================  ====================
SkyRL ``maxrl`` (default)            1e-6       s (``score``)          divides
authors' verl fork (tajwarfahim)     1e-6       s/eps (``over_eps``)   divides
prime-rl ``max_rl``                  0          0 (``zero``)           0 (``zero``)
===================================  =========  =====================  ====================

prime-rl's own scoring (trainable traces only, its float32 hazard) is ``max_rl_cohort``
(estimators/cohort.py), which ``--flavor prime-rl`` runs; the third row is the same formula on every row.
"""
from __future__ import annotations

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register


def maxrl_row(table: RowTable, p: dict) -> torch.Tensor:
    """SkyRL ``compute_maxrl_advantage`` (skyrl/backends/skyrl_train/utils/ppo_utils.py L1396-1428
    @a9564572)::

        n > 1:  μ = torch.mean(group scores)        (float32, the group's stacked values)
                A_i = (s_i − μ)/(μ + eps)
        n = 1:  A_i = s_i − 0 = s_i

    There is no guard on μ: μ = 0 with non-zero scores (``[−1, 1, −1, 1]``) gives ±(1/eps), a
    negative μ flips the sign, an all-zero group gives 0 — as in SkyRL.

    ``singleton=over_eps``: the authors' verl fork (tajwarfahim/maxrl @7db6bb90,
    verl/trainer/ppo/core_algos.py ``compute_p_normalization_outcome_advantage``, the MaxRL estimator
    registered as ``p_normalization``) sets a group of one's mean to 0, so it gets ``(s − 0)/(0 + eps)``.
    ``singleton=zero``, ``nonpositive_mean=zero``, ``eps=0``: prime-rl ``MaxRLAlgorithm.score_group``
    (orchestrator/algo/max_rl.py L22-28 @559b4477): ``A = (s − μ)/μ`` if ``μ > 0`` else 0.
    """
    g = table.groups
    s = table.score
    multi = g.row_size > 1
    mean = g.per_row(g.mean_f32(s))  # torch.mean of each stacked group (bit for bit)
    adv = (s - mean) / (mean + p["eps"])
    if p["nonpositive_mean"] == "zero":
        adv = torch.where(mean > 0, adv, torch.zeros_like(adv))
    single = {"score": s, "zero": torch.zeros_like(s), "over_eps": s / p["eps"]}[p["singleton"]]
    return torch.where(multi, adv, single)


def check_maxrl(p: dict) -> None:
    """singleton=over_eps divides by eps: eps must not be 0."""
    if p["singleton"] == "over_eps" and p["eps"] == 0:
        raise AdvcliError("key estimator.singleton=over_eps divides a group of one's score by estimator.eps, "
                          "which is 0", hint="set estimator.eps (the authors' fork: 1e-6) or estimator.singleton")


register(EstimatorSpec(
    name="maxrl", level="row", uses_groups=True, row_constant=True, row_fn=maxrl_row, check_params=check_maxrl,
    zero_for_uniform_groups=True,
    formula="A_i = (s_i − μ_g)/(μ_g + eps); a group of one: A_i = s_i (singleton=score), 0 (zero) or s_i/eps "
            "(over_eps); μ_g ≤ 0: divides (nonpositive_mean=divide, no guard) or 0 (zero)",
    source="SkyRL ppo_utils.compute_maxrl_advantage (L1396-1428 @a9564572); singleton=over_eps: the MaxRL "
           "authors' verl fork tajwarfahim/maxrl core_algos.compute_p_normalization_outcome_advantage "
           "(@7db6bb90); singleton=zero, nonpositive_mean=zero, eps=0: prime-rl max_rl.py MaxRLAlgorithm."
           "score_group (L22-28 @559b4477)",
    params={"eps": Key(1e-6, "epsilon added to the group mean (SkyRL and the authors' fork: 1e-6; prime-rl: 0)",
                       None, "float"),
            "singleton": Key("score", "a group of one: `score` (s, SkyRL), `zero` (prime-rl) or `over_eps` "
                             "(s/eps: its mean is taken as 0, the authors' verl fork)", ("score", "zero", "over_eps"),
                             "str"),
            "nonpositive_mean": Key("divide", "a group whose mean is ≤ 0: `divide` anyway (SkyRL, the authors' "
                                    "fork) or `zero` (prime-rl)", ("divide", "zero"), "str"),
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask (SkyRL: false, its "
                               "estimators write every response position)", None, "bool")}))
