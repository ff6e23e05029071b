"""verl's rollout correction (``algorithm.rollout_correction.*``) on ``--engine ray``.

The local engine's correction (:mod:`advcli.pipeline.correction`) is a statistics pass over the
mask and both log-prob columns (per-step metric sums, the IS weights' batch-normalisation factor,
each row's Σ corrected mask, the weights' histogram), then a per-chunk application in the write
pass. On Ray, as for the whitening moments:

- the pass runs on the workers (``map_batches``, mode ``"correction"``): each batch goes through the
  local engine's own :func:`~advcli.pipeline.correction.correction_chunk` and only **per-row**
  partials travel to the driver (about ten float64 per row: Σ mask, Σ log-ratio, the rejection
  statistics, ...), with the batch's histogram counts;
- the driver puts the rows in global order and adds them into the per-step sums **in the local
  engine's chunks of ``chunk_rows`` rows**, so every float64 sum is the local engine's, bit for bit
  (per-batch partials added in another grouping would differ in the last bits); integer counts
  (Σ corrected mask per row, histogram) and max/min are exact in any order. Then the local engine's
  :func:`~advcli.pipeline.correction.correction_state` (factors, verl's refusals);
- the write pass applies it per batch on the workers through ``chunk_math`` (the broadcast table
  carries the correction's spec and each row's normalisation factor) and writes
  ``rollout_is_weights`` / ``response_mask_after_rs``; ``run_ray`` adds the ``rollout_corr/*``
  metrics and the weights' histogram to the report as ``run_pipeline`` does.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from ..ops import rollout_correction as rc
from ..pipeline.correction import ROLES, correction_chunk, correction_state


def correction_batch(plan, reader, batch: pa.RecordBatch, file: str, row_base: int, grow: np.ndarray) -> pa.Table:
    """A worker's batch of the statistics pass: one row per input row (its global index, Σ corrected
    mask and metric partials ``p:<how>:<name>``), the batch's histogram counts on its first row."""
    from ..ragged import Ragged
    from .ray_engine import ROW_COL

    offsets, tok = reader.tokens(batch, file, row_base, ROLES)
    rows, valid, hist = correction_chunk(plan, Ragged(torch.from_numpy(offsets)), tok)
    cols = {ROW_COL: pa.array(grow, type=pa.int64()), "valid": pa.array(valid.numpy())}
    cols.update({f"p:{how}:{name}": pa.array(v.numpy()) for name, (how, v) in rows.items()})
    n = len(grow)
    h = [] if hist is None else hist.tolist()
    cols["hist"] = pa.array(([h] + [[]] * (n - 1)) if n else [], type=pa.list_(pa.int64()))
    return pa.table(cols)


def correction_fn(cl, paths: list[str], watch=None):
    """``correction`` for :func:`advcli.pipeline.resolve`, run on the workers."""
    from .ray_engine import RowLocator, _dataset, _map, gather_rows

    def correction(plan, inputs, scopes, step_values, chunk_rows, progress):
        R = inputs.num_rows
        sums = rc.MetricSums(scopes.num_groups)
        hist = torch.zeros(_bins(), dtype=torch.int64) if plan.correction.weights else None
        valid = torch.zeros(0, dtype=torch.int64)
        if R:
            payload = {"plan": plan, "res": None, "names": inputs.paths,
                       "locator": RowLocator(paths, inputs.file_rows()), "device": "cpu", "mode": "correction"}
            cols = [plan.cmap[r] for r in ROLES]
            ds = _map(cl, _dataset(cl, paths, cols), cl.ray.put(payload))
            t = gather_rows(ds, R, "the rollout-correction pass", watch)
            valid = torch.from_numpy(t.column("valid").to_numpy().copy())
            parts = [(n.split(":", 2)[1], n.split(":", 2)[2], torch.from_numpy(t.column(n).to_numpy().copy()))
                     for n in t.column_names if n.startswith("p:")]
            base = 0
            for n in inputs.file_rows():  # the local engine's chunks (per file): the same float64 additions
                for a in range(base, base + n, chunk_rows):
                    b = min(a + chunk_rows, base + n)
                    sums.add({name: (how, v[a:b]) for how, name, v in parts}, scopes.codes[a:b])
                base += n
            if hist is not None:
                for h in t.column("hist").to_pylist():
                    if h:
                        hist += torch.tensor(h, dtype=torch.int64)
        plan.checked_roles |= set(ROLES)
        if progress:
            progress("rollout correction", R, R)
        return correction_state(plan, inputs, scopes, step_values, sums, hist), valid

    return correction


def _bins() -> int:
    from ..correction import HIST_BINS

    return HIST_BINS
