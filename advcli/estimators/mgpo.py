"""MGPO, MaxEnt-guided policy optimisation (VibeThinker, arXiv 2511.06221), as the keys of TRL PR #5126
(``mgpo_reward_base``, ``mgpo_lambda=0.5``, ``mgpo_target_success_rate=0.5``; closed unmerged).

Each group's GRPO advantages are scaled by how far its success rate is from the target, measured by
the Bernoulli KL divergence::

    p_g   = share of the group's scored rows with r ≥ reward_base        (the empirical success rate)
    D_g   = p_g·log(p_g/p₀) + (1 − p_g)·log((1 − p_g)/(1 − p₀))          (0·log 0 = 0)
    w_g   = exp(−λ·D_g)
    A_i   = A_i^GRPO · w_g

The weight is 1 where the success rate equals p₀ (0.5: maximal entropy) and falls as the group gets
easier or harder. A^GRPO is TRL's GRPOTrainer advantage (the ``grpo_nan`` estimator: NaN-aware group
mean and std, ``(R − μ)/(σ + 1e-4)``, ``scale``/``aggregation`` as TRL).
"""
from __future__ import annotations

from ..config import Key
from ..errors import AdvcliError
from ..lazy_torch import torch  # the registry loads without torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register
from .nan_group import EPS as TRL_EPS
from .nan_group import grpo_nan_row


def bernoulli_kl(p: torch.Tensor, p0: float) -> torch.Tensor:
    """KL(Bern(p) ‖ Bern(p0)) elementwise, with 0·log 0 = 0 (float64)."""
    p = p.to(torch.float64)
    one = torch.ones_like(p)
    a = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, one) / p0), torch.zeros_like(p))
    q = 1 - p
    b = torch.where(q > 0, q * torch.log(torch.where(q > 0, q, one) / (1 - p0)), torch.zeros_like(p))
    return a + b


def mgpo_weights(groups, score: torch.Tensor, reward_base: float, lam: float, p0: float) -> torch.Tensor:
    """[R] each row's w_g = exp(−λ·KL_Bern(p_g ‖ p0)); NaN (unscored) rows are left out of p_g."""
    scored = ~torch.isnan(score)
    success = (score >= reward_base) & scored
    n = groups.sum(scored.to(torch.float64))
    p = groups.sum(success.to(torch.float64)) / n.clamp(min=1)
    return groups.per_row(torch.exp(-lam * bernoulli_kl(p, p0)))


def check_mgpo(p: dict) -> None:
    """The target success rate p₀ in (0, 1) (KL_Bern(p‖p₀) is finite)."""
    p0 = float(p["target_success_rate"])
    if not 0.0 < p0 < 1.0:
        raise AdvcliError(f"key estimator.target_success_rate: must be strictly between 0 and 1, got {p0}",
                          hint="the VibeThinker default is 0.5")


def mgpo_row(table: RowTable, p: dict) -> torch.Tensor:
    p0 = float(p["target_success_rate"])
    base = grpo_nan_row(table, p)
    w = mgpo_weights(table.groups, table.score, float(p["reward_base"]), float(p["lam"]), p0)
    return base * w.to(base.dtype)


register(EstimatorSpec(
    name="mgpo", level="row", uses_groups=True, row_constant=True, row_fn=mgpo_row, check_params=check_mgpo,
    zero_for_uniform_groups=lambda p: p["aggregation"] == "sum_then_normalize",
    formula="A_i = A_i^GRPO · exp(−λ·KL_Bern(p_g ‖ p₀)), p_g = share of the group with r ≥ reward_base, "
            "KL_Bern(p‖q) = p·log(p/q) + (1−p)·log((1−p)/(1−q)); A^GRPO = (R − μ_g)/(σ_g + 1e-4) (TRL)",
    source="MGPO, VibeThinker arXiv 2511.06221; TRL PR #5126 keys mgpo_reward_base, mgpo_lambda=0.5, "
           "mgpo_target_success_rate=0.5 (closed); A^GRPO: TRL GRPOTrainer (grpo_trainer.py L2679-2730 @f2cd5771)",
    params={"reward_base": Key(1.0, "a row succeeds when its reward is ≥ this (TRL mgpo_reward_base)", None, "float"),
            "lam": Key(0.5, "λ, the strength of the entropy weighting (TRL mgpo_lambda)", None, "float"),
            "target_success_rate": Key(0.5, "p₀, the success rate that gets weight 1 (TRL mgpo_target_success_rate)",
                                       None, "float"),
            "scale": Key("group", "the GRPO std: of the group, of the batch, or none (TRL scale_rewards)",
                         ("group", "batch", "none"), "str"),
            "aggregation": Key("sum_then_normalize", "sum_then_normalize or normalize_then_sum (TRL "
                               "multi_objective_aggregation)", ("sum_then_normalize", "normalize_then_sum"), "str"),
            "weights": Key(None, "per-component weights for normalize_then_sum (default all 1)", None, "list"),
            "eps": TRL_EPS,
            "mask_output": Key(False, "multiply the broadcast advantage by the response mask (TRL: false)", None,
                               "bool")}))
