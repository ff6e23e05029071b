"""Per-token KL estimators between the policy and the reference, one registry for every kind.

``d = logp − ref_logp`` (the sampled token's log-ratio). Each kind is registered once with its
formula; the clamps are parameters because the frameworks differ:

| framework | input clamp on −d | output clamp | source |
|---|---|---|---|
| verl ``kl_penalty_forward`` | ±20 (k3 only) | ±10 (k3 only) | core_algos.py L2215-2250 @1dda039b |
| NeMo RL ``calculate_kl`` | ±20 (all kinds) | ±10 (all kinds) | nemo_rl/algorithms/utils.py L42-101 @7ea279ab |
| ROLL ``compute_approx_kl`` | none | ±10 (k3 only) | roll/utils/functionals.py L181-211 @8eb27cc2 |
| OpenRLHF ``compute_approx_kl`` | none | ±10 (all kinds) | openrlhf/models/utils.py L64-95 @3c3be623 |
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..lazy_torch import torch

KL_KINDS: dict[str, KLKind] = {}


@dataclass(frozen=True)
class KLKind:
    name: str
    formula: str
    fn: Callable[[torch.Tensor], torch.Tensor]  # of x = −d = ref − logp, already input-clamped
    # |fn| is non-decreasing in |x| on each side of 0 (fn(0) = 0): over any interval of x its largest
    # |value| is at one of the two ends — lets kl_clamp_flags rule out the output clamp from min/max x
    ends_bound: bool = False


def register_kl(name: str, formula: str, ends_bound: bool = False):
    def deco(fn):
        KL_KINDS[name] = KLKind(name, formula, fn, ends_bound)
        return fn
    return deco


@register_kl("k1", "d = logp − ref", ends_bound=True)
def _k1(x):
    return -x


@register_kl("abs", "|logp − ref|", ends_bound=True)
def _abs(x):
    return x.abs()


@register_kl("k2", "½·(logp − ref)²", ends_bound=True)
def _k2(x):
    return 0.5 * x * x


@register_kl("k3", "e^x − x − 1, x = ref − logp", ends_bound=True)
def _k3(x):
    return torch.exp(x) - x - 1


def kl_per_token(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str, input_clamp: float | None = None,
                 output_clamp: float | None = None) -> torch.Tensor:
    """The per-token KL estimate of ``kind`` (k1, abs, k2, k3), with optional symmetric clamps.

    ``x = clamp(ref − logp, ±input_clamp)``; ``kl = clamp(f(x), ±output_clamp)``.
    """
    x = ref_logp - logp
    if input_clamp is not None:
        x = x.clamp(-input_clamp, input_clamp)
    kl = KL_KINDS[kind].fn(x)
    if output_clamp is not None:
        kl = kl.clamp(-output_clamp, output_clamp)
    return kl


def kl_clamp_flags(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str, input_clamp: float | None,
                   output_clamp: float | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-token flags of where :func:`kl_per_token`'s input clamp and output clamp changed the value
    (None for a clamp that is off). For the diagnostics: the same rule as the estimate itself.

    A clamp that provably changed nothing in the chunk gives a 0-dim ``False`` instead of a per-token
    tensor (it broadcasts the same): the input clamp when max|x| ≤ input_clamp; the output clamp,
    for kinds whose |f| is largest at the ends of x's range (``ends_bound``), when |f| at min x and
    max x stays below the clamp by a 1e-3 margin (so an ulp of rounding in f cannot matter). One
    min/max pass instead of the ~8 element-wise passes of the flags, on every chunk with no clamp."""
    x = ref_logp - logp
    if x.numel():
        lo, hi = torch.aminmax(x)
        lo, hi = float(lo), float(hi)
        no = torch.zeros((), dtype=torch.bool, device=x.device)
        inside = input_clamp is None or max(-lo, hi) <= input_clamp
        if inside and (output_clamp is None or KL_KINDS[kind].ends_bound):
            flag_in = None if input_clamp is None else no
            if output_clamp is None:
                return flag_in, None
            ends = KL_KINDS[kind].fn(torch.tensor([lo, hi], dtype=x.dtype, device=x.device)).abs()
            if float(ends.max()) <= output_clamp * (1 - 1e-3):
                return flag_in, no
    flag_in = x.abs() > input_clamp if input_clamp is not None else None
    if input_clamp is not None:
        x = x.clamp(-input_clamp, input_clamp)
    flag_out = KL_KINDS[kind].fn(x).abs() > output_clamp if output_clamp is not None else None
    return flag_in, flag_out
