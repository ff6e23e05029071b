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
- ``run``: :func:`run_pipeline`, one run end to end (its :class:`advcli.results.RunResult`).
"""
from __future__ import annotations

from ..plugins import lazy_exports

# each public name and the stage module that holds it: imported when first read, so that a light command
# (``advcli validate``) can plan a run (``advcli.pipeline.plan``) without the math modules importing torch
_WHERE = {"OUTPUT_MODES": "..io.modes", "RunResult": "..results", "SIDECAR_ROW": ".output",
          "output_batch": ".output", "output_paths": ".output", "output_schema": ".output", "scratch_output": ".output",
          "NEW_COLUMNS": ".plan", "Plan": ".plan", "ProgressFn": ".plan", "choose_output_columns": ".plan",
          "make_plan": ".plan", "pick_device": ".plan", "prepare_run": ".prepare", "CHUNK_TOKENS": ".read",
          "ChunkReader": ".read", "chunk_rows_for": ".read", "roles_to_columns": ".read", "to_device": ".read",
          "run_pipeline": ".run", "chunk_math": ".tokens"}

__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, globals(), _WHERE)
