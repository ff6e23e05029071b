"""Passes 1-2 together: :func:`resolve` builds the row table and everything resolved from it
before the write pass (KL coefficients, post-processed rewards, row-level advantages, token
group statistics, whitening moments).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..batch import RowTable
from ..config import get_path
from ..errors import AdvcliError
from ..io.reader import InputSet
from ..ops.rewards import clip as clip_values, normalize_rewards
from ..ops.whiten import MomentSums, WhitenSpec
from .moments import token_moment_pass, whiten_stats
from .plan import Plan, ProgressFn
from .read import allows_nan
from .rows import Resolved, defer_row_kl, kl_coefs, row_table_pass, scopes_and_groups
from .tokens import token_group_pass


def resolve(plan: Plan, inputs: InputSet, chunk_rows: int, progress: ProgressFn | None = None,
            token_moments: Callable | None = None, defer_kl: bool = False, row_pass: Callable | None = None):
    """Passes 1-2: the per-row table of the whole input and all that is resolved from it (scopes,
    groups, per-step KL coefficients, post-processed rewards, row-level advantages, token group
    statistics, whitening moments). Returns ``(res, row, betas, kls, warnings)``.

    ``defer_kl``: where :func:`defer_row_kl` allows, leave the per-row KL (``row["kl_sum"]``,
    ``row["kl_mean"]``, ``kls`` and the KL part of the row score) to the write pass, which must then
    call :func:`finish_row_kl` (``res.kl_deferred`` says so).

    ``token_moments`` (default :func:`token_moment_pass`, same signature) computes the per-scope
    moments of token rewards/advantages; the Ray engine passes one that runs on its workers.
    ``row_pass`` (default :func:`row_table_pass`, same signature and result) likewise for pass 1.
    """
    cfg = plan.cfg
    token_moments = token_moments or token_moment_pass
    # pass 1: the row table
    deferred = defer_kl and defer_row_kl(plan)
    row, comps, keys = (row_pass or row_table_pass)(plan, inputs, chunk_rows, progress, row_kl=not deferred)
    R = inputs.num_rows
    scopes, groups, step_values = scopes_and_groups(plan, keys, R, inputs.paths[0])
    correction = None
    if plan.correction is not None:  # rollout correction: step statistics; the estimator's Σ mask is m'
        from ..correction import correction_pass
        correction, row["valid"] = correction_pass(plan, inputs, scopes, step_values, chunk_rows, progress)
    betas, kls = kl_coefs(plan, scopes, row.get("kl_mean"))
    beta_row = scopes.per_row(torch.tensor(betas, dtype=torch.float64)) if plan.kl_on else torch.zeros(R, dtype=torch.float64)
    if plan.reward_source == "components":
        weights = get_path(cfg, "reward.weights") or [1.0] * len(plan.components)
        if len(weights) != len(plan.components):
            raise AdvcliError(f"key reward.weights: {len(weights)} weights for {len(plan.components)} components")
        if allows_nan(plan):  # TRL: (rewards_per_func * weights).nansum(dim=1); NaN where every function is NaN
            per_func = torch.stack([comps[c] for c in plan.components], dim=1)
            raw = (per_func * torch.tensor([float(w) for w in weights], dtype=plan.dtype)).nansum(dim=1)
            raw[torch.isnan(per_func).all(dim=1)] = float("nan")
        else:
            raw = sum(torch.tensor(float(w), dtype=plan.dtype) * comps[c] for w, c in zip(weights, plan.components))
    elif plan.reward_source == "reward":
        raw = row.get("reward", torch.zeros(R, dtype=plan.dtype))
    else:
        raw = row["score_sum"]
    ncfg = plan.cfg["reward"]["normalize"]
    reward_row = raw
    if plan.reward_source != "token_level_scores":
        if plan.group_by == "position":  # the frameworks' own [G, n] reshape of each batch
            from ..ops.blocks import block_normalize
            reward_row = block_normalize(raw, scopes, int(get_path(cfg, "grouping.size")), ncfg["mean"],
                                         ncfg["std"], ncfg["eps"])
        else:
            reward_row = normalize_rewards(raw, scopes, groups, ncfg["mean"], ncfg["std"], ncfg["eps"])
        reward_row = clip_values(reward_row, get_path(cfg, "reward.clip"))
    # the row score the group estimators see: Σ_t token_level_rewards
    if plan.reward_source == "token_level_scores":
        score = raw.clone()
    else:
        keep = row["keep"] if get_path(cfg, "reward.mask_placed") else (row["length"] > 0)
        score = torch.where(keep, reward_row, torch.zeros_like(reward_row))
    if plan.kl_on and not deferred:
        score = (score - (beta_row * row["kl_sum"].to(torch.float64)).to(plan.dtype))
    columns = {f"component:{c}": comps[c] for c in plan.components}
    if "reward_baseline" in row:
        columns["reward_baseline"] = row["reward_baseline"]
    if plan.spec.name == "gdpo" and not plan.components:
        columns["component:score"] = score
    table = RowTable(score=score, valid_len=row["valid"], length=row["length"], scopes=scopes, groups=groups,
                     columns=columns)
    adv_row = plan.spec.row_fn(table, plan.params) if plan.spec.level == "row" else None
    res = Resolved(scopes, groups, step_values, beta_row, reward_row, adv_row, table)
    res.raw_score, res.row_keys, res.kl_deferred = raw, keys, deferred
    res.correction = correction
    if plan.spec.token_group_stats is not None:  # pass 1b: per-(group, position) token sums
        res.token_stats = token_group_pass(plan, inputs, res, chunk_rows, progress)
    warnings: list[str] = list(plan.warnings)

    # pass 2a: token-reward whitening statistics (reward.whiten_tokens, ROLL whiten_rewards)
    if get_path(cfg, "reward.whiten_tokens"):
        sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=True)
        res.tlr_mean, res.tlr_rstd = whiten_stats(plan, sums, WhitenSpec(), step_values, "skip")
    # pass 2: whitening statistics
    if plan.whiten:
        if plan.spec.level == "row":
            sums = MomentSums.zeros(scopes.num_groups)
            w = row["valid"].to(torch.float64)
            sums.add(adv_row.to(torch.float64), w, scopes.codes)
        else:
            sums = token_moments(plan, inputs, res, chunk_rows, progress, rewards=False)
        res.whiten_mean, res.whiten_rstd = whiten_stats(plan, sums, plan.whiten_spec(), step_values,
                                                         get_path(cfg, "advantage.whiten_small", "error"))
    return res, row, betas, kls, warnings
