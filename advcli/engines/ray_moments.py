"""The Ray engine's whitening statistics (pass 2): per-scope moments made by the workers, merged exactly.

Each worker batch of the moments pass reduces its tokens (or, for the token rewards, its token
rewards) to per-scope :class:`advcli.ops.whiten.MomentSums` exactly as the local engine's
:func:`advcli.pipeline.moments.token_moment_pass` does per chunk (``row_partials`` then ``add_rows``)
and ships them whole (:func:`moments_batch`: their exact integer bins, a few hundred bytes); the driver
adds the bins (:meth:`MomentSums.merge`), so that Σm, Σvm, Σv²m are the correctly rounded sums of
every token whatever the batches: the local engine's bits.

With the per-step driver (:mod:`advcli.engines.ray_steps`), :func:`step_whitening` runs pass 2 after
the per-step resolution: the workers read the resolved rows through the step index, the driver gets
a few floats per step (the sums), computes mean and rstd per step with the local engine's own
:func:`advcli.pipeline.prepare.whitening_of_sums` and hands them to the write pass's workers in the
step index. Row-level estimators need no token pass: each step's sums come from its rows in the
worker task that resolved it (:func:`advcli.pipeline.prepare.row_whitening_sums`, placed among the run's
scopes by :func:`placed`) (the scope is the step, or the whole dump as one step with
``grouping.scope: all``).
"""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pyarrow as pa
import torch

from ..ops.whiten import MomentSums, WhitenSpec
from ..pipeline import chunk_math
from ..pipeline.moments import span_weights


def moments_batch(plan, sub, layout, tok: dict, grow: np.ndarray, rewards: bool) -> pa.Table:
    """One batch of the moments pass (a worker): the per-scope moments of its token rewards
    (``rewards``) or its advantages before whitening, as the local engine's moments pass weighs them
    (``whitening.mask: all`` counts every response token of the advantages)."""
    adv, _, tlr, mask = chunk_math(plan, sub, layout, tok, 0, apply_whiten=False, rewards_only=rewards)
    v = tlr if rewards else adv
    lay = layout.to(v.device)
    w, u = span_weights(plan, lay, mask, rewards)
    sums = MomentSums.zeros(sub.scopes.num_groups)
    sums.add_rows(*MomentSums.row_partials(v, w, lay, sub.scopes.codes, u))
    return pa.table({"first_row": [int(grow.min()) if len(grow) else -1],
                     "sums": pa.array([pickle.dumps(sums)], type=pa.binary())})


def gather_moments(ds, num_scopes: int, watch=None) -> MomentSums:
    """The moments pass's batches (:func:`moments_batch`) merged exactly into the run's per-scope sums."""
    if watch is not None:
        watch.stage("the token-moments pass")
    sums = MomentSums.zeros(num_scopes)
    for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        for part in b.column("sums").to_pylist():
            sums.merge(pickle.loads(part))
        if watch is not None:
            watch.tick()
    return sums


def placed(sums: MomentSums, offset: int, num_scopes: int) -> MomentSums:
    """``sums`` (a step's D scopes) as scopes ``offset``..``offset+D-1`` of ``num_scopes``: their exact
    bins moved, so that :meth:`MomentSums.merge` adds them exactly into the run's sums."""
    out = MomentSums.zeros(num_scopes, mean_sum=sums.total_mean is not None)
    D = sums.count.numel()
    for mine, theirs in zip(out._exact, sums._exact):
        mine.bins = {(s + offset, e): v for (s, e), v in theirs.bins.items()}
        mine.special[offset:offset + D] = theirs.special
    for tensor, part in zip(out.tensors(), sums.tensors()):
        tensor[offset:offset + D] = part
    return out


def step_whitening(plan, resolved, moments_pass) -> dict:
    """Pass 2 for the per-step driver (see the module's docstring): ``moments_pass(mode, index)`` runs the
    workers' moments pass (``moments:rewards`` / ``moments:advantages``) reading the resolved rows through
    ``index`` and returns the merged sums. Sets ``resolved.index.per_scope`` (what the workers apply:
    ``tlr_mean``/``tlr_rstd``, ``whiten_mean``/``whiten_rstd``, [S] float64 each) and returns it with
    what the run's statistics add (``diagnostics``, ``whiten_other``)."""
    from ..pipeline.moments import token_reward_small, whiten_stats
    from ..pipeline.prepare import whitening_of_sums

    step_values, S = resolved.step_values, len(resolved.step_values)
    per: dict = {}
    if plan.run.reward.whiten_tokens:  # pass 2a: token-reward whitening (ROLL whiten_rewards)
        sums = moments_pass("moments:rewards", resolved.index)
        per["tlr_mean"], per["tlr_rstd"] = whiten_stats(plan, sums, WhitenSpec(), step_values,
                                                          token_reward_small(plan), resolved.state)
        resolved.index = dataclasses.replace(resolved.index, per_scope=dict(per))
    extra: dict = {}
    if plan.whiten:
        if plan.spec.level == "row":
            sums = MomentSums.zeros(S)
            for part, offset in resolved.row_sums:
                sums.merge(placed(part, offset, S))
        else:
            sums = moments_pass("moments:advantages", resolved.index)
        cells = lambda: torch.tensor(resolved.cells, dtype=torch.float64)  # noqa: E731
        per["whiten_mean"], per["whiten_rstd"], item, other = whitening_of_sums(plan, sums, step_values, cells,
                                                                                resolved.state)
        extra = {"diagnostics": [item], "whiten_other": other}
    resolved.index = dataclasses.replace(resolved.index, per_scope=per)
    return {**per, **extra}
