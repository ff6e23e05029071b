"""Step-wise trajectories: a row-level estimator run on the last turn of each trajectory, broadcast to
all of its turns (``grouping.trajectories=last_step``).

SkyRL ``RayPPOTrainer.compute_advantages_and_returns``, step-wise branch (skyrl/train/trainer.py
L1142-1180 @a9564572), for one training batch::

    traj_id  = cumsum([False] + is_last_step[:-1])        # positional: a trajectory is a contiguous run
                                                          # of rows ending at an is_last_step row
    A_last   = estimator(rewards[is_last_step], uids[is_last_step])   # grpo / rloo / maxrl
    A[i]     = A_last[traj_id[i]]                          # every turn of a trajectory

The earlier turns' rewards are ignored; their group ids are not used. SkyRL asserts that the batch's
last row ends a trajectory; so does this.

How a turn takes its trajectory's value (``grouping.trajectory_copy``): from 0.2.0 on each of the turn's own
positions (``own_mask``); SkyRL 0.1.0 (trainer.py compute_advantages_and_returns L784-815 @skyrl-v0.1.0) indexes
the last steps' padded ``[n, T]`` advantage rows, ``A[i] = last_step_advantages[traj_id[i]]``, so position t of
a turn holds the last step's value at t: the value below the last step's length ``L_last`` (its right-padded
``response_mask`` is 1 on ``[0, L_last)``), 0 from ``L_last`` on (``last_row``; :func:`last_step_lengths`
gives each row its ``L_last``, the token pass multiplies by ``t < L_last``). verl's v1 trainer
(``compute_advantage_for_multi_trajectories``, verl/trainer/ppo/v1/utils.py L207-213 @1dda039b) reads each session's
value at its final output's ``response_mask.argmax`` (the first valid token; column 0 where there is none, whose
masked advantage is 0) and puts it on each output's own positions (``first_valid``: ``own_mask``, 0 for a session
whose final output has no valid token; that output still counts in its group's statistics).
"""
from __future__ import annotations

import dataclasses

from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.batch import RowTable
from ..ops.groups import GroupIndex
from . import EstimatorSpec

COLUMN = "is_last_step"
SOURCE = "step-wise: SkyRL RayPPOTrainer.compute_advantages_and_returns (trainer.py L1142-1180 @a9564572)"
SOURCE_V1 = ("multi-output sessions: verl compute_advantage_for_multi_trajectories (verl/trainer/ppo/v1/utils.py "
             "L148-215 @1dda039b)")
SOURCE_010 = ("step-wise as SkyRL 0.1.0 copies it: RayPPOTrainer.compute_advantages_and_returns (skyrl/train/"
              "trainer.py L784-815 @skyrl-v0.1.0)")


def trajectories(last: torch.Tensor, scopes: GroupIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """(``order``, ``traj``): the rows sorted by scope (input order inside a scope), and for each of
    them the index of its trajectory among the last-step rows of that order (``order[last[order]]``).

    Raises :class:`AdvcliError` where a scope's last row is not a last step (SkyRL's assert)."""
    order = torch.argsort(scopes.codes, stable=True)
    last_o = last[order].to(torch.int64)
    sizes = scopes.sizes
    ends = torch.cumsum(sizes, 0)[sizes > 0] - 1
    open_end = last_o[ends] == 0
    if bool(open_end.any()):
        row = int(order[ends[open_end][0]])
        raise AdvcliError(f"column {COLUMN!r}: row {row}, the last row of its training batch, has is_last_step=false, "
                          "so its trajectory never ends. SkyRL derives trajectories by position (a contiguous run "
                          "of rows ending at an is_last_step row) and asserts that every one ends",
                          hint="keep each trajectory's turns contiguous and in order, its last turn flagged, and "
                               "every step's rows complete")
    traj = torch.cumsum(last_o, 0) - last_o
    return order, traj


LAST_LENGTH = "last_step_length"  # the row table's column of each row's L_last (trajectory_copy=last_row)


def last_step_lengths(last: torch.Tensor, length: torch.Tensor, scopes: GroupIndex) -> torch.Tensor:
    """int64 [R]: for each row, the length of its trajectory's last step (the row whose padded advantage row
    SkyRL 0.1.0 copies onto it), gathered by trajectory index, no loop over rows."""
    order, traj = trajectories(last != 0, scopes)
    lengths_o = length.to(torch.int64)[order]
    last_lengths = lengths_o[last[order] != 0]  # the last steps' lengths, trajectory by trajectory
    out = torch.empty_like(lengths_o)
    out[order] = last_lengths[traj]
    return out


def last_step(inner: EstimatorSpec, copy: str = "own_mask") -> EstimatorSpec:
    """``inner`` (a row-level estimator) run on the last-step rows, each trajectory getting its value
    (``copy``: ``grouping.trajectory_copy``; ``last_row`` makes a turn's tokens other than one value, so the
    spec is then not ``row_constant``)."""
    if inner.level != "row" or inner.row_fn is None:
        raise AdvcliError(f"grouping.trajectories=last_step needs an outcome (row-level) estimator; {inner.name} "
                          "computes per-token advantages, which a trajectory-wide broadcast would discard")

    def row_fn(table: RowTable, p: dict) -> torch.Tensor:
        if table.num_rows == 0:
            return inner.row_fn(table, p)
        last = table.columns[COLUMN] != 0
        order, traj = trajectories(last, table.scopes)
        rows = order[last[order]]  # the last steps, by scope then input order (SkyRL's index[is_last_step])
        groups = None
        if table.groups is not None:
            _, codes = torch.unique(table.groups.codes[rows], return_inverse=True)
            groups = GroupIndex.from_codes(codes)
        sub = RowTable(score=table.score[rows], valid_len=table.valid_len[rows], length=table.length[rows],
                       scopes=GroupIndex(table.scopes.codes[rows], table.scopes.num_groups), groups=groups,
                       columns={k: v[rows] for k, v in table.columns.items()})
        a = inner.row_fn(sub, p)
        if copy == "first_valid":  # verl v1: the final output's masked advantage at argmax(mask), 0 without one
            a = torch.where(sub.valid_len > 0, a, torch.zeros_like(a))
        out = torch.empty(table.num_rows, dtype=a.dtype)
        out[order] = a[traj]
        return out

    source, how = {
        "own_mask": (SOURCE, "on each trajectory's last step, broadcast to its turns"),
        "first_valid": (SOURCE_V1, "on each session's last output, broadcast to its outputs (0 where that output "
                                   "has no valid token)"),
        "last_row": (SOURCE_010, "on each trajectory's last step; a turn's position t gets it where t < the last "
                                 "step's length, else 0"),
    }[copy]
    # last_row makes a turn's tokens other than one value: the spec is then not row_constant
    return dataclasses.replace(inner, row_fn=row_fn, needs=tuple(dict.fromkeys(inner.needs + (COLUMN,))),
                               source=f"{inner.source}; {source}", formula=f"{inner.formula} — {how}",
                               row_constant=inner.row_constant and copy != "last_row")
