"""Run statistics, accumulated on the way through (no second read of the input).

The collector is fed twice by the pipeline:

1. :meth:`FigureCollector.set_rows` once, with the resolved per-row table of the whole input (raw score,
   the estimator's row score, groups, steps, valid lengths, the per-row KL of verl's
   ``apply_kl_penalty`` and the β used by each step);
2. :meth:`FigureCollector.add_chunk` for every chunk of the write pass (advantages, returns, token-level
   rewards, values, mask, the chunk's layout), or :meth:`FigureCollector.add_row_values` (the rows'
   advantage and return, Σ token_level_rewards and length, instead of the tokens) when they are
   row-constant (see "How" below).
   Either is one chunk's partial figures (:meth:`FigureCollector.token_partials`, a few numbers per row,
   the sample's values in the chunk, histogram counts) added by :meth:`FigureCollector.add_partials` in
   row order: the Ray engine's workers make the partials and one actor adds them.

:meth:`FigureCollector.finish` then returns plain JSON-able structures (no tensors, no NaN: a figure that
cannot be computed is ``None``). They end up on :class:`advcli.pipeline.RunResult`:

``metrics`` — ``{name: float | int | None}`` over the whole run. verl's names, with verl's
definitions (``verl/trainer/ppo/metric_utils.py::compute_data_metrics`` and
``ray_trainer.py::apply_kl_penalty`` @1dda039b):

- ``critic/score/{mean,max,min}``: sequence score = Σ_t token_level_scores (the reward column, the
  weighted reward components or Σ token_level_scores, before normalisation and KL), over the rows
  with response_length > 0 (verl drops "aborted" rows from score and rewards).
- ``critic/rewards/{mean,max,min}``: sequence reward = Σ_t token_level_rewards as advcli computed
  them (after normalisation, placement and KL), same rows.
- ``critic/advantages/{mean,max,min}``, ``critic/returns/{mean,max,min}``: over the mask=1 tokens.
- ``critic/values/{mean,max,min}`` and ``critic/vf_explained_var`` (``1 − var(G − V)/(var(G) + 1e-5)``,
  unbiased vars over mask=1 tokens) when the estimator reads a ``values`` column (verl ``use_critic``).
- ``response_length/{mean,max,min}``: verl's response length is the attention-mask length of the
  response, i.e. the list length L_i (for padded lists: last mask=1 position + 1), **not** Σ mask; all
  rows. ``response_length_non_aborted/{mean,max,min}`` and ``response/aborted_ratio`` likewise.
- ``actor/reward_kl_penalty`` = mean over rows of ``Σ_t kld·m / (Σ_t m + 1e-8)`` and
  ``actor/reward_kl_penalty_coeff`` = the β used (the value before the step's update); only when KL
  enters the reward. Per step these are exactly verl's; overall they are row-weighted means of the
  per-step values (identical for a one-step dump).

advcli's additions (not logged by verl):

- ``critic/{advantages,returns}/count`` (finite valid tokens; mean/std/min/max are over these) and
  ``.../nonfinite`` (valid tokens holding NaN/±inf), ``critic/rewards/std``, ``critic/score/std``,
  ``critic/advantages/std`` (population std).
- quantiles ``critic/{score,rewards,advantages}/p{1,5,25,50,75,95,99}`` (numpy's default linear
  interpolation). Row quantities (score, rewards) are exact, over the non-aborted rows. Token
  advantages (the finite valid ones) are exact whenever every row's finite valid advantages are one
  value (every row-level estimator, whitened or not): the row values weighted by their token counts
  give the token distribution. Otherwise (GAE, REINFORCE++, ...) they come from a fixed sample of
  :data:`RESERVOIR` valid tokens drawn by ordinal (:func:`sample_ordinals`): the run's V valid tokens,
  in input order (each placed by its row's start in the row table's Σ mask and its rank in the
  row), are cut into RESERVOIR strata of V/RESERVOIR (±1) consecutive tokens and each
  stratum gives the token at an offset set by a fixed hash of the stratum number (seed :data:`SEED`)
  — a stratified sample that does not depend on ``--chunk-rows``, non-finite values left out, and
  exact when the run has at most RESERVOIR valid tokens. ``critic/advantages/quantiles_exact`` says
  which.
- group figures (when rows are grouped): ``groups/count``, ``groups/size/{mean,min,max}``,
  ``groups/singleton_share``, ``groups/all_equal_share`` (groups of ≥ 2 rows whose estimator row
  scores are all equal), ``groups/solved_share`` (share of rows with score > 0 among
  the rows with a score, not NaN), ``groups/solved_{all,none,some}_share`` (groups where every / no /
  some rows with a score have score > 0) — the definitions of ``group_health`` (advcli.figures.group_health),
  ``groups/adv_sign/{mixed,only_pos,only_neg,all_zero}_share`` (sign of each row's mean valid
  advantage) and ``groups/adv_sign/balance_mean`` (mean over groups of (#pos − #neg)/n).

``per_step`` — one dict per step (ascending; a single entry with ``step: None`` without a step
column): ``step``, ``rows``, ``kl_coef``/``kl`` (as before), and the verl metric names above for
that step (score, rewards, advantages, returns, values, response_length, reward KL).

``histograms`` — ``{name: {"edges": [b+1 floats], "counts": [b ints], "underflow": int,
"overflow": int, "over": "rows" | "tokens", "exact": bool, "note": str}}`` for ``score``,
``rewards`` (rows, :data:`BINS` equal bins between the exact min and max), ``advantages`` (tokens)
and ``group_size`` (integer bins). Advantages (finite valid tokens): when they are row-constant,
exact counts over equal bins between the exact min and max, from the row table; otherwise the edges
are fixed from the run's first RESERVOIR finite valid tokens (their [min, max] widened by half their
span on each side; all of them when the run has fewer) and every token is counted exactly against
those edges — a value in bin k when ``e_k <= x < e_k+1``, the last bin closed, as numpy —, values
outside them in ``underflow``/``overflow``. Neither depends on ``--chunk-rows``.

How (cost): the token sums are taken per row in float64 (each row reduced on its own), then added to
each scope's totals row by row in input order, so no figure depends on how rows are cut into chunks.
For row-level estimators :class:`advcli.pipeline.observe.RunObserver` feeds the rows' final values instead of the tokens
(:meth:`FigureCollector.add_row_values`): the valid-token counts of the row table weight them, and the only
per-token work left is Σ token_level_rewards per row.

Memory: a few float64/int64 entries per row (like the row table) plus per-step accumulators, the
sample and the histogram counts (and, until the histogram's edges are fixed, up to one chunk of
advantages); nothing grows with the number of tokens.

Numpy only (no torch, so that ``advcli stats`` starts without it): the run hands its tensors over at the
collector's entry points, which convert them once (:func:`advcli.figures.arrays.to_numpy`).

Each figure's name, unit, definition and the places it is shown are registered in
:mod:`advcli.report.catalog`; a figure computed from the row table is computed there too
(``Figure.compute``, called by :meth:`FigureCollector.finish`).

Where: :mod:`.collector` (:class:`FigureCollector`, the collector), :mod:`.arrays` (that conversion, per-row
reductions, group codes), :mod:`.verl_metrics` (the figures under
verl's names and the group figures), :mod:`.sums` (per-row partials and per-scope running sums),
:mod:`.quantile_sketch` (exact quantiles and the advantage sample they fall back on),
:mod:`.histograms`, :mod:`.json_values` (figures as JSON floats).
"""
from __future__ import annotations

from .arrays import Codes, to_numpy
from .collector import ChunkFigures, FigureCollector, chunk_figures
from .histograms import BINS, StreamHistogram, histogram
from .json_values import figure
from .quantile_sketch import QUANTILES, RESERVOIR, SEED, TokenSample, hash_keys, quantiles, sample_ordinals
from .sums import RowPartials, ScopeSums, row_sums64
from .verl_metrics import explained_var, group_figures, metric_block, row_figures

__all__ = ["BINS", "QUANTILES", "RESERVOIR", "SEED", "ChunkFigures", "Codes", "FigureCollector", "RowPartials",
           "ScopeSums", "StreamHistogram", "TokenSample", "chunk_figures", "explained_var", "figure",
           "group_figures", "hash_keys", "histogram", "metric_block", "quantiles", "row_figures", "row_sums64",
           "sample_ordinals", "to_numpy"]
