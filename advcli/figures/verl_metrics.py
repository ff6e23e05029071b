"""The figures of a run under verl's metric names (``critic/score/mean``, ``critic/advantages/max``,
``response_length/mean``, ``actor/reward_kl_penalty``, ...) and advcli's group figures, computed from
a fed :class:`~advcli.figures.collector.FigureCollector` (``st`` below; it calls these, they only read its
fields; definitions: :mod:`advcli.figures`)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .json_values import figure


def row_figures(x: np.ndarray, sel: np.ndarray) -> dict[str, Any]:
    """{mean, max, min, std (population)} of a per-row figure ``x`` [R] over the rows ``sel``."""
    v = x[sel]
    v = v[~np.isnan(v)]  # unscored rows (TRL's None rewards) are left out, as TRL's nanmean does
    if v.size == 0:
        return {"mean": None, "max": None, "min": None, "std": None}
    with np.errstate(invalid="ignore", over="ignore"):
        return {"mean": figure(v.mean()), "max": figure(v.max()), "min": figure(v.min()), "std": figure(v.std())}


def metric_block(st, rows_sel: np.ndarray, s: int | None) -> dict[str, Any]:
    """verl's metric block for the rows ``rows_sel`` (bool [R]) and scope ``s`` (None: all)."""
    out: dict[str, Any] = {}
    non_aborted = rows_sel & (st.resp_len > 0)
    for name, x in (("critic/score", st.raw_score), ("critic/rewards", st.seq_reward)):
        f = row_figures(x, non_aborted)
        out.update({f"{name}/{k}": f[k] for k in ("mean", "max", "min")})
    for name, acc in (("critic/advantages", st.adv), ("critic/returns", st.ret)):
        f = acc.figures(s)
        out.update({f"{name}/{k}": f[k] for k in ("mean", "max", "min")})
    if st.has_values:
        f = st.val.figures(s)
        out.update({f"critic/values/{k}": f[k] for k in ("mean", "max", "min")})
        out["critic/vf_explained_var"] = explained_var(st, s)
    L = st.resp_len[rows_sel].astype(np.float64)
    out["response_length/mean"] = figure(L.mean()) if L.size else None
    out["response_length/max"] = figure(L.max()) if L.size else None
    out["response_length/min"] = figure(L.min()) if L.size else None
    na = L[L > 0]  # verl logs these every step (metric_utils.py compute_data_metrics @1dda039b)
    out["response_length_non_aborted/mean"] = figure(na.mean()) if na.size else None
    out["response_length_non_aborted/max"] = figure(na.max()) if na.size else None
    out["response_length_non_aborted/min"] = figure(na.min()) if na.size else None
    out["response/aborted_ratio"] = figure((L == 0).mean()) if L.size else None
    if st.kl_on and st.kl_row is not None:
        if s is None:
            sizes = st.scopes.sizes.astype(np.float64)
            k = np.asarray(st.kls, dtype=np.float64)
            # the row-weighted mean of the steps' values (verl's, padding rows in their means): Σ_rows kl / R
            # where no step has padding rows
            out["actor/reward_kl_penalty"] = (figure((k * sizes).sum() / sizes.sum()) if len(k) == len(sizes)
                                              else figure(st.kl_row.mean())) if st.R else None
            b = np.asarray(st.betas, dtype=np.float64)
            out["actor/reward_kl_penalty_coeff"] = figure((b * sizes).sum() / sizes.sum()) if st.R else None
        elif s < len(st.kls):  # (an input with no rows has no step, yet one per-step block of no rows)
            out["actor/reward_kl_penalty"] = figure(st.kls[s])
            out["actor/reward_kl_penalty_coeff"] = figure(st.betas[s])
    return out


def explained_var(st, s: int | None) -> float | None:
    """verl: 1 − var(G − V)/(var(G) + 1e-5), torch.var unbiased over the valid tokens."""
    d, g = st.ret_minus_val.figures(s), st.ret.figures(s)
    n = g["count"]
    if not n or n < 2 or d["count"] < 2:
        return None
    var_d = d["std"] ** 2 * d["count"] / (d["count"] - 1)
    var_g = g["std"] ** 2 * n / (n - 1)
    return figure(1.0 - var_d / (var_g + 1e-5))


def group_figures(st) -> dict[str, Any]:
    """advcli's ``groups/...`` figures (sizes, solved shares, advantage signs per group); empty without groups."""
    g = st.groups
    out: dict[str, Any] = {}
    if g is None or g.num_groups == 0:
        return out
    sizes = g.sizes
    present = sizes > 0
    sz = sizes[present].astype(np.float64)
    G = int(present.sum())
    out["groups/count"] = G
    out["groups/size/mean"] = figure(sz.mean())
    out["groups/size/min"] = int(sz.min())
    out["groups/size/max"] = int(sz.max())
    out["groups/singleton_share"] = figure((sizes[present] == 1).mean())
    smin, smax = np.full(g.num_groups, math.inf), np.full(g.num_groups, -math.inf)
    with np.errstate(invalid="ignore"):  # a NaN score makes its group's min and max NaN (not all equal)
        np.minimum.at(smin, g.codes, st.score)
        np.maximum.at(smax, g.codes, st.score)
    multi = sizes > 1
    out["groups/all_equal_share"] = figure(((smin == smax) & multi).sum() / max(int(multi.sum()), 1))
    # solved rows: reward > 0 among the rows with a reward (not NaN); a group's shares over
    # its rows with a reward — the same definitions as advcli.figures.group_health
    scored = ~np.isnan(st.raw_score)
    solved = scored & (st.raw_score > 0)
    n_scored = int(scored.sum())
    out["groups/solved_share"] = figure(solved.sum() / n_scored) if n_scored else None
    ns, nr = g.sum(solved)[present], g.sum(scored)[present]
    has = nr > 0
    k = max(int(has.sum()), 1)
    out["groups/solved_all_share"] = figure(((ns == nr) & has).sum() / k) if has.any() else None
    out["groups/solved_none_share"] = figure(((ns == 0) & has).sum() / k) if has.any() else None
    out["groups/solved_some_share"] = figure(((ns > 0) & (ns < nr)).sum() / k) if has.any() else None
    a = st.row_advantage()
    pos = g.sum(a > 0)[present]
    neg = g.sum(a < 0)[present]
    out["groups/adv_sign/mixed_share"] = figure(((pos > 0) & (neg > 0)).mean())
    out["groups/adv_sign/only_pos_share"] = figure(((pos > 0) & (neg == 0)).mean())
    out["groups/adv_sign/only_neg_share"] = figure(((neg > 0) & (pos == 0)).mean())
    out["groups/adv_sign/all_zero_share"] = figure(((neg == 0) & (pos == 0)).mean())
    out["groups/adv_sign/balance_mean"] = figure(((pos - neg).astype(np.float64) / sz).mean())
    return out
