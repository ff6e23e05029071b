"""Optional column roles and the grouping/normalisation switches added with ``--flavor areal``.

The KL's policy column (``kl.policy``) and missing columns as zeros (``kl.missing``); per-row number
roles an estimator reads (``truncated``, ``bootstrap_value``); ``grouping.by=runs`` (AReaL's
per-prompt trajectory groups); the NormConfig of ``reward.norm``.
"""
from __future__ import annotations

from ..config.column_roles import ROLE_INFO
from ..config.columns import ColumnMap
from ..lazy_torch import torch
from ..ops.groups import GroupIndex

# token roles of float values: checked finite where read
FLOAT_ROLES = ("old_log_probs", "ref_log_probs", "values", "token_level_scores", "sum_pi_squared",
               "teacher_log_probs", "rollout_is_weights", "rollout_log_probs")


def role_kind(role: str) -> str:
    """``tokens``, ``scalar``, ``int`` or ``key`` (column_roles.ROLE_INFO); unknown names count as token columns."""
    return ROLE_INFO.get(role, (role, "tokens", ""))[1]


def kl_roles(kl, cmap: ColumnMap) -> list[str]:
    """The log-prob columns the KL reads: ``kl.policy`` and the reference; with ``kl.missing=zeros`` only
    those present (a missing one counts as zeros), else both are required."""
    roles = [kl.policy, "ref_log_probs"]
    if kl.missing == "zeros":
        return [r for r in roles if cmap.has(r)]
    cmap.require(roles[0], "KL in the reward needs the policy log-probs")
    cmap.require(roles[1], "KL in the reward needs the reference log-probs")
    return roles


def kl_inputs(kl, tok: dict, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(policy log-probs, reference log-probs) of a chunk (``kl``: the run spec's KL section); zeros for a
    column ``kl.missing=zeros`` let pass."""
    lp, ref = tok.get(kl.policy), tok.get("ref_log_probs")
    if lp is None or ref is None:
        zero = torch.zeros_like(mask)
        lp, ref = (zero if lp is None else lp), (zero if ref is None else ref)
    return lp, ref


def norm_spec(reward):
    """The NormConfig of ``reward.norm`` (``reward``: the run spec's reward section), None when unset."""
    from ..ops.normcfg import NormSpec

    return NormSpec.parse(reward.norm, "reward.norm")


def norm_uses_groups(run) -> bool:
    """Whether reward.norm or the estimator's ``norm`` (AReaL adv_norm) has a group level."""
    from ..ops.normcfg import NormSpec

    specs = [norm_spec(run.reward), NormSpec.parse(run.estimator.given.get("norm"), "estimator.norm")]
    return any(s is not None and s.uses_groups for s in specs)


def row_scalar_roles(plan) -> list[str]:
    """Per-row number columns the estimator or the reward stage reads (AReaL: truncated, bootstrap_value),
    those present in the input."""
    want = [r for r in (*plan.spec.needs, *plan.spec.optional) if role_kind(r) == "scalar" and r != "reward_baseline"]
    r = plan.run.reward
    if r.zero_truncated or r.no_eos_value is not None or r.no_eos_penalty is not None or \
            r.truncated_factor is not None or (r.overlong.tokens is not None and r.overlong.length == "tokens_eos"):
        want.append("truncated")
    return [r for r in dict.fromkeys(want) if plan.cmap.has(r)]


def group_scope(groups: GroupIndex, scopes: GroupIndex) -> torch.Tensor:
    """int64 [G]: the scope of each group (groups never straddle scopes)."""
    out = torch.zeros(groups.num_groups, dtype=torch.int64)
    return out.scatter_(0, groups.codes, scopes.codes) if groups.codes.numel() else out
