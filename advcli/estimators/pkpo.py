"""PKPO, pass@k policy optimisation (Walder & Karkhanis, arXiv 2505.15201): the unbiased max@k reward
transform, as rllm's ``adv_estimator: pkpo`` (rllm-org/rllm PR #743,
``rllm/trainer/algorithms/rl_algo.py`` ``calculate_pkpo_advantages_per_group``).

For a group of n rewards g_1..g_n and k ≤ n, each sample is credited with the mean, over the k-subsets
that contain it, of the subset's maximum reward::

    s_i = (1/C(n,k)) · Σ_{S ∋ i, |S| = k} max_{j∈S} g_j

Sorted ascending (g_(1) ≤ … ≤ g_(n), 1-based position p), sample p is the maximum of the C(p−1, k−1)
subsets drawn below it and a non-maximal member of C(q−2, k−2) subsets whose maximum is g_(q), q > p::

    s_(p) = [C(p−1, k−1)·g_(p) + Σ_{q>p} C(q−2, k−2)·g_(q)] / C(n, k)

(the paper's eq. for the max_g@k gradient weights; binary rewards: s = k/n for a success and
(k/n)·ρ(n−1, c, k−1) for a failure, Theorem 2). rllm then centres by the group mean, A_i = s_i − mean_g(s).
Tied rewards get equal credit (the subset sum is symmetric in equal values; rllm averages them
explicitly). k is clamped to [1, n]; a group of one gets 0. k = 1 gives (g − mean)/n.
"""
from __future__ import annotations

from functools import lru_cache
from math import comb

import torch

from ..batch import RowTable
from ..config import Key
from ..errors import AdvcliError
from . import EstimatorSpec, register


@lru_cache(maxsize=256)
def _weights(n: int, k: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(self, above) weights of the sorted positions p = 0..n−1 (0-based), exact binomials divided in
    integer arithmetic then rounded once: self[p] = C(p, k−1)/C(n,k), above[p] = C(p−1, k−2)/C(n,k)."""
    total = comb(n, k)

    def c(a: int, b: int) -> int:
        return comb(a, b) if a >= b >= 0 else 0
    own = tuple(c(p, k - 1) / total for p in range(n))
    above = tuple(c(p - 1, k - 2) / total for p in range(n))
    return own, above


def pkpo_credit(groups, r: torch.Tensor, k: int) -> torch.Tensor:
    """[R] the PKPO credit s_i of every row (float64 arithmetic, returned in r's dtype); groups of one: r.

    Vectorised over the groups of each size (a loop over the distinct sizes only): sort each group,
    weight each position, a reverse cumulative sum gives Σ_{q>p} above[q]·g_(q)."""
    out = torch.empty(r.shape, dtype=torch.float64)
    r64 = r.to(torch.float64)
    for n, _, mat in groups.buckets():
        vals = r64[mat]  # [G_n, n]
        if n == 1:
            out[mat] = vals
            continue
        kk = max(1, min(k, n))
        own, above = (torch.tensor(w, dtype=torch.float64) for w in _weights(n, kk))
        srt, order = torch.sort(vals, dim=1, stable=True)
        contrib = srt * above  # the sample at q as a non-maximal member of subsets whose max it is
        suffix = torch.flip(torch.cumsum(torch.flip(contrib, [1]), 1), [1]) - contrib  # Σ_{q>p}
        credit_sorted = own * srt + suffix
        credit = torch.empty_like(credit_sorted).scatter_(1, order, credit_sorted)
        out[mat] = credit
    return out


def pkpo_row(table: RowTable, p: dict) -> torch.Tensor:
    g = table.groups
    if g is None:
        raise AdvcliError("pkpo needs groups: give a prompt_id column (or grouping.by=position with grouping.size)")
    k = int(p["k"])
    if k < 1:
        raise AdvcliError(f"key estimator.k: pass@k needs k >= 1, got {k}", hint="e.g. --set estimator.k=4")
    credit = pkpo_credit(g, table.score, k)
    if p["baseline"] == "mean":
        mean = g.sum(credit) / g.sizes.clamp(min=1).to(torch.float64)
        adv = credit - g.per_row(mean)
    else:
        adv = credit
    adv = torch.where(g.row_size > 1, adv, torch.zeros_like(adv))
    return adv.to(table.score.dtype)


register(EstimatorSpec(
    name="pkpo", level="row", uses_groups=True, row_constant=True, row_fn=pkpo_row,
    zero_for_uniform_groups=lambda p: p["baseline"] == "mean",
    formula="s_i = (1/C(n,k))·Σ_{k-subsets S ∋ i} max_{j∈S} r_j  (sorted: s_(p) = [C(p−1,k−1)·r_(p) + "
            "Σ_{q>p} C(q−2,k−2)·r_(q)]/C(n,k)); A_i = s_i − mean_g(s) (baseline=mean); k clamped to [1, n]; "
            "a group of one: 0",
    source="PKPO, arXiv 2505.15201 (Walder & Karkhanis); rllm PR #743 rl_algo.py "
           "calculate_pkpo_advantages_per_group (adv_estimator: pkpo, algorithm.pass_at_k)",
    params={"k": Key(4, "the k of pass@k to optimise (rllm algorithm.pass_at_k); clamped to the group size",
                     None, "int"),
            "baseline": Key("mean", "`mean`: s − mean_g(s) (rllm); `none`: the paper's raw s_i", ("mean", "none"),
                            "str"),
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask", None, "bool")}))
