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

from dataclasses import dataclass
from typing import Callable

import torch

KL_KINDS: dict[str, "KLKind"] = {}


@dataclass(frozen=True)
class KLKind:
    name: str
    formula: str
    fn: Callable[[torch.Tensor], torch.Tensor]  # of x = −d = ref − logp, already input-clamped


def register_kl(name: str, formula: str):
    def deco(fn):
        KL_KINDS[name] = KLKind(name, formula, fn)
        return fn
    return deco


@register_kl("k1", "d = logp − ref")
def _k1(x):
    return -x


@register_kl("abs", "|logp − ref|")
def _abs(x):
    return x.abs()


@register_kl("k2", "½·(logp − ref)²")
def _k2(x):
    return 0.5 * x * x


@register_kl("k3", "e^x − x − 1, x = ref − logp")
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
    (None for a clamp that is off). For the diagnostics: the same rule as the estimate itself."""
    x = ref_logp - logp
    flag_in = x.abs() > input_clamp if input_clamp is not None else None
    if input_clamp is not None:
        x = x.clamp(-input_clamp, input_clamp)
    flag_out = KL_KINDS[kind].fn(x).abs() > output_clamp if output_clamp is not None else None
    return flag_in, flag_out
