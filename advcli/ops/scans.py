"""Reverse discounted scans over ragged rows: ``y_t = x_t + c·y_{t+1}``, ``y_{L} = 0``.

This one recurrence is the discounted return (c = γ), GAE (x = δ, c = γλ) and every reward-to-go
the frameworks compute with a Python loop over token positions (verl ``core_algos.py``
``compute_gae_advantage_return``, OpenRLHF ``get_cumulative_returns``, ROLL
``compute_reinforce_return``). Here it runs as a *blocked scan*:

1. every row is padded only up to a multiple of ``BLOCK`` (64) and cut into blocks;
2. inside a block the scan is one matrix product with ``P[i, j] = c^(j-i)`` for ``j >= i``;
3. the value at each block's start, seen from the block before it, obeys the same recurrence
   over blocks with coefficient ``c^BLOCK``: solved by recursing on that shorter problem;
4. each position adds ``c^(BLOCK-i) ·`` (full value at the next block's start).

Only non-negative powers of ``c`` appear, so it is stable for any ``c`` in [0, 1] and any length
(scaling by ``c^-t`` inside a cumsum, the usual trick, overflows for long rows). Cost is
O(N·BLOCK) multiply-adds in a GEMM, a handful of kernels on a GPU.

Data movement is one scatter of each input column into the padded grid and one gather back, at
each token's *slot* (its cell), computed with cumsums (no per-token row index). The variants that
skip mask=0 tokens (verl/NeMo GAE, verl REINFORCE++) pack each row's kept tokens at the front of its
blocks, with one spare cell after them that stays 0: ``V_{k+1}`` is then the next cell, and a
dropped token reads the cell of the next kept token of its row (the spare cell, 0, when none
follows), which is the frameworks' carry over holes.
"""
from __future__ import annotations

from ..lazy_torch import torch
from . import fused
from .ragged import Ragged

BLOCK = 64
# The in-block GEMM runs on fixed tiles of GEMM_TILE blocks (the last one zero-padded): BLAS picks
# its kernel, and so its rounding, by the matrix shape (M = 1 or 2 takes another path than M = 100),
# so a GEMM over "all blocks of this chunk" gave results that moved in the last bit with
# --chunk-rows. With one fixed shape every row gets the same bits whatever chunk it is in.
GEMM_TILE = 128
# cuBLAS also picks its kernel by the number of tiles in a call: on the devices named here the GEMM runs on
# pieces of PIECE_TILES tiles (the grid rounded up to whole pieces; a piece is 512K cells, 2 MiB of
# float32), every call of one shape, so a GPU run gives the same bits whatever --chunk-rows cuts.
PIECE_TILES = 64
PIECE_DEVICES = {"cuda"}


def _tiles_per_call(device) -> int:
    """Tiles per GEMM call on ``device``: PIECE_TILES where the kernel choice must not vary, else 0 (all)."""
    return PIECE_TILES if device.type in PIECE_DEVICES else 0


def _powers_matrix(c: float, block: int, dtype, device) -> torch.Tensor:
    i = torch.arange(block, device=device, dtype=torch.float64)
    expo = i[None, :] - i[:, None]  # j - i
    mat = torch.where(expo >= 0, torch.pow(torch.tensor(c, dtype=torch.float64, device=device), expo.clamp(min=0)),
                      torch.zeros((), dtype=torch.float64, device=device))
    return mat.to(dtype)


def _tail_powers(c: float, block: int, dtype, device) -> torch.Tensor:
    """``c^(block-i)`` for i = 0..block-1: what the value at the next block's start weighs at lane i."""
    return torch.pow(torch.tensor(c, dtype=torch.float64, device=device),
                     torch.arange(block, 0, -1, device=device, dtype=torch.float64)).to(dtype)


def _grid_shape(counts: torch.Tensor, block: int, spare: bool) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """Blocks of each row in the padded grid: (blocks per row [B], block offsets [B+1], used blocks,
    grid cells rounded up to whole GEMM tiles, or whole pieces of PIECE_TILES tiles on a GPU).

    ``counts`` [B] int64 are the scanned elements per row. With ``spare`` every row gets room for
    one more element (``counts // block + 1`` blocks): that cell, right after the row's last
    element, stays 0 through the scan, so it serves as "the next element" of the last one and as
    the value of dropped tokens that no kept token follows.
    """
    nblocks = counts // block + 1 if spare else (counts + block - 1) // block
    block_offsets = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(nblocks, 0, out=block_offsets[1:])
    nb = int(block_offsets[-1])
    unit = GEMM_TILE * max(1, _tiles_per_call(counts.device))
    cells = -(-nb // unit) * unit * block
    return nblocks, block_offsets, nb, cells


def _slots(step: torch.Tensor | None, row_base: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    """int64 [N]: ``Σ_{u<t} step[u] + row_base[row(t)]`` (``step`` None: 1 per token, so the sum is t),
    as one cumsum of the steps plus the jumps of ``row_base`` at row starts (no per-token row index)."""
    steps = torch.empty(n + 1, dtype=torch.int64, device=offsets.device)
    steps[0] = 0
    if step is None:
        steps[1:].fill_(1)
    else:
        steps[1:] = step
    # empty rows share their start with the next row: their jumps add up
    steps.index_add_(0, offsets[:-1], torch.diff(row_base, prepend=row_base.new_zeros(1)))
    return steps[:n].cumsum_(0)


def _scan_grid(grid: torch.Tensor, nblocks: torch.Tensor, block_offsets: torch.Tensor, nb: int, c: float,
               block: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Blocked scan of a flat grid ``[cells]`` (``cells`` a whole number of GEMM tiles, zero past
    the rows' blocks); row ``i`` holds blocks ``block_offsets[i]..block_offsets[i+1]``. Returns a
    flat tensor ``[cells + 1]``: the scanned grid and one trailing 0 cell; or, when given, ``out`` (at
    least ``cells + 1`` elements, not overlapping ``grid``) with those written into its front."""
    cells = grid.numel()
    dtype, device = grid.dtype, grid.device
    if out is None:
        out = torch.empty(cells + 1, dtype=dtype, device=device)
    out[cells] = 0
    # 1) scan inside every block with one GEMM per fixed-shape tile: local[b, i] = Σ_{j>=i} c^(j-i) x[b, j]
    tiles, local_tiles = grid.view(-1, GEMM_TILE, block), out[:cells].view(-1, GEMM_TILE, block)
    powers = _powers_matrix(c, block, dtype, device).T
    per_call = _tiles_per_call(device) or tiles.shape[0]
    for k in range(0, tiles.shape[0], per_call):
        torch.matmul(tiles[k:k + per_call], powers, out=local_tiles[k:k + per_call])
    # 2) block-start values follow y0_k = local0_k + c^block · y0_{k+1} within a row
    if nb > int(torch.count_nonzero(nblocks)):  # some row has more than one block
        local = out[:nb * block].view(nb, block)
        start_full = reverse_discounted_cumsum(local[:, 0].contiguous(), Ragged(block_offsets), c ** block, block)
        # value carried into block k from block k+1 of the same row (0 for a row's last block)
        nxt = torch.empty_like(start_full)
        nxt[:-1] = start_full[1:]
        nxt[-1] = 0
        nxt[block_offsets[1:][nblocks > 0] - 1] = 0
        local += nxt[:, None] * _tail_powers(c, block, dtype, device)[None, :]
    return out


def _scan_grid_rows(grid: torch.Tensor, nblocks: torch.Tensor, block_offsets: torch.Tensor, nb: int,
                    c_row: torch.Tensor, block: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`_scan_grid` with a coefficient per row (``c_row`` [B], e.g. NeMo RL's length-adaptive γλ_i): inside
    every block the recurrence runs lane by lane, right to left, over all blocks at once (``block`` steps, each
    block with its row's c: no GEMM, whose powers matrix is one c's); the block starts obey the same recurrence
    over a row's blocks with c_i^block, solved by recursing; each lane then adds c_i^(block−i) · the value at
    the next block's start. The loop is over the lanes of a block, never over rows or tokens."""
    cells = grid.numel()
    dtype, device = grid.dtype, grid.device
    if out is None:
        out = torch.empty(cells + 1, dtype=dtype, device=device)
    out[nb * block:cells + 1] = 0
    rows = torch.repeat_interleave(torch.arange(nblocks.numel(), device=device), nblocks)
    c64 = c_row.to(device=device, dtype=torch.float64)[rows]  # [nb] each block's row's coefficient
    cb = c64.to(dtype)
    x = grid[:nb * block].view(nb, block)
    local = out[:nb * block].view(nb, block)
    acc = torch.zeros(nb, dtype=dtype, device=device)
    for lane in range(block - 1, -1, -1):
        acc = x[:, lane] + cb * acc
        local[:, lane] = acc
    if nb > int(torch.count_nonzero(nblocks)):  # some row has more than one block
        start_full = reverse_discounted_cumsum(local[:, 0].contiguous(), Ragged(block_offsets),
                                               (c_row.to(torch.float64) ** block).to(dtype), block)
        nxt = torch.empty_like(start_full)
        nxt[:-1] = start_full[1:]
        nxt[-1] = 0
        nxt[block_offsets[1:][nblocks > 0] - 1] = 0
        tail = torch.pow(c64[:, None], torch.arange(block, 0, -1, device=device, dtype=torch.float64)[None, :])
        local += nxt[:, None] * tail.to(dtype)
    return out


def reverse_discounted_cumsum(values: torch.Tensor, layout: Ragged, c: float | torch.Tensor,
                              block: int = BLOCK) -> torch.Tensor:
    """``y_t = x_t + c·y_{t+1}`` inside each row of ``layout`` (rows independent, y = 0 past the end).

    ``values`` is the flat [N] tensor of the rows. Returns a flat [N] tensor of the same dtype.
    Equivalent to the loop ``for t in reversed(range(L)): run = x[t] + c*run; y[t] = run`` per row.
    ``c``: one coefficient, or a tensor [B] of one per row (:func:`_scan_grid_rows`).
    """
    n = values.numel()
    if n == 0:
        return values.clone()
    per_row = isinstance(c, torch.Tensor)
    if fused.enabled(values) and not per_row:  # the GPU path: one Triton kernel (advcli.ops.fused)
        return fused.scan("plain", values, layout.offsets.to(values.device), layout.num_rows, c)
    offsets = layout.offsets
    nblocks, block_offsets, nb, cells = _grid_shape(layout.lengths, block, spare=False)
    # slot of each token in the padded [blocks, block] grid: t + (row's first cell − row's offset)
    slot = _slots(None, block_offsets[:-1] * block - offsets[:-1], offsets, n)
    grid = values.new_zeros(cells)
    grid.scatter_(0, slot, values)
    scan = _scan_grid_rows if per_row else _scan_grid
    return scan(grid, nblocks, block_offsets, nb, c, block).index_select(0, slot)


def _kept_slots(keep: torch.Tensor, layout: Ragged, block: int):
    """Grid slots of a mask's kept tokens compacted row by row, each row with a spare cell.

    Returns (slot [N], scatter slot [N], blocks per row, block offsets, used blocks, grid cells):
    ``slot`` of a kept token is its cell; of a dropped token, the cell of the next kept token of its
    row, or the row's spare cell when none follows. ``scatter slot`` sends each dropped token to a
    cell of its own past ``cells + 1`` instead, so a scatter writes every cell at most once.
    """
    n = keep.numel()
    offsets = layout.offsets
    # kept tokens before each row start, from a cumsum of the mask
    kept_before = torch.empty(n + 1, dtype=torch.int32 if n < 2**31 - 1 else torch.int64, device=keep.device)
    kept_before[0] = 0
    torch.cumsum(keep, 0, dtype=kept_before.dtype, out=kept_before[1:])
    kept_at = kept_before.index_select(0, offsets).to(torch.int64)
    nblocks, block_offsets, nb, cells = _grid_shape(kept_at[1:] - kept_at[:-1], block, spare=True)
    # kept tokens before t + (row's first cell − kept tokens before the row)
    slot = _slots(keep, block_offsets[:-1] * block - kept_at[:-1], offsets, n)
    scatter_slot = torch.arange(cells + 1, cells + 1 + n, device=keep.device)
    torch.where(keep, slot, scatter_slot, out=scatter_slot)
    return slot, scatter_slot, nblocks, block_offsets, nb, cells


def reverse_discounted_cumsum_reference(values: torch.Tensor, layout: Ragged, c: float) -> torch.Tensor:
    """Loop version of :func:`reverse_discounted_cumsum`, for tests only."""
    out = torch.empty_like(values)
    offs = layout.offsets.tolist()
    for i in range(len(offs) - 1):
        run = torch.zeros((), dtype=values.dtype)
        for t in range(offs[i + 1] - 1, offs[i] - 1, -1):
            run = values[t] + c * run
            out[t] = run
    return out


def gae_skip_masked(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, layout: Ragged,
                    gamma: float, lam: float | torch.Tensor) -> torch.Tensor:
    """GAE over the mask=1 tokens of each row, carrying across mask=0 tokens (verl, NeMo RL).

    verl ``compute_gae_advantage_return`` (core_algos.py L215-263 @1dda039b) and NeMo RL's PPO
    ``gae`` scan the row right to left with ``nv = g = 0``::

        δ = r_t + γ·nv − V_t ;  g' = δ + γλ·g ;  if m_t: nv, g = V_t, g' ;  A_t = g

    which is exactly GAE on the kept tokens compacted (``δ_k = r_k + γV_{k+1} − V_k``), each dropped
    token taking the value of the next kept token of its row (0 when none follows). Rewards on
    mask=0 tokens are ignored. Returns the pre-whitening advantages [N].

    The kept tokens go straight into the scan's grid (one scatter per column), where ``V_{k+1}`` is
    the next cell (the row's spare cell, 0, after its last kept token); reading the scanned grid at
    each token's slot gives kept tokens their value and dropped ones the next kept token's.
    ``lam``: one λ, or a tensor [B] of one per row (NeMo RL's length-adaptive λ).
    """
    n = rewards.numel()
    dtype = torch.result_type(rewards, values)
    if n == 0:
        return torch.zeros(0, dtype=dtype, device=rewards.device)
    per_row = isinstance(lam, torch.Tensor)
    if fused.enabled(rewards) and not per_row:  # the GPU path: one Triton kernel (advcli.ops.fused)
        return fused.scan("gae_skip", rewards.to(dtype), layout.offsets.to(rewards.device), layout.num_rows,
                          gamma * lam, gamma, values=values.to(dtype), mask=mask)
    keep = mask.bool()
    slot, scatter_slot, nblocks, block_offsets, nb, cells = _kept_slots(keep, layout, BLOCK)
    grid_r = torch.empty(cells + 1 + n, dtype=dtype, device=rewards.device)
    grid_v = torch.empty_like(grid_r)
    grid_r[:cells + 1].zero_()
    grid_v[:cells + 1].zero_()
    grid_r.scatter_(0, scatter_slot, rewards.to(dtype))
    grid_v.scatter_(0, scatter_slot, values.to(dtype))
    # δ_k = r_k + γ·V_{k+1} − V_k on every cell (0 on the padding: r = V = 0 there)
    delta = grid_v[1:cells + 1] * gamma
    delta += grid_r[:cells]
    delta -= grid_v[:cells]
    # a row's last cell is never a kept token's (the spare cell comes first), but its "next cell" is the
    # next row's first: keep it 0
    delta[block_offsets[1:] * BLOCK - 1] = 0
    c = (gamma * lam.to(device=rewards.device)).to(dtype) if per_row else gamma * lam
    scan = _scan_grid_rows if per_row else _scan_grid
    return scan(delta, nblocks, block_offsets, nb, c, BLOCK, out=grid_r).index_select(0, slot)


def gae_all_positions(rewards: torch.Tensor, values: torch.Tensor, layout: Ragged, gamma: float,
                      lam: float | torch.Tensor) -> torch.Tensor:
    """GAE over every position of each row, no skipping: ``δ_t = r_t + γV_{t+1} − V_t`` (``V_L = 0``).

    ROLL ``compute_gae_advantage_return`` passes unmasked values and rewards over every column;
    OpenRLHF ``get_advantages_and_returns`` does the same after zeroing V and R at mask=0 (the
    caller multiplies by the mask first).
    """
    per_row = isinstance(lam, torch.Tensor)  # one λ per row: reverse_discounted_cumsum's per-row scan
    if values.numel() and fused.enabled(values) and not per_row:  # the GPU path: one Triton kernel (ops.fused)
        dtype = torch.result_type(rewards, values)
        return fused.scan("gae_all", rewards.to(dtype), layout.offsets.to(values.device), layout.num_rows,
                          gamma * lam, gamma, values=values.to(dtype))
    v_next = torch.empty_like(values)
    if values.numel():
        v_next[:-1] = values[1:]  # the next token's value, then 0 at every row's last token
        v_next[-1] = 0
        v_next[layout.offsets[1:][layout.lengths > 0] - 1] = 0
    delta = rewards + gamma * v_next - values
    c = (gamma * lam.to(device=delta.device)).to(delta.dtype) if per_row else gamma * lam
    return reverse_discounted_cumsum(delta, layout, c)


def returns_reset_at_holes(rewards: torch.Tensor, mask: torch.Tensor, layout: Ragged, gamma: float) -> torch.Tensor:
    """Discounted return that a mask=0 token cuts: ``G_t = r_t + γ·m_{t+1}·G_{t+1}`` (verl ≤ 0.8.0 REINFORCE++).

    verl 0.8.0 ``compute_reinforce_plus_plus_outcome_advantage`` (package verl 0.8.0,
    verl/trainer/ppo/core_algos.py): ``run = r_t + γ·run; ret_t = run; run = run·m_t``. A mask=0 token keeps
    its own reward and the return after it, and the tokens before it start afresh: each row splits into
    segments that begin at its first token and at every mask=0 token, each a plain reverse discounted sum.
    """
    n = rewards.numel()
    if n == 0:
        return rewards.clone()
    starts = (layout.position == 0) | ~mask.bool()
    begin = torch.nonzero(starts).squeeze(1)
    offsets = torch.cat([begin, torch.tensor([n], dtype=begin.dtype, device=begin.device)])
    return reverse_discounted_cumsum(rewards, Ragged(offsets), gamma)


def returns_skip_masked(rewards: torch.Tensor, mask: torch.Tensor, layout: Ragged, gamma: float) -> torch.Tensor:
    """Discounted return over the mask=1 tokens, carried across holes, 0 at mask=0 (verl REINFORCE++).

    verl ``compute_reinforce_plus_plus_outcome_advantage`` (core_algos.py L693-731 @1dda039b, after
    PR #7300): ``new = r_t + γ·run; ret_t = new·m_t; run = new if m_t else run``. Rewards on mask=0
    tokens are dropped and γ is not applied across a hole.
    """
    n = rewards.numel()
    if n == 0:
        return rewards.clone()
    if fused.enabled(rewards):  # the GPU path: one Triton kernel (advcli.ops.fused)
        return fused.scan("returns_skip", rewards, layout.offsets.to(rewards.device), layout.num_rows, gamma,
                          mask=mask)
    keep = mask.bool()
    _, scatter_slot, nblocks, block_offsets, nb, cells = _kept_slots(keep, layout, BLOCK)
    grid = torch.empty(cells + 1 + n, dtype=rewards.dtype, device=rewards.device)
    grid[:cells + 1].zero_()
    grid.scatter_(0, scatter_slot, rewards)
    # the scanned grid keeps the same layout with 0 in the dropped tokens' own cells: one gather
    # gives the kept tokens their return and the dropped ones 0
    out = torch.empty_like(grid)
    out[cells + 1:].zero_()
    return _scan_grid(grid[:cells], nblocks, block_offsets, nb, gamma, BLOCK, out=out).index_select(0, scatter_slot)
