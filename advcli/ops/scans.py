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
"""
from __future__ import annotations

import torch

from ..ragged import Ragged

BLOCK = 64
# The in-block GEMM runs on fixed tiles of GEMM_TILE blocks (the last one zero-padded): BLAS picks
# its kernel, and so its rounding, by the matrix shape (M = 1 or 2 takes another path than M = 100),
# so a GEMM over "all blocks of this chunk" gave results that moved in the last bit with
# --chunk-rows. With one fixed shape every row gets the same bits whatever chunk it is in.
GEMM_TILE = 128


def _powers_matrix(c: float, block: int, dtype, device) -> torch.Tensor:
    i = torch.arange(block, device=device, dtype=torch.float64)
    expo = i[None, :] - i[:, None]  # j - i
    mat = torch.where(expo >= 0, torch.pow(torch.tensor(c, dtype=torch.float64, device=device), expo.clamp(min=0)),
                      torch.zeros((), dtype=torch.float64, device=device))
    return mat.to(dtype)


def reverse_discounted_cumsum(values: torch.Tensor, layout: Ragged, c: float, block: int = BLOCK) -> torch.Tensor:
    """``y_t = x_t + c·y_{t+1}`` inside each row of ``layout`` (rows independent, y = 0 past the end).

    ``values`` is the flat [N] tensor of the rows. Returns a flat [N] tensor of the same dtype.
    Equivalent to the loop ``for t in reversed(range(L)): run = x[t] + c*run; y[t] = run`` per row.
    """
    n = values.numel()
    if n == 0:
        return values.clone()
    device, dtype = values.device, values.dtype
    lengths = layout.lengths
    nblocks_row = (lengths + block - 1) // block
    block_offsets = torch.zeros(layout.num_rows + 1, dtype=torch.int64, device=device)
    torch.cumsum(nblocks_row, 0, out=block_offsets[1:])
    total_blocks = int(block_offsets[-1])
    # slot of each token in the padded [total_blocks, block] grid
    slot = block_offsets[:-1][layout.row_index] * block + layout.position
    grid = torch.zeros(total_blocks * block, dtype=dtype, device=device)
    grid[slot] = values
    grid = grid.view(total_blocks, block)
    # 1) scan inside every block with one GEMM: local[b, i] = Σ_{j>=i} c^(j-i) x[b, j]
    pad = (-total_blocks) % GEMM_TILE
    tiles = torch.cat([grid, grid.new_zeros(pad, block)]).view(-1, GEMM_TILE, block)
    local = (tiles @ _powers_matrix(c, block, dtype, device).T).reshape(-1, block)[:total_blocks]
    # 2) block-start values follow y0_k = local0_k + c^block · y0_{k+1} within a row
    if total_blocks > int((nblocks_row > 0).sum()):  # some row has more than one block
        block_layout = Ragged(block_offsets)
        start_full = reverse_discounted_cumsum(local[:, 0].contiguous(), block_layout, c ** block, block)
        # value carried into block k from block k+1 of the same row (0 for a row's last block)
        nxt = torch.zeros(total_blocks, dtype=dtype, device=device)
        not_last = torch.ones(total_blocks, dtype=torch.bool, device=device)
        not_last[block_offsets[1:][nblocks_row > 0] - 1] = False
        idx = torch.nonzero(not_last, as_tuple=True)[0]
        nxt[idx] = start_full[idx + 1]
        tail_pow = torch.pow(torch.tensor(c, dtype=torch.float64, device=device),
                             torch.arange(block, 0, -1, device=device, dtype=torch.float64)).to(dtype)
        local = local + nxt[:, None] * tail_pow[None, :]
    return local.reshape(-1)[slot]


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
                    gamma: float, lam: float) -> torch.Tensor:
    """GAE over the mask=1 tokens of each row, carrying across mask=0 tokens (verl, NeMo RL).

    verl ``compute_gae_advantage_return`` (core_algos.py L215-263 @1dda039b) and NeMo RL's PPO
    ``gae`` scan the row right to left with ``nv = g = 0``::

        δ = r_t + γ·nv − V_t ;  g' = δ + γλ·g ;  if m_t: nv, g = V_t, g' ;  A_t = g

    which is exactly GAE on the kept tokens compacted (``δ_k = r_k + γV_{k+1} − V_k``), each dropped
    token taking the value of the next kept token of its row (0 when none follows). Rewards on
    mask=0 tokens are ignored. Returns the pre-whitening advantages [N].
    """
    keep = mask.bool()
    clayout, kept = layout.compact(keep)
    r_k, v_k = rewards[kept], values[kept]
    v_next = torch.zeros_like(v_k)
    if v_k.numel():
        has_next = torch.ones_like(v_k, dtype=torch.bool)
        ends = clayout.offsets[1:][clayout.lengths > 0] - 1
        has_next[ends] = False
        nxt = torch.nonzero(has_next, as_tuple=True)[0]
        v_next[nxt] = v_k[nxt + 1]
    delta = r_k + gamma * v_next - v_k
    adv_k = reverse_discounted_cumsum(delta, clayout, gamma * lam)
    return layout.next_kept_value(keep, adv_k, 0.0)


def gae_all_positions(rewards: torch.Tensor, values: torch.Tensor, layout: Ragged, gamma: float,
                      lam: float) -> torch.Tensor:
    """GAE over every position of each row, no skipping: ``δ_t = r_t + γV_{t+1} − V_t`` (``V_L = 0``).

    ROLL ``compute_gae_advantage_return`` passes unmasked values and rewards over every column;
    OpenRLHF ``get_advantages_and_returns`` does the same after zeroing V and R at mask=0 (the
    caller multiplies by the mask first).
    """
    v_next = torch.zeros_like(values)
    if values.numel():
        has_next = torch.ones_like(values, dtype=torch.bool)
        ends = layout.offsets[1:][layout.lengths > 0] - 1
        has_next[ends] = False
        nxt = torch.nonzero(has_next, as_tuple=True)[0]
        v_next[nxt] = values[nxt + 1]
    delta = rewards + gamma * v_next - values
    return reverse_discounted_cumsum(delta, layout, gamma * lam)


def returns_skip_masked(rewards: torch.Tensor, mask: torch.Tensor, layout: Ragged, gamma: float) -> torch.Tensor:
    """Discounted return over the mask=1 tokens, carried across holes, 0 at mask=0 (verl REINFORCE++).

    verl ``compute_reinforce_plus_plus_outcome_advantage`` (core_algos.py L693-731 @1dda039b, after
    PR #7300): ``new = r_t + γ·run; ret_t = new·m_t; run = new if m_t else run``. Rewards on mask=0
    tokens are dropped and γ is not applied across a hole.
    """
    keep = mask.bool()
    clayout, kept = layout.compact(keep)
    ret_k = reverse_discounted_cumsum(rewards[kept], clayout, gamma)
    out = torch.zeros_like(rewards)
    out[kept] = ret_k
    return out
