"""PKPO, pass@k policy optimisation (Walder & Karkhanis, arXiv 2505.15201): the unbiased max@k reward
transform, as rllm's ``adv_estimator: pkpo`` (rllm-org/rllm PR #743,
``rllm/trainer/algorithms/rl_algo.py`` ``calculate_pkpo_advantages_per_group``).

For a group of n rewards g_1..g_n and k ≤ n, each sample is credited with the mean, over the k-subsets
that contain it, of the subset's maximum reward::

    s_i = (1/C(n,k)) · Σ_{S ∋ i, |S| = k} max_{j∈S} g_j

Sorted ascending (g_(1) ≤ … ≤ g_(n), 1-based position p), sample p is the maximum of the C(p−1, k−1)
subsets drawn below it and a non-maximal member of C(q−2, k−2) subsets whose maximum is g_(q), q > p::

    s_(p) = [C(p−1, k−1)·g_(p) + Σ_{q>p} C(q−2, k−2)·g_(q)] / C(n, k)

(the paper's eq. 19 for the max_g@k gradient weights; binary rewards: s = k/n for a success and
(k/n)·ρ(n−1, c, k−1) for a failure, Theorem 2). rllm then centres by the group mean, A_i = s_i − mean_g(s)
(``baseline=mean``). Tied rewards get equal credit (the subset sum is symmetric in equal values; rllm
averages them explicitly). k is clamped to [1, n]; a group of one gets 0. k = 1 gives (g − mean)/n.

The paper's own baselines, with ρ_k(M) = mean over the k-subsets of M of their max (so that
Σ_{j∈M} s_j(M) = k·ρ_k(M)) and M∖i the group without sample i:

- ``baseline=loo`` (eq. 29): s_i − (1/(n−1))·Σ_{j≠i} s_j(M∖i) = s_i − k·ρ_k(M∖i)/(n−1), each s_j(M∖i)
  normalised by C(n−1, k) as the paper's eq. 31 does; k clamped to [1, n − 1]. As defined it is not 0 on
  a uniform group (k·v/n − k·v/(n−1));
- ``baseline=loo_minus_one`` (eq. 33, the paper's recommendation):
  (1/C(n,k))·Σ_{S∋i} [max_S r − max_{S∖i} r] = s_i − (k/n)·ρ_{k−1}(M∖i); needs k ≥ 2;
- ``baseline=none``: s_i itself.

ρ_k(M∖i) of every i at once: in sorted order the samples below i keep their rank and those above move
down one, so ρ_k(M∖(p)) = [Σ_{q<p} C(q−1, k−1)·r_(q) + Σ_{q>p} C(q−2, k−1)·r_(q)] / C(n−1, k) (prefix
and suffix sums).
"""
from __future__ import annotations

from functools import lru_cache
from math import comb

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch  # the registry loads without torch
from ..ops.batch import RowTable
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
        out[mat] = r64[mat] if n == 1 else pkpo_credit_sorted_bucket(r64[mat], max(1, min(k, n)))
    return out


@lru_cache(maxsize=256)
def _without_weights(n: int, k: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(below, above) weights of ρ_k(M∖(p)) for sorted 0-based positions: a sample below p keeps its rank
    (C(q, k−1)/C(n−1, k)), one above moves down one (C(q−1, k−1)/C(n−1, k))."""
    total = comb(n - 1, k)

    def c(a: int, b: int) -> int:
        return comb(a, b) if a >= b >= 0 else 0
    return (tuple(c(q, k - 1) / total for q in range(n)), tuple(c(q - 1, k - 1) / total for q in range(n)))


def pkpo_advantages(groups, r: torch.Tensor, k: int, baseline: str) -> torch.Tensor:
    """[R] float64: s_i with the chosen baseline (``mean``, ``loo``, ``loo_minus_one``, ``none``); groups of
    one: 0. One sort per size bucket; prefix/suffix sums give every leave-one-out ρ at once."""
    credit = pkpo_credit(groups, r, k)
    if baseline == "mean":
        mean = groups.sum(credit) / groups.sizes.clamp(min=1).to(torch.float64)
        return torch.where(groups.row_size > 1, credit - groups.per_row(mean), torch.zeros_like(credit))
    if baseline == "none":
        return torch.where(groups.row_size > 1, credit, torch.zeros_like(credit))
    out = torch.zeros_like(credit)
    r64 = r.to(torch.float64)
    for n, _, mat in groups.buckets():
        if n == 1:
            continue
        if baseline == "loo":
            kk = max(1, min(k, n - 1))
            s_k = pkpo_credit_sorted_bucket(r64[mat], kk)
            coef, kr = kk / (n - 1), kk
        else:  # loo_minus_one
            kk = max(2, min(k, n))
            s_k = pkpo_credit_sorted_bucket(r64[mat], kk)
            coef, kr = kk / n, kk - 1
        srt, order = torch.sort(r64[mat], dim=1, stable=True)
        below, above = (torch.tensor(w, dtype=torch.float64) for w in _without_weights(n, kr))
        lo = torch.cumsum(srt * below, 1) - srt * below  # Σ_{q<p}
        hi = torch.flip(torch.cumsum(torch.flip(srt * above, [1]), 1), [1]) - srt * above  # Σ_{q>p}
        rho = torch.empty_like(srt).scatter_(1, order, lo + hi)
        out[mat] = s_k - coef * rho
    return out


def pkpo_credit_sorted_bucket(vals: torch.Tensor, k: int) -> torch.Tensor:
    """[G_n, n] the credit s_i of one size bucket (rows in input order), k already clamped."""
    n = vals.shape[1]
    own, above = (torch.tensor(w, dtype=torch.float64) for w in _weights(n, k))
    srt, order = torch.sort(vals, dim=1, stable=True)
    contrib = srt * above
    suffix = torch.flip(torch.cumsum(torch.flip(contrib, [1]), 1), [1]) - contrib
    return torch.empty_like(srt).scatter_(1, order, own * srt + suffix)


def check_pkpo(p: dict) -> None:
    """k >= 1, and k >= 2 with baseline=loo_minus_one (the paper's eq. 33)."""
    k = int(p["k"])
    if k < 1:
        raise AdvcliError(f"key estimator.k: pass@k needs k >= 1, got {k}", hint="e.g. --set estimator.k=4")
    if p["baseline"] == "loo_minus_one" and k < 2:
        raise AdvcliError("key estimator.k: baseline=loo_minus_one (the paper's eq. 33) needs k >= 2, got 1",
                          hint="k = 1 is plain pass@1: use baseline=mean, or --set estimator.k=2")


def pkpo_row(table: RowTable, p: dict) -> torch.Tensor:
    """Groups present and parameters checked by the spec (:func:`check_pkpo`)."""
    return pkpo_advantages(table.groups, table.score, int(p["k"]), p["baseline"]).to(table.score.dtype)


register(EstimatorSpec(
    name="pkpo", level="row", uses_groups=True, row_constant=True, row_fn=pkpo_row, check_params=check_pkpo,
    zero_for_uniform_groups=lambda p: p["baseline"] in ("mean", "loo_minus_one"),
    formula="s_i = (1/C(n,k))·Σ_{k-subsets S ∋ i} max_{j∈S} r_j  (sorted: s_(p) = [C(p−1,k−1)·r_(p) + "
            "Σ_{q>p} C(q−2,k−2)·r_(q)]/C(n,k)); A_i = s_i − mean_g(s) (baseline=mean, rllm), s_i − k·ρ_k(g∖i)/(n−1) "
            "(loo, eq. 29), s_i − (k/n)·ρ_{k−1}(g∖i) (loo_minus_one, eq. 33), s_i (none); ρ_k = mean max of the "
            "k-subsets; k clamped to the group size; a group of one: 0",
    source="PKPO, arXiv 2505.15201 (Walder & Karkhanis); rllm PR #743 rl_algo.py "
           "calculate_pkpo_advantages_per_group (adv_estimator: pkpo, algorithm.pass_at_k)",
    params={"k": Key(4, "the k of pass@k to optimise (rllm algorithm.pass_at_k); clamped to the group size",
                     None, "int"),
            "baseline": Key("mean", "`mean`: s − mean_g(s) (rllm); the paper's `loo` (eq. 29) and `loo_minus_one` "
                            "(eq. 33, its recommendation); `none`: the raw s_i",
                            ("mean", "loo", "loo_minus_one", "none"), "str"),
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask", None, "bool")}))
