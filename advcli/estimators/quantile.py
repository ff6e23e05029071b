"""Quantile advantage estimation, QAE (Wu et al., "Quantile Advantage Estimation for Entropy-Safe
Reasoning", arXiv 2509.22611): the GRPO/DAPO group baseline with the group's K-quantile instead of its
mean.

::

    b_g = Q_K({r_j}_g)          the empirical K-quantile: the ⌈K·n⌉-th smallest reward (inverse CDF)
    A_i = (r_i − b_g)/(std_g(r) + eps)    (norm_by_std; else r_i − b_g)

With binary rewards and success rate p, ``Q_K = 0`` when ``p ≤ 1 − K`` (a hard query: only the rare
successes get a non-zero, positive advantage) and ``Q_K = 1`` when ``p > 1 − K`` (an easy query: only the
remaining failures get a negative advantage) — the paper's two-regime gate; K is the quantile level it
tunes. ``quantile=linear`` takes the interpolated quantile instead (``torch.quantile``'s default, for
comparison). No framework ships it; the formula is the paper's.
"""
from __future__ import annotations

import math

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch  # the registry loads without torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register


def group_quantile(groups, r: torch.Tensor, level: float, method: str) -> torch.Tensor:
    """[R] each row's group K-quantile of r: ``inverted_cdf`` = the ⌈K·n⌉-th smallest (at least the
    first), ``linear`` = sorted[h] + (h − ⌊h⌋)·(sorted[⌊h⌋+1] − sorted[⌊h⌋]) with h = K·(n − 1)."""
    out = torch.empty_like(r)
    for n, _, mat in groups.buckets():
        srt = torch.sort(r[mat], dim=1).values  # [G_n, n]
        if method == "inverted_cdf":
            j = min(max(math.ceil(level * n - 1e-12), 1), n) - 1
            q = srt[:, j]
        else:
            h = level * (n - 1)
            lo = int(math.floor(h))
            hi = min(lo + 1, n - 1)
            q = srt[:, lo] + (h - lo) * (srt[:, hi] - srt[:, lo])
        out[mat] = q[:, None].expand(-1, n)
    return out


def check_qae(p: dict) -> None:
    """The quantile level K in [0, 1]."""
    level = float(p["k"])
    if not 0.0 <= level <= 1.0:
        raise AdvcliError(f"key estimator.k: the quantile level K must be in [0, 1], got {level}",
                          hint="e.g. --set estimator.k=0.4")


def qae_row(table: RowTable, p: dict) -> torch.Tensor:
    g = table.groups
    level = float(p["k"])
    s = table.score
    adv = s - group_quantile(g, s, level, p["quantile"])
    multi = g.row_size > 1
    if p["norm_by_std"]:
        mean = g.mean_f32(s)
        std = g.std_1d(s, mean)  # torch.std (unbiased), NaN for a group of one
        adv = adv / (g.per_row(std) + p["eps"])
    return torch.where(multi, adv, torch.zeros_like(adv))


register(EstimatorSpec(
    name="qae", level="row", uses_groups=True, row_constant=True, row_fn=qae_row, check_params=check_qae,
    zero_for_uniform_groups=True,
    formula="A_i = (r_i − Q_K(r_g))/(std_g(r) + eps) [norm_by_std; else r_i − Q_K(r_g)], Q_K = the ⌈K·n⌉-th "
            "smallest reward of the group (inverse CDF; binary rewards: 0 if p ≤ 1 − K else 1); a group of one: 0",
    source="Quantile Advantage Estimation, arXiv 2509.22611 (Wu et al.): the GRPO/DAPO baseline replaced by the "
           "group K-quantile; no framework implementation",
    params={"k": Key(0.5, "the quantile level K in [0, 1] (the paper tunes it; 0.5 = the median)", None, "float"),
            "quantile": Key("inverted_cdf", "`inverted_cdf` (the paper's empirical quantile) or `linear` "
                            "(interpolated, torch.quantile's default)", ("inverted_cdf", "linear"), "str"),
            "norm_by_std": Key(True, "divide by the group std + eps, as GRPO/DAPO", None, "bool"),
            "eps": Key(1e-6, "epsilon added to the group std", None, "float"),
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask", None, "bool")}))
