"""verl's optimal token baselines: a per-position, variance-weighted group baseline.

For every row ``i`` and token position ``t`` (verl ``core_algos.py`` @1dda039b)::

    G_it = Σ_{u≥t} r_iu·m_iu                      reward-to-go of the masked rewards (γ = 1)
    w_it = (1 − 2·exp(old_lp_it) + Σ_v π(v)²_it) · ρ_it²      (ρ = rollout_is_weights, when given)
    W_it = Σ_{u≤t} w_iu·m_iu                      cumulative path-variance proxy
    B_gk = Σ_{i∈g} G_ik·W_ik·m_ik / (Σ_{i∈g} W_ik·m_ik + ε)  (ε = 1e-8; B = 0 for a group of one)
    A_it = (G_it − B_g(i),k(t))·m_it ;  returns = G

``optimal_token_baseline`` indexes the baseline by the absolute position ``k = t``;
``tir_optimal_token_baseline`` by the rank ``k`` of the token among the row's mask=1 tokens (the
k-th *generated* token of every trajectory shares a baseline) and leaves rows without mask=1 tokens
out of their group. ``handle_zero_tail``: when one row of a group is strictly the longest (length =
Σ mask), its baseline is 0 from ``k = second-longest length`` on. verl applies that rule with the
token *count* as a column index, for both estimators; advcli does the same.

The sums over a group are per (group, position): the pipeline's token-statistics pass accumulates
them over the whole input (``GroupTokenTables``), then the write pass reads the baseline back.
Accumulation is in float64, so results do not depend on the chunking; verl sums the ``[N, T]`` group
in float32 (torch's own reduction order), so the last bit can differ for groups of five or more.
"""
from __future__ import annotations

from ..config import Key
from ..lazy_torch import torch
from ..ops.batch import GroupTokenTables, TokenChunk
from ..ops.ragged import Ragged
from . import EstimatorSpec, register

NO_TAIL = 2**63 - 1  # torch.iinfo(torch.int64).max: "no second-longest row"


def _row_cumsum(x: torch.Tensor, layout: Ragged) -> tuple[torch.Tensor, torch.Tensor]:
    """(forward, reverse) inclusive cumulative sums inside each row, in x's dtype.

    verl's ``cumsum`` and ``flip().cumsum().flip()`` over a right-padded ``[B, T]`` row; torch's CPU
    ``cumsum`` accumulates float32 in a double and rounds each output, so a float64 cumsum rounded
    once gives verl's bits. Rows are padded per length bucket (lengths in (2^(k−1), 2^k]: at most
    twice the tokens, a loop over a handful of buckets), so each row's sums depend on that row alone,
    never on the chunk around it.
    """
    n = x.numel()
    if n == 0:
        return x.clone(), x.clone()
    x64 = x.to(torch.float64)
    fwd = torch.empty_like(x64)
    rev = torch.empty_like(x64)
    lengths = layout.lengths
    bucket = torch.ceil(torch.log2(lengths.clamp(min=1).to(torch.float64))).to(torch.int64)
    row, pos = layout.row_index, layout.position
    tok_bucket = bucket[row]
    for b in torch.unique(bucket[lengths > 0]).tolist():
        rows_b = torch.nonzero((bucket == b) & (lengths > 0), as_tuple=True)[0]
        slot = torch.full((layout.num_rows,), -1, dtype=torch.int64, device=x.device)
        slot[rows_b] = torch.arange(rows_b.numel(), device=x.device)
        tok = torch.nonzero(tok_bucket == b, as_tuple=True)[0]
        width = int(lengths[rows_b].max())
        mat = torch.zeros(rows_b.numel(), width, dtype=torch.float64, device=x.device)
        r, c = slot[row[tok]], pos[tok]
        mat[r, c] = x64[tok]
        fwd[tok] = mat.cumsum(1)[r, c]
        rev[tok] = mat.flip(1).cumsum(1).flip(1)[r, c]
    return fwd.to(x.dtype), rev.to(x.dtype)


def _weights(chunk: TokenChunk, p: dict) -> torch.Tensor:
    """w_t·m_t = (1 − 2π_t + Σπ²_t)·ρ_t²·m_t in float32, verl's operation order."""
    lp = chunk.tokens["old_log_probs"]
    w = 1 - 2 * torch.exp(lp) + chunk.tokens["sum_pi_squared"]
    use_is = p["is_weights"]
    has_is = "rollout_is_weights" in chunk.tokens
    # is_weights=true without the column: refused by the spec (:func:`is_weights_column`)
    if has_is and use_is in (True, "auto"):
        w = w * chunk.tokens["rollout_is_weights"] ** 2
    return w * chunk.mask


def _position(chunk: TokenChunk, tir: bool) -> torch.Tensor:
    """The index the baseline is shared on: absolute position (OTB) or rank among mask=1 tokens (TIR)."""
    if not tir:
        return chunk.layout.position
    keep = chunk.mask.to(torch.int64)
    fwd = torch.cumsum(keep, 0) - keep  # exclusive count over the chunk
    start = torch.cat([torch.zeros(1, dtype=fwd.dtype, device=fwd.device), torch.cumsum(keep, 0)])
    return fwd - chunk.layout.broadcast(start[chunk.layout.offsets[:-1]])


def _group_tail(ctx: GroupTokenTables, tir: bool) -> dict:
    """Per group: whether it gets a baseline, and where the unique longest row's baseline stops."""
    key = "tir" if tir else "otb"
    if key in ctx.extra:
        return ctx.extra[key]
    g = ctx.groups
    vl = ctx.table.valid_len.to(torch.int64)
    members = (vl > 0).to(torch.int64) if tir else torch.ones_like(vl)  # TIR drops rows with no token
    n = torch.zeros(g.num_groups, dtype=torch.int64).index_add_(0, g.codes, members)
    vmax = torch.full((g.num_groups,), -1, dtype=torch.int64).scatter_reduce_(0, g.codes, vl, "amax")
    at_max = (vl == vmax[g.codes]).to(torch.int64)
    count_max = torch.zeros(g.num_groups, dtype=torch.int64).index_add_(0, g.codes, at_max)
    below = torch.where(vl < vmax[g.codes], vl, torch.full_like(vl, -1))
    second = torch.full((g.num_groups,), -1, dtype=torch.int64).scatter_reduce_(0, g.codes, below, "amax")
    # a unique longest row (and n ≥ 2, so a second one exists): baseline 0 from `second` on
    tail = torch.where((count_max == 1) & (second >= 0) & (n > 1), second, torch.full_like(second, NO_TAIL))
    out = {"has_baseline": n > 1, "max_len": vmax, "tail": tail}
    ctx.extra[key] = out
    return out


def _make(tir: bool):
    def accumulate(chunk: TokenChunk, p: dict, ctx: GroupTokenTables) -> None:
        """Accumulate Σ_i G·W·m and Σ_i W·m per (group, position) over the whole input."""
        gw = _weights(chunk, p)
        W, _ = _row_cumsum(gw, chunk.layout)
        _, G = _row_cumsum(chunk.token_rewards * chunk.mask, chunk.layout)
        keep = chunk.mask > 0
        gtok = chunk.layout.broadcast(chunk.rows["group"])
        slots = ctx.slots(gtok, _position(chunk, tir))[keep]
        ctx.add("num", slots, (G * W * chunk.mask)[keep])
        ctx.add("den", slots, (W * chunk.mask)[keep])

    def token(chunk: TokenChunk, p: dict):
        ctx: GroupTokenTables = chunk.group_tables
        _, G = _row_cumsum(chunk.token_rewards * chunk.mask, chunk.layout)
        dt = G.dtype
        info = _group_tail(ctx, tir)
        grow = chunk.rows["group"]
        pos = _position(chunk, tir)
        gtok = chunk.layout.broadcast(grow)
        keep = chunk.mask > 0
        slots = ctx.slots(gtok, pos).clamp(max=max(ctx.size - 1, 0))
        base = torch.zeros_like(G)
        if ctx.size and "num" in ctx.sums:
            num = ctx.get("num", slots).to(dt)
            den = ctx.get("den", slots).to(dt) + p["eps"]
            base = torch.where(keep, num / den, base)
        # groups of one (TIR: one row with tokens) get no baseline
        dev = G.device
        has = info["has_baseline"].to(dev)[gtok]
        # the unique longest row loses its baseline past the second-longest length
        valid_len = chunk.layout.row_sum(chunk.mask.to(torch.int64))
        longest = (valid_len == info["max_len"].to(dev)[grow])
        tail = torch.where(longest, info["tail"].to(dev)[grow], torch.full_like(grow, NO_TAIL))
        zero = ~has | (pos >= chunk.layout.broadcast(tail)) if p["handle_zero_tail"] else ~has
        base = torch.where(zero, torch.zeros_like(base), base)
        return (G - base) * chunk.mask, G

    return accumulate, token


PARAMS = {
    "handle_zero_tail": Key(True, "a group's unique longest row gets baseline 0 past the second-longest "
                            "length (verl default since PR #5380)", None, "bool"),
    "eps": Key(1e-8, "ε added to the denominator Σ W·m", None, "float"),
    "is_weights": Key("auto", "scale w by rollout_is_weights²: `auto` (when the column is present), true, "
                      "false", ("auto", True, False), "any"),
}


def is_weights_column(p: dict) -> tuple[tuple[str, str], ...]:
    """estimator.is_weights=true needs the rollout_is_weights column (auto uses it where present)."""
    return (("rollout_is_weights", "estimator.is_weights=true needs it"),) if p["is_weights"] is True else ()


_OTB_STATS, _OTB_TOKEN = _make(tir=False)
_TIR_STATS, _TIR_TOKEN = _make(tir=True)

register(EstimatorSpec(
    name="optimal_token_baseline", level="token", uses_groups=True, token_fn=_OTB_TOKEN,
    group_token_pass=_OTB_STATS, needs=("old_log_probs", "sum_pi_squared"), optional=("rollout_is_weights",),
    needs_for=is_weights_column,
    formula="G_t = Σ_{u≥t} r_u·m_u; w_t = (1 − 2·exp(old_lp_t) + Σπ²_t)·ρ_t²; W_t = Σ_{u≤t} w_u·m_u; "
            "B_t = Σ_g G_t·W_t·m_t / (Σ_g W_t·m_t + eps) per group and position t (n=1: 0); "
            "A_t = (G_t − B_t)·m_t; returns = G",
    source="verl core_algos.compute_optimal_token_baseline_advantage (L871-987 @1dda039b)",
    params=dict(PARAMS)))

register(EstimatorSpec(
    name="tir_optimal_token_baseline", level="token", uses_groups=True, token_fn=_TIR_TOKEN,
    group_token_pass=_TIR_STATS, needs=("old_log_probs", "sum_pi_squared"), optional=("rollout_is_weights",),
    needs_for=is_weights_column,
    formula="as optimal_token_baseline, with the baseline shared by the k-th mask=1 token of each row "
            "(rows without mask=1 tokens leave their group); A = 0 at mask=0; returns = G",
    source="verl core_algos.compute_multi_turn_optimal_token_baseline_advantage (L990-1121 @1dda039b)",
    params=dict(PARAMS)))
