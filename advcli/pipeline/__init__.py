"""Plan the passes, stream the chunks, compute, write.

The canonical pipeline, for every row ``i`` and token ``t``::

    r_i    row reward (reward column, weighted components, or Σ token_level_scores)
    r̃_i    = clip(normalize(r_i))                                  reward.normalize / reward.clip
    R_it   = r̃_i at the placement token (or token_level_scores) − β_step·KL_it      kl.*
    A, G   = estimator(R, mask, values, groups, ...)                estimator.*
    A      = clip(whiten(A))                                        advantage.*

Passes (only those a configuration needs):

1. **rows**: the small columns (group id, step, rewards) and, where a row feature needs them, the
   token columns reduced per row (Σ mask, Σ KL). Builds the per-row table of the whole input.
2. in memory, on that table: the KL coefficient of every step (an adaptive controller is stepped
   in ascending step order), reward normalisation, and every row-level estimator — exact over
   whole groups and steps wherever their rows sit.
3. **token statistics** (only for whitening of token-varying advantages): per-step moments.
4. **write**: every column, chunk by chunk, with the new columns appended; row order kept.

Memory is bounded by the chunk plus the per-row table (a few tens of bytes per row).

The stages, one module each (data flows down the list; no module imports one below it):

- ``plan``: :class:`Plan` (:func:`make_plan`), the run's configuration checked against the schema;
- ``read``: chunk sizes and :class:`ChunkReader` (token columns as flat tensors, checked);
- ``rows``: pass 1, the row table, scopes, groups, KL coefficients; :class:`Prepared`;
- ``tokens``: one chunk's token math (token rewards, estimator, final element-wise steps);
- ``moments``: pass 2, per-scope token moments for whitening;
- ``prepare``: :func:`prepare_run`, passes 1-2 together;
- ``output``: output paths, schema with provenance, one chunk's record batch;
- ``observe``: :class:`RunObserver`, the write pass's feed of the run statistics and diagnostics;
- ``write``: pass 3, compute, observe and write every chunk, overlapped;
- ``run``: :func:`run_pipeline`, one run end to end (its :class:`advcli.result.RunResult`).
"""
from __future__ import annotations

from ..io.writer import OUTPUT_MODES
from ..result import RunResult
from .output import SIDECAR_ROW, output_batch, output_paths, output_schema
from .plan import NEW_COLUMNS, Plan, ProgressFn, choose_output_columns, make_plan, pick_device
from .prepare import prepare_run
from .read import CHUNK_TOKENS, ChunkReader, chunk_rows_for, roles_to_columns, to_device
from .run import run_pipeline
from .tokens import chunk_math

__all__ = ["CHUNK_TOKENS", "NEW_COLUMNS", "OUTPUT_MODES", "SIDECAR_ROW", "ChunkReader", "Plan", "ProgressFn",
           "RunResult", "choose_output_columns", "chunk_math", "chunk_rows_for", "make_plan", "output_batch",
           "output_paths", "output_schema", "pick_device", "prepare_run", "roles_to_columns", "run_pipeline",
           "to_device"]
