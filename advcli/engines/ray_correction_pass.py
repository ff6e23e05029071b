"""verl's rollout correction (``algorithm.rollout_correction.*``) on ``--engine ray``.

The local engine's correction (:mod:`advcli.pipeline.correction_pass`) is a statistics pass over the
mask and both log-prob columns (per-step metric sums, the IS weights' batch-normalisation factor,
each row's Σ corrected mask, the weights' histogram), then a per-chunk application in the write
pass. On Ray, as for the whitening moments:

- the pass runs on the workers (``map_batches``, mode ``"correction"``): each batch goes through the
  local engine's own :func:`~advcli.pipeline.correction_pass.correction_chunk` and only **per-row**
  partials travel to the driver (about ten float64 per row: Σ mask, Σ log-ratio, the rejection
  statistics, ...), with the batch's histogram counts;
- the driver puts the rows in global order and adds them into the per-step sums **in the local
  engine's chunks of ``chunk_rows`` rows**, so every float64 sum is the local engine's, bit for bit
  (per-batch partials added in another grouping would differ in the last bits); integer counts
  (Σ corrected mask per row, histogram) and max/min are exact in any order. Then the local engine's
  :func:`~advcli.pipeline.correction_pass.correction_state` (factors, verl's refusals);
- the write pass applies it per batch on the workers through ``chunk_math`` (the broadcast table
  carries the correction's spec and each row's normalisation factor) and writes
  ``rollout_is_weights`` / ``response_mask_after_rs``; ``run_ray`` adds the ``rollout_corr/*``
  metrics and the weights' histogram to the report as ``run_pipeline`` does.
"""
from __future__ import annotations

import pyarrow as pa
import torch

from ..correction import weights as rc
from ..pipeline.correction_pass import ROLES, correction_chunk, correction_state


def correction_batch(plan, reader, batch: pa.RecordBatch, file: str, row_base: int, n: int) -> dict[str, pa.Array]:
    """A worker's batch of the statistics pass (``n`` rows): per input row its Σ corrected mask and metric
    partials ``p:<how>:<name>``, the batch's histogram counts on its first row. The worker adds each
    row's global index."""
    from ..ops.ragged import Ragged

    offsets, tok = reader.tokens(batch, file, row_base, ROLES)
    rows, valid, hist, (raw, counts) = correction_chunk(plan, Ragged(torch.from_numpy(offsets)), tok)
    cols = {"valid": pa.array(valid.numpy())}
    if raw is not None:  # verl 0.6.0's quantiles: each row's weights at its mask=1 tokens, to the driver
        offs = torch.zeros(counts.numel() + 1, dtype=torch.int64)
        torch.cumsum(counts.to(torch.int64), 0, out=offs[1:])
        cols["qw"] = pa.ListArray.from_arrays(pa.array(offs.numpy()), pa.array(raw.detach().cpu().numpy()))
    cols.update({f"p:{how}:{name}": pa.array(v.numpy()) for name, (how, v) in rows.items()})
    h = [] if hist is None else hist.tolist()
    cols["hist"] = pa.array(([h] + [[]] * (n - 1)) if n else [], type=pa.list_(pa.int64()))
    return cols


def correction_fn(rows_on_workers):
    """``correction`` for :func:`advcli.pipeline.prepare_run`, run on the workers. ``rows_on_workers(payload,
    columns, inputs, stage)``: the engine's per-row pass (the payload's ``mode`` on every batch of those
    columns), its rows in global order (:func:`advcli.engines.ray_engine.rows_on_workers_fn`)."""
    def correction(plan, inputs, scopes, step_values, chunk_rows, progress, state=None):
        R = inputs.num_rows
        sums = rc.MetricSums(scopes.num_groups)
        hist = torch.zeros(_bins(), dtype=torch.int64) if plan.correction.histogram else None
        valid = torch.zeros(0, dtype=torch.int64)
        quantiles = rc.WeightQuantiles(scopes.sizes) if plan.correction.weight_quantiles else None
        if R:
            payload = {"plan": plan, "res": None, "names": inputs.paths, "device": "cpu", "mode": "correction",
                       "checked": set(state.checked_roles) if state is not None else set()}
            t = rows_on_workers(payload, [plan.cmap[r] for r in ROLES], inputs, "the rollout-correction pass",
                                "rollout correction")
            valid = torch.from_numpy(t.column("valid").to_numpy().copy())
            parts = [(n.split(":", 2)[1], n.split(":", 2)[2], torch.from_numpy(t.column(n).to_numpy().copy()))
                     for n in t.column_names if n.startswith("p:")]
            base = 0
            for n in inputs.file_rows():  # the local engine's chunks (per file): the same float64 additions
                for a in range(base, base + n, chunk_rows):
                    b = min(a + chunk_rows, base + n)
                    sums.add({name: (how, v[a:b]) for how, name, v in parts}, scopes.codes[a:b])
                    if quantiles is not None:  # the same chunks, in row order: steps close as in the local pass
                        qw = t.column("qw").slice(a, b - a).combine_chunks()
                        counts = torch.from_numpy(qw.value_lengths().to_numpy(zero_copy_only=False).astype("int64"))
                        quantiles.add(torch.from_numpy(qw.flatten().to_numpy(zero_copy_only=False).copy()), counts,
                                      scopes.codes[a:b])
                base += n
            if hist is not None:
                for h in t.column("hist").to_pylist():
                    if h:
                        hist += torch.tensor(h, dtype=torch.int64)
        if state is not None:
            state.checked_roles |= set(ROLES)
        if progress:
            progress("rollout correction", R, R)
        return correction_state(plan, inputs, scopes, step_values, sums, hist, quantiles), valid

    return correction


def _bins() -> int:
    from ..correction.plan import HIST_BINS

    return HIST_BINS
