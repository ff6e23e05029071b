"""The Ray engine's rows: the resolved per-row table cut down to what the workers need
(:func:`lean`) and to one batch's rows (:func:`take_rows`), and the column that carries each row's
global index from the workers to the writer (:data:`ROW_COL`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..ops.groups import GroupIndex

ROW_COL = "__advcli_row"  # global row index, carried from the workers to the writer (not written)


# Prepared fields take_rows gathers per row, those it keeps whole (per scope / per group), and
# those the workers never read (dropped from the broadcast by lean()).


_PER_ROW = {"scopes", "groups", "beta_row", "reward_row", "adv_row", "table"}
_WHOLE = {"step_values", "whiten_mean", "whiten_rstd", "tlr_mean", "tlr_rstd", "group_tables", "kl_deferred",
          "state"}  # state: the run's RunState (scope domains, block sizes), as the driver learned it
_DRIVER_ONLY = {"raw_score", "row_keys",
                "token_cache", "token_cache_complete", "token_spill",  # the local engine's chunk cache
                "diagnostics", "whiten_other"}  # diagnostics the driver reports (SkyRL, slime)
# "correction" (the rollout correction): its spec whole, its factor per row; lean() drops its sums


def lean(res):
    """The resolved tables as broadcast to the workers: without what only the driver's statistics
    read (``row_keys`` holds every row's prompt id) and without cached group buckets. A field
    this module does not know is refused rather than guessed per row or per scope."""
    names = [f.name for f in dataclasses.fields(res)]
    unknown = [n for n in names if n not in _PER_ROW | _WHOLE | _DRIVER_ONLY | {"correction"}]
    if unknown:
        raise RuntimeError(f"advcli.engines.ray_engine does not know Prepared field(s) {unknown}: say in "
                           "take_rows/lean whether they are per row, per scope or driver-only")

    def gi(g):
        return None if g is None else GroupIndex(g.codes, g.num_groups)

    table = dataclasses.replace(res.table, scopes=gi(res.table.scopes), groups=gi(res.table.groups))
    corr = getattr(res, "correction", None)
    if corr is not None:  # the workers apply it (spec, per-row factor); the sums and histogram are the report's
        corr = dataclasses.replace(corr, sums=None, hist=None)
    return dataclasses.replace(res, scopes=gi(res.scopes), groups=gi(res.groups), table=table,
                               **{k: None for k in _DRIVER_ONLY if k in names},
                               **({"correction": corr} if "correction" in names else {}))


def take_rows(res, idx: torch.Tensor):
    """The resolved tables restricted to rows ``idx`` (in that order): per-row tensors gathered,
    per-scope/per-group statistics kept whole (row codes still index them)."""
    def gi(g):
        return None if g is None else GroupIndex(g.codes[idx], g.num_groups)

    t = res.table
    table = dataclasses.replace(t, score=t.score[idx], valid_len=t.valid_len[idx], length=t.length[idx],
                                scopes=gi(t.scopes), groups=gi(t.groups),
                                columns={k: v[idx] for k, v in t.columns.items()})
    corr = getattr(res, "correction", None)
    if corr is not None and corr.factor_row is not None:
        corr = dataclasses.replace(corr, factor_row=corr.factor_row[idx])
    return dataclasses.replace(res, scopes=gi(res.scopes), groups=gi(res.groups), beta_row=res.beta_row[idx],
                               reward_row=res.reward_row[idx],
                               adv_row=None if res.adv_row is None else res.adv_row[idx], table=table,
                               **({"correction": corr} if corr is not None else {}))


def cat_rows(parts: list, num_rows: int):
    """One batch's resolved tables from several steps' (:func:`take_rows` of each, with the batch
    positions its rows go to): per-row tensors scattered into batch order, per-scope statistics and
    labels from the first (the per-step driver gives every step the run's scope codes and step values;
    each step's group codes are shifted past the previous step's, so that groups stay apart)."""
    def put(xs):
        if any(x is None for x in xs):
            return None
        out = torch.empty((num_rows, *xs[0].shape[1:]), dtype=xs[0].dtype)
        for (pos, _), x in zip(parts, xs):
            out[torch.from_numpy(pos)] = x
        return out

    def gi(get, apart: bool = False):
        gs = [get(r) for _, r in parts]
        if gs[0] is None:
            return None
        if not apart:  # scopes: the run's codes already
            return GroupIndex(put([g.codes for g in gs]), max(g.num_groups for g in gs))
        base = np.cumsum([0] + [g.num_groups for g in gs])  # each step's group codes after the previous step's
        return GroupIndex(put([g.codes + int(b) for g, b in zip(gs, base)]), int(base[-1]))

    rs = [r for _, r in parts]
    t = rs[0].table
    table = dataclasses.replace(t, score=put([r.table.score for r in rs]),
                                valid_len=put([r.table.valid_len for r in rs]),
                                length=put([r.table.length for r in rs]), scopes=gi(lambda r: r.table.scopes),
                                groups=gi(lambda r: r.table.groups, True),
                                columns={k: put([r.table.columns[k] for r in rs]) for k in t.columns})
    return dataclasses.replace(rs[0], scopes=gi(lambda r: r.scopes), groups=gi(lambda r: r.groups, True),
                               beta_row=put([r.beta_row for r in rs]), reward_row=put([r.reward_row for r in rs]),
                               adv_row=put([r.adv_row for r in rs]), table=table)
