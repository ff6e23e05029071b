"""What the estimators see: the per-row table of the whole input and one chunk of token rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..lazy_torch import torch
from .groups import GroupIndex
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
    labels: dict[str, list] = field(default_factory=dict)  # key-column role -> its values, by code in columns

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
    group_tables: Any = None  # the group token pass's tables (GroupTokenTables), for the estimators that declare one


@dataclass
class GroupTokenTables:
    """Per-(group, position) sums over the tokens of the whole input (verl's optimal token baselines).

    Group ``g`` owns the slots ``base[g] .. base[g] + width[g] − 1`` of every table, one per token
    position ``0 .. width[g] − 1`` (``width`` = the longest row of the group), so the tables hold at
    most as many entries as the input has tokens divided by the group size. Estimators fill them with
    :meth:`add` during the token-statistics pass and read them back when the chunk is written.
    """

    groups: GroupIndex
    width: torch.Tensor  # int64 [G] slots per group
    table: RowTable  # the per-row table of the whole input
    sums: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [size] accumulators
    extra: dict = field(default_factory=dict)  # per-group values an estimator derives from the row table

    def __post_init__(self) -> None:
        self.base = torch.zeros(self.groups.num_groups + 1, dtype=torch.int64)
        torch.cumsum(self.width, 0, out=self.base[1:])

    @property
    def size(self) -> int:
        return int(self.base[-1])

    def slots(self, group_of_token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """Flat slot of (group, position) for every token."""
        return self.base.to(position.device)[group_of_token] + position

    def add(self, name: str, slots: torch.Tensor, values: torch.Tensor, dtype=None) -> None:
        """``sums[name][slot] += value`` (accumulated in ``dtype``, float64 when None: float64 makes the
        sums independent of the chunking and of the order rows arrive in)."""
        dtype = torch.float64 if dtype is None else dtype
        if name not in self.sums:
            self.sums[name] = torch.zeros(self.size, dtype=dtype, device=values.device)
        self.sums[name].index_add_(0, slots, values.to(dtype))

    def get(self, name: str, slots: torch.Tensor) -> torch.Tensor:
        return self.sums[name].to(slots.device)[slots]
