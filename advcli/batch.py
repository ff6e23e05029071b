"""What the estimators see: the per-row table of the whole input and one chunk of token rows."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .ops.groups import GroupIndex
from .ragged import Ragged


@dataclass
class RowTable:
    """One entry per response of the whole input (CPU tensors).

    ``score`` is the row score the group estimators read: verl's ``s_i = Σ_t token_level_rewards``
    (the placed, normalised reward minus β·Σ KL when KL enters the reward).
    """

    score: torch.Tensor  # float [R]
    valid_len: torch.Tensor  # int64 [R]: Σ mask
    length: torch.Tensor  # int64 [R]: list length L_i
    scopes: GroupIndex  # the batch (step) of every row
    groups: GroupIndex | None  # group (prompt) of every row, codes unique across scopes
    columns: dict[str, torch.Tensor] = field(default_factory=dict)  # other per-row inputs

    @property
    def num_rows(self) -> int:
        return self.score.numel()


@dataclass
class TokenChunk:
    """A chunk of rows with its token columns as flat tensors (on the compute device)."""

    layout: Ragged
    mask: torch.Tensor  # float [N], 1 = trained token
    token_rewards: torch.Tensor  # float [N]: scores − β·KL (the estimator's token_level_rewards)
    tokens: dict[str, torch.Tensor]  # values, old_log_probs, sum_pi_squared, ...
    rows: dict[str, torch.Tensor]  # per-row inputs for these rows (row_id, group, scope, ...)
    stats: dict = field(default_factory=dict)  # results of earlier passes (e.g. token baselines)
