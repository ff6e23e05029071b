"""NaN-aware sequence-level group estimators: Hugging Face TRL's GRPOTrainer and RLOOTrainer.

Both match huggingface/trl @ f2cd5771 (``trl/trainer/grpo_trainer.py`` L2679-2730,
``trl/trainer/rloo_trainer.py`` L1505-1561, ``nanstd`` in ``trl/trainer/utils.py`` L857-886). TRL
groups by position (``view(-1, G)``); each size bucket of the group index is that ``[G_n, n]`` view,
so the float32 reductions are the same torch calls on the same shapes. Batch statistics run once per
scope (a TRL generation batch). A NaN reward (a reward function returned None) is skipped by the
statistics and the row ends with advantage 0 (``nan_to_num``). TRL broadcasts the advantage over
every completion position, so ``mask_output`` is false.
"""
from __future__ import annotations

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register

EPS = Key(1e-4, "epsilon added to the std (always, no std > 0 guard)", None, "float")
MASK_OUTPUT = Key(False, "multiply the broadcast advantage by the response mask (TRL: false)", None, "bool")
STATS = Key("nan", "`nan` (TRL >= 1.6.0, #5902: a row with no reward at all is left out of the statistics, "
            "nanmean/nanstd, NaN -> 0) or `plain` (TRL 0.14.0-1.5.1: torch's mean and std of the rewards as "
            "given, every row counted, no nan_to_num)", ("nan", "plain"), "str")
SINGLE = Key("zero", "a group of one row (and a batch of one for batch statistics): `zero` (TRL >= 0.27.0, #4662: "
             "std 0; RLOO's baseline 0) or `nan` (TRL before 0.27.0: torch's std of one value is NaN, RLOO's "
             "(Σ − R)/(n − 1) is 0/0, and so the advantage; training refuses num_generations < 2 from 0.15.0, "
             "evaluation with num_generations_eval = 1 reaches it)", ("zero", "nan"), "str")


def nanstd(t: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """TRL ``nanstd``: ``sqrt(nanmean((t − nanmean t)²)·c/(c−1))``, c = non-NaN count (NaN when c ≤ 1);
    two-pass and unbiased."""
    mean = torch.nanmean(t, dim=dim, keepdim=True)
    variance = torch.nanmean((t - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(t), dim=dim, keepdim=True)
    correction = (count / (count - 1)).to(t.dtype)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    std = torch.sqrt(variance * correction)
    if keepdim:
        return std
    return std.squeeze() if dim is None else std.squeeze(dim)


def _groups(table: RowTable):
    """The row groups: present, since these estimators' specs say uses_groups and the plan refuses a run
    without groups before any math (:func:`advcli.pipeline.plan.make_plan`)."""
    return table.groups


def _per_scope(x: torch.Tensor, scopes, fn) -> torch.Tensor:
    """``fn`` on the 1-D values of each scope (a handful of training steps)."""
    out = torch.empty_like(x)
    for s in range(scopes.num_groups):
        idx = torch.nonzero(scopes.codes == s, as_tuple=True)[0]
        out[idx] = fn(x[idx])
    return out


def _components(table: RowTable, dtype) -> tuple[list[str], torch.Tensor]:
    comps = [k for k in table.columns if k.startswith("component:")]
    if not comps:
        return ["score"], table.score[:, None]
    return [c.split(":", 1)[1] for c in comps], torch.stack([table.columns[c].to(dtype) for c in comps], dim=1)


# ------------------------------------------------------------------------------------------ GRPO
def grpo_nan_row(table: RowTable, p: dict) -> torch.Tensor:
    """TRL ``GRPOTrainer._generate_and_score_completions`` (L2679-2730).

    ``sum_then_normalize``: ``R = Σ_k w_k r_k`` (the row score), ``μ`` = group nanmean,
    ``A = (R − μ)/(σ + 1e-4)`` with σ the group nanstd (``scale=group``), the batch nanstd
    (``scale=batch``: group mean, batch std) or no division (``scale=none``).
    ``normalize_then_sum``: per component ``(r_k − μ_g)/(σ_g + 1e-4)``, ``R = Σ_k w_k ·`` those,
    ``A = (R − nanmean_B R)/(nanstd_B R + 1e-4)``. Finally ``A = nan_to_num(A, 0)``.
    """
    if p.get("stats", "nan") == "plain":
        return _grpo_plain(table, p)
    g = _groups(table)
    eps = p["eps"]
    dt = table.score.dtype
    names, per_func = _components(table, dt)
    unscorable = torch.isnan(per_func).all(dim=1)
    if p["aggregation"] == "sum_then_normalize":
        rewards = table.score.clone()
        rewards[unscorable] = torch.nan
        mean = g.stacked(rewards, lambda v: torch.nanmean(v, dim=1)[:, None].expand_as(v))
        if p["scale"] == "batch":
            std = _per_scope(rewards, table.scopes,
                             lambda v: nanstd(v).expand_as(v) if v.numel() > 1 else torch.zeros_like(v))
        else:
            std = g.stacked(rewards, lambda v: nanstd(v, dim=1)[:, None].expand_as(v) if v.shape[1] > 1
                            else torch.zeros_like(v))
        adv = rewards - mean
        if p["scale"] != "none":
            adv = adv / (std + eps)
    elif p["aggregation"] == "normalize_then_sum":
        K = per_func.shape[1]
        weights = torch.tensor(p["weights"] if p["weights"] is not None else [1.0] * K, dtype=dt)
        if weights.numel() != K:
            raise AdvcliError(f"{weights.numel()} reward weights for {K} reward functions {names}")
        normed = torch.empty_like(per_func)
        for _, _, mat in g.buckets():
            grouped = per_func[mat]  # [G_n, n, K], as TRL's view(-1, G, K)
            mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
            std_k = nanstd(grouped, dim=1, keepdim=True) if grouped.shape[1] > 1 else torch.zeros_like(mean_k)
            normed[mat] = (grouped - mean_k) / (std_k + eps)
        rewards = (normed * weights[None, :]).nansum(dim=1)
        rewards[unscorable] = torch.nan

        def zscore(v):
            sd = nanstd(v).expand_as(v) if v.numel() > 1 else torch.zeros_like(v)
            return (v - torch.nanmean(v)) / (sd + eps)
        adv = _per_scope(rewards, table.scopes, zscore)
    else:
        raise AdvcliError(f"multi_objective_aggregation {p['aggregation']!r}: expected sum_then_normalize or "
                          "normalize_then_sum")
    return torch.nan_to_num(adv, nan=0.0)


def _std(v: torch.Tensor, p: dict, dim: int | None = None) -> torch.Tensor:
    """torch's unbiased std of ``v`` (over ``dim``, kept), with TRL >= 0.27.0's guard: 0 where one value
    (``single=zero``); TRL before 0.27.0 left torch's NaN (``single=nan``)."""
    n = v.numel() if dim is None else v.shape[dim]
    if n <= 1:  # torch.std of one value is NaN (without torch's degrees-of-freedom warning on the terminal)
        return torch.zeros_like(v) if p.get("single", "zero") == "zero" else torch.full_like(v, float("nan"))
    return (v.std() if dim is None else v.std(dim=dim, keepdim=True)).expand_as(v)


def _grpo_plain(table: RowTable, p: dict) -> torch.Tensor:
    """TRL 0.14.0-1.5.1 ``GRPOTrainer`` (grpo_trainer.py, e.g. L2143-2193 @v1.5.1, L497-507 @v0.14.0):
    ``R`` = the row score (``(rewards_per_func * w).nansum(1)``: no row is NaN, one with no reward at all
    scores 0; reward.nan=zero), torch's ``mean``/``std`` (unbiased, one call each, no NaN handling):
    ``A = (R − mean_g R)/(σ + eps)``, σ the group's std (scale=group), the batch's (scale=batch) or no
    division (none). ``normalize_then_sum`` (0.27.0-1.5.1): per component nanmean/nanstd z-scores in the
    group, nansum with the weights, then ``(R − mean_B R)/(std_B R + eps)`` with torch's mean and std."""
    g = _groups(table)
    eps = p["eps"]
    rewards = table.score
    if p["aggregation"] == "sum_then_normalize":
        mean = g.stacked(rewards, lambda v: v.mean(dim=1, keepdim=True).expand_as(v))
        if p["scale"] == "batch":
            std = _per_scope(rewards, table.scopes, lambda v: _std(v, p))
        else:
            std = g.stacked(rewards, lambda v: _std(v, p, dim=1))
        adv = rewards - mean
        return adv / (std + eps) if p["scale"] != "none" else adv
    names, per_func = _components(table, rewards.dtype)
    K = per_func.shape[1]
    weights = torch.tensor(p["weights"] if p["weights"] is not None else [1.0] * K, dtype=rewards.dtype)
    if weights.numel() != K:
        raise AdvcliError(f"{weights.numel()} reward weights for {K} reward functions {names}")
    normed = torch.empty_like(per_func)
    for _, _, mat in g.buckets():
        grouped = per_func[mat]
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1, keepdim=True) if grouped.shape[1] > 1 else torch.zeros_like(mean_k)
        normed[mat] = (grouped - mean_k) / (std_k + eps)
    summed = (normed * weights[None, :]).nansum(dim=1)
    return _per_scope(summed, table.scopes, lambda v: (v - v.mean()) / (_std(v, p) + eps))


register(EstimatorSpec(
    name="grpo_nan", level="row", uses_groups=True, row_constant=True, row_fn=grpo_nan_row,
    zero_for_uniform_groups=lambda p: p["aggregation"] == "sum_then_normalize",
    formula="A_i = (R_i − nanmean_g R)/(σ + eps), σ = nanstd of the group (scale=group) or of the batch "
            "(scale=batch), no division for scale=none; normalize_then_sum: per-component group z-scores, "
            "weighted sum, batch z-score; NaN → 0. stats=plain (TRL before 1.6.0): torch's mean and std, every "
            "row counted, no NaN → 0",
    source="TRL GRPOTrainer._generate_and_score_completions (grpo_trainer.py L2679-2730 @f2cd5771)",
    params={"scale": Key("group", "std of the group, of the batch, or none", ("group", "batch", "none"), "str"),
            "aggregation": Key("sum_then_normalize", "sum_then_normalize or normalize_then_sum (GDPO)",
                               ("sum_then_normalize", "normalize_then_sum"), "str"),
            "weights": Key(None, "per-component weights for normalize_then_sum (default all 1)", None, "list"),
            "eps": EPS, "mask_output": MASK_OUTPUT, "stats": STATS, "single": SINGLE}))


# ------------------------------------------------------------------------------------------ RLOO
def rloo_nan_row(table: RowTable, p: dict) -> torch.Tensor:
    """TRL ``RLOOTrainer`` (rloo_trainer.py L1538-1561) on ``R`` = the row score (weighted reward,
    clipped, minus β·Σ_t (old_lp − ref_lp)·mask when KL enters the reward)::

        b_i = (nansum_g R − R_i)/(count_scorable_g − 1);  A_i = R_i − b_i   (n = 1: 0)
        normalize: A = (A − nanmean_B A)/(nanstd_B A + 1e-4);  A = nan_to_num(A, 0)
    """
    g = _groups(table)
    if p.get("stats", "nan") == "plain":
        return _rloo_plain(table, p)
    names, per_func = _components(table, table.score.dtype)
    rewards = table.score.clone()
    rewards[torch.isnan(per_func).all(dim=1)] = torch.nan

    def loo(v):
        if v.shape[1] <= 1:
            return torch.zeros_like(v)
        counts = (~torch.isnan(v)).sum(dim=1, keepdim=True)
        total = torch.nansum(v, dim=1, keepdim=True)
        return v - (total - v) / (counts - 1)
    adv = g.stacked(rewards, loo)
    if p["normalize"]:
        adv = _per_scope(adv, table.scopes, lambda v: (v - torch.nanmean(v)) / (nanstd(v) + p["eps"]))
    return torch.nan_to_num(adv, nan=0.0)


def _rloo_plain(table: RowTable, p: dict) -> torch.Tensor:
    """TRL 0.22.0-1.5.1 ``RLOOTrainer`` (rloo_trainer.py L1284-1302 @v1.5.1, L1257-1270 @v0.22.0) on ``R`` = the
    row score (nansum of the weighted functions, a row with none scores 0, clipped, minus the KL term):
    ``A_i = R_i − (Σ_g R − R_i)/(n − 1)`` (n = 1: 0); normalize: ``(A − mean_B A)/(std_B A + eps)``, torch's."""
    def loo(v):
        if v.shape[1] <= 1:  # (Σ − R)/(n − 1) = 0/0 before 0.27.0's guard
            return torch.full_like(v, torch.nan) if p.get("single", "zero") == "nan" else torch.zeros_like(v)
        return v - (v.sum(dim=1, keepdim=True) - v) / (v.shape[1] - 1)
    adv = _groups(table).stacked(table.score, loo)
    if p["normalize"]:
        adv = _per_scope(adv, table.scopes, lambda v: (v - v.mean()) / (v.std() + p["eps"]))
    return adv


register(EstimatorSpec(
    name="rloo_nan", level="row", uses_groups=True, row_constant=True, row_fn=rloo_nan_row,
    zero_for_uniform_groups=lambda p: not p["normalize"],
    formula="A_i = R_i − (nansum_g R − R_i)/(count_g − 1) (n=1: 0); optional batch z-score (std + eps); NaN → 0. "
            "stats=plain (TRL 0.22.0-1.5.1): every row counted (count_g = n), torch's mean and std",
    source="TRL RLOOTrainer._generate_and_score_completions (rloo_trainer.py L1538-1561 @f2cd5771)",
    params={"normalize": Key(False, "batch z-score of the advantages (normalize_advantages)", None, "bool"),
            "eps": EPS, "mask_output": MASK_OUTPUT, "stats": STATS, "single": SINGLE}))
