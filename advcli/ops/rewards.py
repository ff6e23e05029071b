"""Row-level reward postprocessing: normalisation (batch / group mean and std) and clipping.

``r̃ = (r − mean)/(std + eps)`` with mean and std each ``none``, ``batch`` (over the scope) or
``group`` (over the row's group), unbiased std. ROLL ``reward_norm`` (roll/utils/functionals.py
L564-600 @8eb27cc2) with its ``[G, n]`` reshape is the reference shape, so group statistics use
``torch.std(dim=1)`` on the stacked groups.
"""
from __future__ import annotations

from ..lazy_torch import torch
from .groups import GroupIndex


def normalize_rewards(r: torch.Tensor, scopes: GroupIndex, groups: GroupIndex | None, mean_kind: str,
                      std_kind: str, eps: float, onepass: bool = False) -> torch.Tensor:
    """``onepass``: the group mean as NeMo RL's ``calculate_baseline_and_std_per_prompt`` forms it
    (:meth:`GroupIndex.onepass_baseline_std`, leave-one-out off: REINFORCE++'s ``minus_baseline``,
    advantage_estimator.py L235-242 @7ea279ab), its float32 residue on equal non-dyadic rewards included."""
    if mean_kind == "none" and std_kind == "none":
        return r
    if mean_kind in ("group", "loo") or std_kind == "group":
        assert groups is not None
    if mean_kind == "batch":
        mean = scopes.per_row(scopes.mean_f32(r))
    elif mean_kind == "group":
        mean = groups.onepass_baseline_std(r, False)[0] if onepass else groups.per_row(groups.mean_f32(r))
    elif mean_kind == "loo":  # leave-one-out mean of the other rows (OpenRLHF rloo); NaN for a group of one
        mean = (groups.per_row(groups.sum(r)) - r) / (groups.row_size.to(r.dtype) - 1)
    else:
        mean = torch.zeros_like(r)
    out = r - mean
    if std_kind == "batch":
        std = scopes.per_row(scopes.std_1d(r, scopes.mean_f32(r)))
    elif std_kind == "group":
        std = groups.per_row(groups.std_dim(r))
    else:
        return out
    return out / (std + eps)


def clip(x: torch.Tensor, bounds: list | None) -> torch.Tensor:
    if not bounds:
        return x
    lo, hi = bounds
    return x.clamp(min=lo, max=hi)


def shape_rewards(r: torch.Tensor, length: torch.Tensor, rcfg, truncated: torch.Tensor | None = None,
                  half: torch.dtype | None = None) -> torch.Tensor:
    """The reward shaping before normalisation: the DAPO overlong penalty on the response length ``length``
    (``reward.overlong.length``), then OpenRLHF's stop-properly factor on the ``truncated`` rows, then
    ``clip((r + bias)·scale)``. Returns ``r`` itself when nothing is set. ``rcfg``: the run spec's reward section
    (:class:`advcli.config.runspec.Reward`), read by its fields; ``half``: the 16-bit dtype the trainer holds its
    rewards in (OpenRLHF before 0.11.2 with a bf16 reward model), None: ``r``'s own.

    - AReaL (PPOActor._compute_advantages L186-206 @cbff54d6; functional.py L937 ``reward_overlong_penalty``):
      ``r += clamp(−(n − (max_tokens − tokens))/tokens·factor, max=0)`` in the reward's dtype, n = Σ mask,
      not capped;
    - OpenRLHF (openrlhf/trainer/ppo_utils/length_penalty.py @3c3be623, ``apply_overlong_penalty`` and
      ``apply_stop_properly_penalty``, run first in compute_advantages_and_returns): ``e = min(n − (max_tokens −
      tokens), tokens)`` (``cap``); where ``e > 0``, ``p = −e/tokens·factor`` in Python floats (``exact``), added
      in place: ``rewards[j] += p`` rounds p to the rewards' dtype first, then the sum; then on truncated rows
      ``r ← r·c`` (c ≥ 0, float32 arithmetic) or ``r ← c`` (c < 0)."""
    over = rcfg.overlong
    tokens, factor = over.tokens, over.factor
    bias, scale, bounds = rcfg.bias, rcfg.scale, rcfg.shape_clip
    held = half or r.dtype

    def as_held(x: torch.Tensor) -> torch.Tensor:
        return x.to(held).to(r.dtype) if half is not None else x

    if tokens is not None and over.exact:
        n = length.to(torch.float64)  # exact integers
        excess = n - (float(over.max_tokens) - float(tokens))
        if over.cap:
            excess = torch.clamp(excess, max=float(tokens))
        penalty = (-excess / float(tokens) * float(factor)).to(held).to(r.dtype)  # a Python float, then r's dtype
        r = torch.where(excess > 0, as_held(r + penalty), r)
    elif tokens is not None:
        expected = int(over.max_tokens) - int(tokens)
        excess = (length.to(torch.int64) - expected).to(r.dtype)  # exact integers
        if over.cap:
            excess = torch.clamp(excess, max=int(tokens))
        penalty = torch.clamp(-excess / int(tokens) * float(factor), max=0)
        r = r + penalty
    coef = rcfg.truncated_factor
    if coef is not None and truncated is not None:
        cut = truncated != 0
        if coef < 0:
            scaled = as_held(torch.full_like(r, float(coef)))
        else:
            scaled = as_held(r * torch.tensor(float(coef), dtype=torch.promote_types(r.dtype, torch.float32)))
        r = torch.where(cut, scaled.to(r.dtype), r)
    if bias != 0.0 or scale != 1.0 or bounds:
        r = (r + bias) * scale
        r = clip(r, bounds)
    return r


def range_map(r: torch.Tensor, bounds) -> torch.Tensor:
    """NeMo RL's ``scale_rewards`` (grpo.py L1831-1874 @7ea279ab): ``tmin + (clamp(r, smin, smax) − smin) /
    (smax − smin)·(tmax − tmin)`` in r's dtype, ``bounds`` = [smin, smax, tmin, tmax] (Python floats, as NeMo's
    config holds them); returns ``r`` itself when ``bounds`` is None."""
    if bounds is None:
        return r
    smin, smax, tmin, tmax = (float(b) for b in bounds)
    return tmin + (torch.clamp(r, min=smin, max=smax) - smin) / (smax - smin) * (tmax - tmin)
