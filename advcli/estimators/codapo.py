"""CoDaPO, confidence- and difficulty-adaptive policy optimisation (arXiv 2606.07950, ICML 2026), as verl
PR #7497 adds it (``algorithm.adv_estimator=codapo``, ``compute_codapo_outcome_advantage``,
``codapo_weight_offset=0.1``, ``codapo_accuracy_key="acc"``; open), matched to the PR's
``compute_codapo_outcome_advantage`` (verl/trainer/ppo/core_algos.py L336-415 @ cb85d41a7, the PR's commit).

Each group ("question") gets a CoDaValue that scales its GRPO advantages (CoDaWeighting)::

    ℓ_i  = Σ_t m_it·log π_old(o_it) / Σ_t m_it       each response's mean-token old log-prob
    c_g  = exp(mean_{i∈g} ℓ_i)                         confidence
    p_g  = share of the group with |accuracy − 1| ≤ 1e-6 (1 − difficulty; isclose(acc, 1, atol=1e-6, rtol=0)
                                                         on the accuracy cast to float32, L375)
    v_g  = c_g · 4·p_g·(1 − p_g)                       = c_g·[1 − 4(d_g − ½)²]
    A_i  = A_i^GRPO · (v_g + offset)

Empty responses (no trained token) are left out of c_g and p_g. A^GRPO is verl's GRPO on the row score
(the aggregate reward; ``(s − mean)/(std + eps)``, a group of one: s/(1 + eps)), so a format reward
moves the advantage but not the difficulty, which reads the accuracy column (role ``accuracy``, default
column ``acc``; map another with ``--column accuracy=NAME``). The top-K focused resampling
(``codapo_top_k``) chooses which prompts are sampled next and changes no advantage of a saved rollout.

The PR computes ℓ from the trainer's old log-probs; the paper writes the confidence with the rollout
policy's, which ``log_probs=rollout_log_probs`` takes (the inference engine's log-probs column).
"""
from __future__ import annotations

from ..config import Key
from ..lazy_torch import torch  # the registry loads without torch
from ..ops.batch import RowTable
from . import EstimatorSpec, register
from .group import EPS, grpo_row


def codapo_values(groups, mean_logprob: torch.Tensor, accuracy: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[G] v_g = exp(mean of the non-empty rows' mean-token log-prob) · 4·p·(1 − p), p the share of the
    non-empty rows whose accuracy is 1 within 1e-6 in float32, as the PR's ``torch.isclose(acc, 1, atol=1e-6,
    rtol=0)`` (float64); a group with no non-empty row: 0."""
    live = valid > 0
    n = groups.sum(live.to(torch.float64))
    lp = torch.where(live, mean_logprob.to(torch.float64), torch.zeros_like(mean_logprob, dtype=torch.float64))
    conf = torch.exp(groups.sum(lp) / n.clamp(min=1))
    acc = accuracy.to(torch.float32)
    correct = torch.isclose(acc, torch.ones_like(acc), atol=1e-6, rtol=0)
    p = groups.sum((live & correct).to(torch.float64)) / n.clamp(min=1)
    return torch.where(n > 0, conf * 4 * p * (1 - p), torch.zeros_like(conf))


def codapo_row(table: RowTable, p: dict) -> torch.Tensor:
    g = table.groups
    key = f"token_mean:{p['log_probs']}"
    value = codapo_values(g, table.columns[key], table.columns["accuracy"], table.valid_len)
    base = grpo_row(table, {"norm_by_std": p["norm_by_std"], "eps": p["eps"], "std": "torch"})
    return base * g.per_row(value + p["weight_offset"]).to(base.dtype)


def codapo_check(p: dict) -> None:
    """The PR's ``if not weight_offset >= 0: raise ValueError`` (core_algos.py L400 @ cb85d41a7)."""
    if not p["weight_offset"] >= 0:
        from ..errors import AdvcliError

        raise AdvcliError(f"estimator.weight_offset={p['weight_offset']:g}: must be non-negative (verl PR #7497 raises "
                          "ValueError: algorithm.codapo_weight_offset must be non-negative)")


def codapo_needs(p: dict) -> tuple[tuple[str, str], ...]:
    """The log-prob column estimator.log_probs names (its mean over each row's trained tokens)."""
    return ((p["log_probs"], f"estimator.log_probs={p['log_probs']}: codapo reads each response's mean token "
                             "log-prob from it"),)


register(EstimatorSpec(
    name="codapo", needs_for=codapo_needs, check_params=codapo_check,
    level="row", uses_groups=True, row_constant=True, row_fn=codapo_row,
    zero_for_uniform_groups=True, needs=("old_log_probs", "accuracy"), optional=("rollout_log_probs",),
    row_token_means=("old_log_probs", "rollout_log_probs"),
    formula="A_i = A_i^GRPO · (v_g + offset), v_g = exp(mean_{i∈g} ℓ_i) · 4·p_g·(1 − p_g), ℓ_i = Σ_t m·old_lp / Σ_t m "
            "(the response's mean-token old log-prob), p_g = share of the group with accuracy 1 (within 1e-6; empty "
            "responses left out of both); A^GRPO = (s − mean_g)/(std_g + eps) (verl grpo)",
    source="CoDaPO, arXiv 2606.07950; verl PR #7497 (open) @ cb85d41a7, core_algos.py "
           "compute_codapo_outcome_advantage (adv_estimator=codapo, codapo_weight_offset=0.1, codapo_accuracy_key=acc)",
    params={"weight_offset": Key(0.1, "δ, the advantage-weight floor added to the CoDaValue (codapo_weight_offset)",
                                 None, "float"),
            "log_probs": Key("old_log_probs", "the log-probs of the confidence: `old_log_probs` (verl PR #7497) or "
                             "`rollout_log_probs` (the paper's π_rollout)", ("old_log_probs", "rollout_log_probs"),
                             "str"),
            "norm_by_std": Key(True, "divide the GRPO advantage by the group std (norm_adv_by_std_in_grpo)", None,
                               "bool"),
            "eps": EPS,
            "mask_output": Key(True, "multiply the broadcast advantage by the response mask", None, "bool")}))
