"""SkyRL's ``advantage_batch_normalize``, composed with the whitening that precedes it.

SkyRL ``RayPPOTrainer._normalize_advantages`` step 1 (skyrl/train/trainer.py L1477-1481 @a9564572)
on the step's right-aligned ``[B, T]`` advantages (``T`` = the longest response of the step, the
padding cells 0 for the outcome estimators and reinforce++)::

    mean = advantages.mean()                                   # all B·T cells: Σ A / (B·T)
    var  = ((advantages − mean)² · response_mask).sum() / response_mask.sum()
    A'   = (advantages − mean) · clamp(var, min=1e-8).rsqrt()

The mean is over the whole grid (padding included), the variance is biased, about that mean, over the
N response positions. Both are functions of the per-scope moments Σ1, ΣA, ΣA² over those positions,
which the pipeline already accumulates exactly for whitening. When the advantages were first whitened,
``y = (x − μ)·r`` (reinforce++, gae), y's moments follow from x's, and the two steps compose into one
affine map ``(x − μ')·r'`` — so no second pass over the tokens is needed.
"""
from __future__ import annotations

from ..lazy_torch import torch
from .whiten import MomentSums

VAR_FLOOR = 1e-8  # clamp(var, min=1e-8)


def grid_cells(lengths: torch.Tensor, scope_codes: torch.Tensor, num_scopes: int) -> torch.Tensor:
    """[S] float64 ``B_s · T_s``: rows of scope s times its longest row (the cells of SkyRL's padded grid)."""
    rows = torch.bincount(scope_codes, minlength=num_scopes).to(torch.float64)
    longest = torch.zeros(num_scopes, dtype=torch.int64).scatter_reduce_(
        0, scope_codes, lengths.to(torch.int64), reduce="amax", include_self=True)
    return rows * longest.to(torch.float64)


def compose(sums: MomentSums, mean: torch.Tensor, rstd: torch.Tensor,
            cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ', r') per scope (float64) such that ``(x − μ')·r'`` is the batch normalisation of
    ``y = (x − μ)·r``, where ``sums`` holds Σ1, Σx, Σx² over the scope's response positions::

        Σy  = r·(Σx − N·μ)            Σy² = r²·(Σx² − 2μΣx + Nμ²)
        m   = Σy / cells              v   = (Σy² − 2mΣy + N·m²) / N          (biased)
        r₂  = rsqrt(max(v, 1e-8))     μ'  = μ + m/r,   r' = r·r₂

    (without a preceding whitening pass μ = 0, r = 1). A scope with no response position keeps μ, r.
    ``sums.grid_total`` (when set) replaces Σx in the grid mean: the grid's padding cells hold values too
    (SkyRL 0.1.0's step-wise copy: a turn shorter than its last step carries the value past its own end).
    """
    n, s1, s2 = sums.count, sums.total, sums.total_sq
    sy = rstd * (s1 - n * mean)
    syy = rstd * rstd * (s2 - 2 * mean * s1 + n * mean * mean)
    grid = sy if sums.grid_total is None else rstd * (sums.grid_total - n * mean)  # the grid's Σ, padding included
    m = grid / cells.clamp(min=1)
    var = ((syy - 2 * m * sy + n * m * m) / n.clamp(min=1)).clamp(min=0)
    r2 = torch.rsqrt(var.clamp(min=VAR_FLOOR))
    empty = n == 0
    new_mean = torch.where(empty, mean, mean + m / rstd)
    new_rstd = torch.where(empty, rstd, rstd * r2)
    return new_mean, new_rstd


AMPLIFIED_RSTD = 1e3  # a final scale this large means the variance sat at (or near) its epsilon floor


def amplified(sums: MomentSums, rstd: torch.Tensor) -> torch.Tensor:
    """[S] bool: scopes whose values are not all 0 but whose final scale ``rstd`` is at least
    :data:`AMPLIFIED_RSTD` — the variance is at or below the epsilon floor (values all but equal), so the
    normalisation multiplies the framework's float32 rounding residues (its mean an ulp off the common
    value, a group estimator's residue) by up to ``rsqrt(1e-8) = 1e4``: such advantages are float32
    artefacts, not signal, and cannot be reproduced across summation orders."""
    return (rstd >= AMPLIFIED_RSTD) & (sums.total_sq > 0) & (sums.count > 0)
