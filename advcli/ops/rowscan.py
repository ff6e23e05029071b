"""Reverse scans with a coefficient per row, and GAE over the trained tokens with a bootstrap value.

``y_t = x_t + c_i·y_{t+1}`` inside row ``i``. With one coefficient for every row this is
:func:`advcli.ops.scans.reverse_discounted_cumsum` (the blocked GEMM scan, used here whenever ``c``
is a number); AReaL's per-row λ (``gae_lambda`` a function of the row's length, PR #1600) needs one
``c`` per row, done here as a doubling (Hillis–Steele) scan: after step ``k`` every ``y_t`` holds
``Σ_{u<t+2^k} c^(u−t)·x_u``, and ``y_t ← y_t + c^(2^k)·y_{t+2^k}`` doubles the span. ⌈log2 L⌉
element-wise steps over the chunk; only non-negative powers of ``c`` appear (stable for c in [0, 1]).
"""
from __future__ import annotations

from ..lazy_torch import torch
from .ragged import Ragged
from .scans import reverse_discounted_cumsum


def reverse_scan(x: torch.Tensor, layout: Ragged, c: float | torch.Tensor) -> torch.Tensor:
    """``y_t = x_t + c_i·y_{t+1}`` per row; ``c`` a number or a per-row tensor [B]."""
    if not torch.is_tensor(c):
        return reverse_discounted_cumsum(x, layout, float(c))
    n = x.numel()
    if n == 0:
        return x.clone()
    row = layout.row_index
    remaining = layout.lengths[row] - layout.position - 1  # tokens after t in its row
    coef = c.to(x.device, x.dtype)[row]
    y = x.clone()
    idx = torch.arange(n, device=x.device)
    longest = int(layout.lengths.max())
    s = 1
    while s < longest:
        ok = remaining >= s
        nxt = torch.where(ok, y.index_select(0, torch.where(ok, idx + s, idx)), torch.zeros_like(y))
        y = y + coef * nxt
        coef = coef * coef
        s *= 2
    return y


def kept_layout(keep: torch.Tensor, layout: Ragged) -> tuple[torch.Tensor, Ragged, torch.Tensor, torch.Tensor]:
    """The mask's kept tokens compacted row by row: (their flat indices [K], their layout, for every
    token the compacted index of the next kept token of its row at or after it [N], and whether
    there is one [N])."""
    kept = torch.nonzero(keep, as_tuple=True)[0]
    counts = layout.count_per_row(keep)
    koffs = torch.zeros(layout.num_rows + 1, dtype=torch.int64, device=keep.device)
    torch.cumsum(counts, 0, out=koffs[1:])
    before = torch.cumsum(keep.to(torch.int64), 0) - keep.to(torch.int64)  # kept tokens before t
    has_next = before < koffs[1:][layout.row_index]
    return kept, Ragged(koffs), before, has_next


def gae_kept(rewards: torch.Tensor, values: torch.Tensor, keep: torch.Tensor, layout: Ragged, gamma: float,
             coef: float | torch.Tensor, next_value: torch.Tensor) -> torch.Tensor:
    """GAE over the kept (trained) tokens, carried across the others, with a bootstrap value per row.

    AReaL ``_compute_token_level_gae`` (gae.py L10-36 @cbff54d6): right to left with
    ``nv = next_value_i`` (``values[:, W−1]·no_eos``), ``g = 0``::

        δ_t = r_t + γ·nv − V_t ;  g' = δ_t + γλ·g ;  if m_t: nv, g = V_t, g' ;  A_t = g

    i.e. GAE on the kept tokens compacted (``V`` after the last one = ``next_value_i``), each other
    token taking the next kept token's value (0 after the last). ``coef`` = γλ (a number, or one per
    row). Rewards on tokens that are not kept are dropped."""
    if rewards.numel() == 0:
        return rewards.clone()
    kept, klay, nxt, has_next = kept_layout(keep, layout)
    r, v = rewards[kept], values[kept]
    v_next = torch.empty_like(v)
    if v.numel():
        v_next[:-1] = v[1:]
        last = klay.last_index()
        rows = torch.nonzero(last >= 0, as_tuple=True)[0]
        v_next[last[rows]] = next_value.to(v.dtype)[rows]
    delta = r + gamma * v_next - v
    adv_k = reverse_scan(delta, klay, coef)
    out = torch.zeros_like(rewards)
    return torch.where(has_next, adv_k[nxt.clamp(max=max(adv_k.numel() - 1, 0))] if adv_k.numel() else out, out)


def gae_sequential(rewards: torch.Tensor, values: torch.Tensor, keep: torch.Tensor, layout: Ragged, gamma: float,
                   coef: float | torch.Tensor, next_value: torch.Tensor) -> torch.Tensor:
    """:func:`gae_kept` in AReaL's own operation order: the reverse loop over token positions of
    ``_compute_token_level_gae`` (gae.py L10-36 @cbff54d6), vectorised over rows::

        delta = r[:, t] + γ·nv − V[:, t] ;  new = delta + γλ·g
        nv = nv·(1 − m) + V·m ;  g = g·(1 − m) + new·m ;  A[:, t] = g

    float32 addition is not associative, so only this order gives AReaL's float32 bits; the blocked
    scan of :func:`gae_kept` differs by a few ulps per token. That matters only where a normalisation
    divides by a tiny std (AReaL's adv_norm over nearly equal advantages), which is when the
    ``areal_gae`` estimator uses this loop. Rows are sorted by length (longest first) on a
    position-major grid, so step ``t`` touches only the rows longer than ``t`` (a contiguous prefix):
    the work is the chunk's tokens, the steps its longest row. ``torch.where`` replaces AReaL's
    ``x·(1 − m) + y·m``, the same numbers for finite values."""
    n = rewards.numel()
    if n == 0:
        return rewards.clone()
    dt, dev = rewards.dtype, rewards.device
    lengths = layout.lengths
    order = torch.argsort(lengths, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=dev)
    L = int(lengths.max())
    B = int((lengths > 0).sum())
    col, pos = rank[layout.row_index], layout.position
    grid = torch.zeros(3, L, B, dtype=dt, device=dev)
    grid[0, pos, col] = rewards
    grid[1, pos, col] = values.to(dt)
    grid[2, pos, col] = keep.to(dt)
    R, V, M = grid[0], grid[1], grid[2] > 0
    ascending = lengths[order][:B].flip(0).contiguous()
    active = (B - torch.searchsorted(ascending, torch.arange(L, device=dev), right=True)).tolist()  # rows longer than t
    out = torch.empty(L, B, dtype=dt, device=dev)
    nv = next_value.to(dev, dt)[order][:B].clone()
    g = torch.zeros(B, dtype=dt, device=dev)
    c = coef.to(dev, dt)[order][:B] if torch.is_tensor(coef) else coef
    for t in range(L - 1, -1, -1):
        k = active[t]
        ck = c[:k] if torch.is_tensor(c) else c
        new = (R[t, :k] + gamma * nv[:k] - V[t, :k]) + ck * g[:k]
        m = M[t, :k]
        nv[:k] = torch.where(m, V[t, :k], nv[:k])
        g[:k] = torch.where(m, new, g[:k])
        out[t, :k] = g[:k]
    return out[pos, col]
