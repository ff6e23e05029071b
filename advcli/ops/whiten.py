"""Token-level whitening over a scope (a training step): masked, token-weighted statistics.

Statistics are accumulated per scope across chunks (float64 sums of ``v·m``, ``v²·m`` and ``m``),
so a scope split over many chunks gets exactly the statistics of the whole scope. The variants the
frameworks use are parameters:

- ``unbiased``: var × N/(N−1) (verl ``masked_var``, ROLL, NeMo PPO gae) or not (NeMo RF++/raw_reward,
  OpenRLHF);
- ``eps_mode``: ``add`` → ``(var + eps)^-½`` (verl, ROLL, NeMo gae) or ``max`` → ``max(var, eps)^-½``
  (NeMo RF++, OpenRLHF);
- ``shift_mean``: subtract the mean (always) and ``scale`` (divide by the std; OpenRLHF's
  ``no_std_norm`` centres only);
- ``mean_eps``: verl and ROLL divide the masked sums by ``Σm + 1e-8``.

verl ``masked_whiten`` (verl/utils/torch_functional.py L273-346 @1dda039b):
``(v − μ)·rsqrt(var + 1e-8)``, ``μ = Σvm/(Σm + 1e-8)``, ``var = Σ(v−μ)²m/(Σm + 1e-8) · N/(N−1)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MomentSums:
    """Per-scope float64 sums Σm, Σvm, Σv²m."""

    count: torch.Tensor
    total: torch.Tensor
    total_sq: torch.Tensor

    @staticmethod
    def zeros(num_scopes: int) -> "MomentSums":
        z = lambda: torch.zeros(num_scopes, dtype=torch.float64)  # noqa: E731
        return MomentSums(z(), z(), z())

    def add(self, values: torch.Tensor, weights: torch.Tensor, scope_of_token: torch.Tensor) -> None:
        """Accumulate one chunk (any device); the sums stay on the CPU in float64."""
        v = values.to(torch.float64)
        w = weights.to(torch.float64)
        vw = v * w
        parts = torch.zeros(3, self.count.numel(), dtype=torch.float64, device=v.device)
        parts[0].index_add_(0, scope_of_token, w)
        parts[1].index_add_(0, scope_of_token, vw)
        parts[2].index_add_(0, scope_of_token, v * vw)
        parts = parts.cpu()
        self.count += parts[0]
        self.total += parts[1]
        self.total_sq += parts[2]


@dataclass(frozen=True)
class WhitenSpec:
    unbiased: bool = True
    eps: float = 1e-8
    eps_mode: str = "add"  # "add": rsqrt(var + eps); "max": rsqrt(max(var, eps))
    mean_eps: float = 1e-8  # μ = Σvm/(Σm + mean_eps)
    scale: bool = True  # False: centre only
    require_two: bool = True  # verl/ROLL masked_var raise for N <= 1 (reported as an error)


def scope_mean_rstd(sums: MomentSums, spec: WhitenSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-scope (mean, 1/std) in float64 from accumulated sums."""
    n = sums.count
    mean = sums.total / (n + spec.mean_eps)
    # Σ(v−μ)²m = Σv²m − 2μΣvm + μ²Σm
    ss = (sums.total_sq - 2 * mean * sums.total + mean * mean * n).clamp(min=0)
    var = ss / (n + spec.mean_eps)
    if spec.unbiased:
        var = var * n / (n - 1).clamp(min=1e-300)
    if not spec.scale:
        rstd = torch.ones_like(var)
    elif spec.eps_mode == "max":
        rstd = torch.rsqrt(var.clamp(min=spec.eps))
    else:
        rstd = torch.rsqrt(var + spec.eps)
    return mean, rstd


def apply_whiten(values: torch.Tensor, mean_tok: torch.Tensor, rstd_tok: torch.Tensor) -> torch.Tensor:
    """``(v − μ)·rstd`` at every position (not re-masked: the caller decides)."""
    return ((values.to(torch.float64) - mean_tok) * rstd_tok).to(values.dtype)
