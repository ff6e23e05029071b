"""Row sums taken the way a framework takes them on its padded ``[B, T]`` tensors.

A float32 ``torch.sum(dim=-1)`` over a padded row does not round like an exact sum: torch's
vectorised reduction assigns each element to an accumulator by its column, so where a row sits in
the grid (after how many padding zeros) changes the last bits. Where a group statistic divides by a
tiny std (equal rewards that differ only by a KL penalty), those bits reach the advantages. These
helpers lay each row out as the framework does and call the same torch reduction.
"""
from __future__ import annotations

from ..lazy_torch import torch
from .ragged import Ragged

MAX_CELLS = 1 << 22  # cells of one temporary grid (16 MiB of float32)


def aligned_row_sums(values: torch.Tensor, layout: Ragged, width: torch.Tensor, right: bool) -> torch.Tensor:
    """[B] ``grid.sum(dim=-1)`` where row i's L_i values fill ``width[i]`` columns, the other cells 0:
    ``right``: the *last* L_i columns (SkyRL's right-aligned response tensors,
    ``convert_prompts_responses_to_batch_tensors``); else the first L_i (verl's responses, right-padded to the
    batch's response length). ``width``: the longest response of the row's step.

    Rows of one width are summed together, in blocks of at most :data:`MAX_CELLS` cells (at least 2 rows
    per block where there are 2, so torch reduces each row on its own, as on SkyRL's batch)."""
    B = layout.num_rows
    out = torch.zeros(B, dtype=values.dtype, device=values.device)
    if B == 0:
        return out
    width = width.to(torch.int64).to(values.device)
    lengths = layout.lengths.to(values.device)
    if bool((width < lengths).any()):
        raise ValueError("a row is longer than its grid width")
    starts = layout.offsets[:-1].to(values.device)
    for w in torch.unique(width).tolist():
        rows = torch.nonzero(width == w, as_tuple=True)[0]
        if w == 0:
            continue
        block = max(2, MAX_CELLS // w)
        for k in range(0, rows.numel(), block):
            r = rows[k:k + block]
            L = lengths[r]
            n = int(L.sum())
            grid = torch.zeros(r.numel(), w, dtype=values.dtype, device=values.device)
            row_of = torch.repeat_interleave(torch.arange(r.numel(), device=values.device), L)
            pos = torch.arange(n, device=values.device) - torch.repeat_interleave(torch.cumsum(L, 0) - L, L)
            src = torch.repeat_interleave(starts[r], L) + pos
            col = w - torch.repeat_interleave(L, L) + pos if right else pos
            grid[row_of, col] = values[src]
            out[r] = grid.sum(dim=-1)
    return out
