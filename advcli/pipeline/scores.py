"""Pass 1c (``kl.score_sum=right_aligned``: SkyRL; ``left_aligned``: verl): the row scores of a row-level
estimator summed as the framework sums them, when KL enters the reward.

``s_i = token_level_rewards.sum(dim=-1)`` on the float32 ``[B, longest row]`` grid of the step: SkyRL's
right-aligned one (``compute_grpo_outcome_advantage`` and the other outcome estimators, ppo_utils.py
@a9564572), verl's right-padded one (``scores = token_level_rewards.sum(dim=-1)`` in every outcome
estimator of core_algos.py @1dda039b, e.g. L304 and L612): the same token rewards (placed reward − β·KL,
:func:`advcli.pipeline.tokens.token_chunk`) and the same torch reduction
(:func:`advcli.ops.padded.aligned_row_sums`), so the last bits match where a group told apart only by its KL
terms divides by a tiny std.
"""
from __future__ import annotations

import torch

from ..io.reader import InputSet
from ..ops.padded import aligned_row_sums
from ..ops.ragged import Ragged
from .plan import Plan, ProgressFn
from .read import ChunkReader, roles_to_columns
from .rows import Prepared
from .tokens import token_chunk


def grid_scores(plan: Plan, inputs: InputSet, res: Prepared, chunk_rows: int,
                progress: ProgressFn | None) -> torch.Tensor:
    """[R] each row's float32 token rewards summed by torch on its step's grid (right- or left-aligned, as
    ``kl.score_sum`` says)."""
    right = plan.run.kl.score_sum == "right_aligned"
    t = res.table
    width = torch.zeros(res.scopes.num_groups, dtype=torch.int64).scatter_reduce_(
        0, res.scopes.codes, t.length.to(torch.int64), reduce="amax")[res.scopes.codes]
    reader = ChunkReader(plan, inputs, res.state)
    cols = list(roles_to_columns(plan, plan.token_roles))
    parts, row0 = [], 0
    for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
        chunk = token_chunk(plan, res, Ragged(torch.from_numpy(offsets)), tok, row0)
        parts.append(aligned_row_sums(chunk.token_rewards, chunk.layout, width[row0:row0 + batch.num_rows],
                                      right).cpu())
        row0 += batch.num_rows
        if progress:
            progress("scores", row0, inputs.num_rows)
    if not parts:
        return t.score
    scores = torch.cat(parts)
    empty = t.length == 0  # no token to sum: the score as placed (verl: the reward in the batch's last column)
    if bool(empty.any()):
        scores[empty] = t.score[empty].to(scores.dtype)
    return scores
