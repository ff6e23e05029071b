"""The rollout correction's statistics pass (verl's ``algorithm.rollout_correction``): one read of the
mask and both log-prob columns per chunk, the per-step metric sums, IS-weight normalisation factors and
the histogram of the weights. The math is :mod:`advcli.correction.weights`; the planning, the
per-chunk application and the metrics are :mod:`advcli.correction.plan`.
"""
from __future__ import annotations

import torch

from ..correction import weights as rc
from ..correction.plan import HIST_BINS, CorrectionState
from ..errors import AdvcliError
from ..ops.ragged import Ragged
from .read import ChunkReader

ROLES = ["response_mask", "old_log_probs", "rollout_log_probs"]


def correction_chunk(plan, layout: Ragged, tok: dict):
    """One chunk of the pass: (per-row metric partials ``{name: (how, float64 [B])}``, Σ corrected
    mask per row int64 [B], histogram counts of the weights over mask=1 tokens or None, (the weights before
    truncation at the mask=1 tokens, their count per row) for verl 0.6.0's quantiles or (None, None)). Rows are
    whole in a chunk, so these do not depend on where chunks are cut (the Ray engine runs it on
    its workers, :mod:`advcli.engines.ray_correction_pass`)."""
    spec = plan.correction
    mask = tok["response_mask"].to(plan.dtype)
    out = rc.correct_chunk(spec, layout, mask, tok["old_log_probs"], tok["rollout_log_probs"])
    hist = None
    if spec.histogram:  # bins of width upper/HIST_BINS on [0, upper]: every weight is in there
        w = out.weights[mask > 0].to(torch.float64)
        b = (w * (HIST_BINS / spec.upper)).floor().clamp_(0, HIST_BINS - 1).to(torch.int64)
        hist = torch.bincount(b, minlength=HIST_BINS)
    seen = out.mask if spec.corrects_mask else mask  # the mask the estimator counts (OpenRLHF: the input's)
    return out.rows, layout.count_per_row(seen > 0), hist, (out.raw, out.raw_counts)


def correction_pass(plan, inputs, scopes, step_values, chunk_rows: int, progress=None, state=None):
    """(CorrectionState, valid_after [R] int64): one read of mask, old and rollout log-probs (recorded as
    checked in the run's ``state``)."""
    spec = plan.correction
    reader = ChunkReader(plan, inputs, state)
    cols = [plan.cmap[r] for r in ROLES]
    sums = rc.MetricSums(scopes.num_groups)
    valid: list[torch.Tensor] = []
    hist = torch.zeros(HIST_BINS, dtype=torch.int64) if spec.histogram else None
    quantiles = rc.WeightQuantiles(scopes.sizes) if spec.weight_quantiles else None
    row0 = 0
    for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, ROLES)
        layout = Ragged(torch.from_numpy(offsets))
        rows, v, h, (raw, counts) = correction_chunk(plan, layout, tok)
        sums.add(rows, scopes.codes[row0:row0 + layout.num_rows])
        if quantiles is not None:
            quantiles.add(raw, counts, scopes.codes[row0:row0 + layout.num_rows])
        valid.append(v)
        if hist is not None:
            hist += h
        row0 += layout.num_rows
        if progress:
            progress("rollout correction", row0, inputs.num_rows)
    if state is not None:
        state.checked_roles |= set(ROLES)
    v = torch.cat(valid) if valid else torch.zeros(0, dtype=torch.int64)
    return correction_state(plan, inputs, scopes, step_values, sums, hist, quantiles), v


def correction_state(plan, inputs, scopes, step_values, sums: rc.MetricSums, hist, quantiles=None):
    """The pass's per-step sums -> :class:`CorrectionState` (normalisation factors), after refusing
    what verl refuses (a step without a valid token; IS weights all 0). ``quantiles``: verl 0.6.0's weight
    quantiles (:class:`~advcli.correction.weights.WeightQuantiles`), taken as the pass went."""
    spec = plan.correction
    for s in range(scopes.num_groups if spec.gate is None else 0):  # OpenRLHF refuses neither (NaN figures)
        if sums.acc and sums.get("n", s) == 0 and sums.get("rows", s) > 0:
            where = f" in step {step_values[s]}" if step_values[s] is not None else ""
            raise AdvcliError(f"{inputs.paths[0]}: the response mask has no valid token{where}; verl's rollout "
                              "correction refuses such a batch (ValueError: response_mask must contain at least "
                              "one valid token)")
        if spec.weights and not spec.raw_metrics and sums.acc and sums.get("n", s) > 0 and sums.get("wc2", s) == 0:
            where = f" in step {step_values[s]}" if step_values[s] is not None else ""
            band = f" (the IcePop band [{spec.lower:g}, {spec.upper:g}] excludes every token)" if spec.icepop else ""
            raise AdvcliError(f"{inputs.paths[0]}: every IS weight{where} is 0{band}, and verl's metrics then "
                              "divide by zero (compute_is_metrics: rollout_is_eff_sample_size = 1/0, "
                              "ZeroDivisionError): verl stops at this batch",
                              hint="widen algorithm.rollout_correction.rollout_is_threshold")
    factors = [None] * scopes.num_groups
    if spec.weights and spec.batch_normalize and sums.acc:
        factors = rc.norm_factors(spec, sums)
    factor_row = None
    if any(f is not None for f in factors):
        factor_row = scopes.per_row(torch.tensor([1.0 if f is None else f for f in factors], dtype=torch.float64))
    return CorrectionState(spec, sums, factors, factor_row, hist, quantiles)
