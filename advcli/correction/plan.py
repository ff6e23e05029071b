"""Pipeline glue of the rollout correction (the math is :mod:`advcli.correction.weights`).

Where it sits, in verl's order (``ray_trainer.py`` L1638-1675 @1dda039b): reward → KL penalty (on the
**input** mask) → rollout correction → estimator on the **corrected** mask. So:

- :func:`plan_correction` (from ``make_plan``) decides whether it runs: canonical
  ``rollout_correction.mode`` ``on`` (an IS or RS option was given: both log-prob columns required),
  ``auto`` (verl: whenever the input holds ``rollout_log_probs``; metrics only unless options are set)
  or ``off``. It adds the output columns ``rollout_is_weights`` (when IS is on) and
  ``response_mask_after_rs`` and refuses an input that already has a column of either name: an
  input's ``rollout_is_weights`` is never overwritten silently (with IS off it stays what it was,
  an input role that the optimal-token-baseline estimators read).
- :func:`correction_pass` (from ``prepare_run``, once the steps are known): one read of the mask and the
  two log-prob columns; per step the metric sums (:class:`~advcli.correction.weights.MetricSums`),
  the batch-normalisation factor, and per row Σ corrected mask (the row table's ``valid_len`` is the
  corrected mask's, as verl's estimators count it). A step without any valid token is refused as
  verl refuses it.
- :func:`apply_chunk` (from ``pipeline.tokens.token_chunk``, after the KL term): the chunk's weights (normalised
  by their step's factor) and corrected mask; recomputed per chunk (rows are whole: the sequence
  quantities are row-local) instead of stored.
- :func:`finish` adds the ``rollout_corr/*`` metrics to ``RunResult.per_step`` and ``metrics``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config.runspec import Correction, RunSpec
from ..errors import AdvcliError
from ..lazy_torch import torch
from ..ops.ragged import Ragged
from . import weights as rc

OUTPUT_WEIGHTS = "rollout_is_weights"
OUTPUT_MASK = "response_mask_after_rs"


@dataclass
class CorrectionState:
    """What the correction pass resolved for the write pass and the report."""

    spec: rc.CorrectionSpec
    sums: rc.MetricSums
    factors: list  # per step: μ or None
    factor_row: torch.Tensor | None  # [R] float64 μ of each row's step (1 where none), with batch norm
    hist: torch.Tensor | None = None  # [HIST_BINS] int64: weights (before normalisation) over mask=1 tokens
    quantiles: rc.WeightQuantiles | None = None  # verl 0.6.0's rollout_is_p25 ... p99 per step


HIST_BINS = 50


def plan_correction(plan, warnings: list[str]):
    """The plan with the correction this run applies (``plan.correction``; None: none), after checking
    columns: the output columns added to ``output_columns``, the log-prob roles to ``token_roles`` (a new
    plan, built before the plan is final: a plan is never changed)."""
    section = plan.run.correction
    warnings.extend(section.ignored)
    mode = section.mode
    cmap, file = plan.cmap, plan.cmap.file
    if mode == "off":
        for role, why in section.unused:  # a column the flavor reads only with its correction on
            if cmap.has(role):
                warnings.append(f"{file}: column {cmap[role]!r} ({role}) is unused: {why}")
        return plan
    if mode == "auto" and not cmap.has("rollout_log_probs"):
        return plan
    if mode == "auto" and not cmap.has("old_log_probs"):
        warnings.append(f"{file}: a rollout_log_probs column but no old_log_probs: no rollout_corr/* metrics "
                        "(verl's correction needs both)")
        return plan
    spec = rc.spec_from_config(section)
    if spec.gate is not None:  # OpenRLHF (flavors/openrlhf.py)
        keys, batch = "algo.advantage.is_correction_*", "experience"
        why = "OpenRLHF's IS correction (algo.advantage.is_correction_*) compares the two policies' log-probs"
    else:
        keys, batch = "algorithm.rollout_correction.rollout_is", "verl batch"
        why = "the rollout correction (algorithm.rollout_correction.*) compares the two policies' log-probs"
    cmap.require("rollout_log_probs", why + f"; this is the inference engine's ({batch}.rollout_log_probs)")
    cmap.require("old_log_probs", why + f"; this is the trainer's recompute ({batch}.old_log_probs)")
    names = plan.cmap.schema.names
    writes = spec.weights and spec.write_weights
    if writes:
        if cmap.has("rollout_is_weights") or OUTPUT_WEIGHTS in names:
            col = cmap.names.get("rollout_is_weights", OUTPUT_WEIGHTS)
            raise AdvcliError(f"{file}: the input already has a rollout_is_weights column ({col!r}), and "
                              f"{keys} computes new weights under that name; advcli does not replace an input "
                              "column silently",
                              hint="drop or rename that column to recompute the weights, or turn the correction "
                                   f"off ({keys}) to keep the input's weights (estimators that read them still do)")
    if OUTPUT_MASK in names:
        raise AdvcliError(f"{file}: the input already has a column {OUTPUT_MASK!r}, which the rollout correction "
                          "writes; advcli does not replace an input column silently",
                          hint="drop or rename that column")
    token_roles = list(dict.fromkeys([*plan.token_roles, "old_log_probs", "rollout_log_probs"]))
    verify_roles = [r for r in plan.verify_roles if r not in token_roles]
    if "rollout_is_weights" in token_roles and writes:
        token_roles.remove("rollout_is_weights")
    output_columns = [*plan.output_columns, *([OUTPUT_WEIGHTS] if writes else []), OUTPUT_MASK]
    return dataclasses.replace(plan, correction=spec, token_roles=token_roles, verify_roles=verify_roles,
                               output_columns=output_columns)


def apply_chunk(plan, state: CorrectionState, layout: Ragged, mask: torch.Tensor, tok: dict, row0: int):
    """(weights or None, the mask the estimator sees, the corrected mask written as response_mask_after_rs)
    of one chunk (on the chunk's device, plan dtype). verl's estimator sees the corrected mask; OpenRLHF's
    coefficient acts in the loss only, so its estimator keeps the input mask."""
    out = rc.correct_chunk(state.spec, layout, mask, tok["old_log_probs"].to(plan.dtype),
                           tok["rollout_log_probs"].to(plan.dtype), metrics=False)
    w = out.weights if state.spec.write_weights else None
    if w is not None and state.factor_row is not None:
        f = state.factor_row[row0:row0 + layout.num_rows].to(w.device, w.dtype)
        w = w / layout.broadcast(f)
    return w, (out.mask if state.spec.corrects_mask else mask), out.mask


def explain_lines(correction: Correction) -> list[str]:
    """``advcli explain``: the correction's lines of the pipeline (none when it is off)."""
    if correction.mode == "off":
        return (["     rollout corr.    bypass mode: none here (the actor loss corrects); rollout_log_probs stand for "
                 "old_log_probs in the KL and the estimators, where the input has them"] if correction.bypass else [])
    spec = rc.spec_from_config(correction)
    if spec.gate is not None:
        return gate_explain_lines(spec.gate)
    when = ("whenever the input has rollout_log_probs (metrics only unless an option is set)"
            if correction.mode == "auto" else "needs rollout_log_probs and old_log_probs")
    out = [f"     rollout corr.    {when}; lr = old_log_probs − rollout_log_probs, C = clamp ±20, S_i = Σ lr·m"]
    if spec.weights:
        base = {"token": "exp(C(lr_t))·m_t", "sequence": "exp(C(S_i))·m_t",
                "geometric": "exp(C(S_i/(Σm + 1e-8)))·m_t"}[spec.level]
        cut = (f"w if {spec.lower:g} ≤ w ≤ {spec.upper:g} else 0 (IcePop)" if spec.icepop
               else f"min(w, {spec.upper:g}) (TIS)")
        out.append(f"     IS weights       w = {base}, then {cut}"
                   + ("; ÷ the step mean" if spec.batch_normalize else "") + "; not zeroed at rejected tokens")
    for o in spec.rs:
        if o.kind == "ratio":  # verl 0.6.1-0.7.0
            r = {"token": "exp(C(lr_t))", "sum": "exp(C(S_i))", "mean": "exp(C(S_i/(Σm + 1e-8)))"}[o.agg]
            out.append(f"     reject {o.name:<11} keep where {o.lo:.6g} ≤ {r} ≤ {o.hi:.6g}")
            continue
        stat = {"token": f"{o.kind} per token", "sum": f"Σ_t {o.kind}·m", "mean": f"Σ {o.kind}·m/(Σm + 1e-8)",
                "max": f"max {o.kind} over m=1"}[o.agg]
        lo = f"{o.lo:.6g} ≤ " if o.lo is not None else ""
        out.append(f"     reject {o.name:<11} keep where {lo}{stat} ≤ {o.hi:.6g}")
    if spec.veto is not None:
        out.append(f"     veto             a row with a mask=1 token where lr < log({spec.veto:g}) "
                   + ("gets weight 0" if spec.zero_weights else "is rejected whole"))
    if spec.raw_metrics and spec.weights:  # the ratio metrics come with IS weights only (weights.py)
        out.append("     metrics          of the ratios before truncation (std, ESS: clamped to "
                   f"[{spec.metric_lower:.6g}, {spec.upper:g}]); {spec.names}/*"
                   + ("; rollout_is_p25 ... p99: torch.quantile of them over the step's mask=1 tokens"
                      if spec.weight_quantiles else ""))
    if any(o.kind != "ratio" for o in spec.rs):
        out.append("     (k1 = −C(lr) = log π_rollout/π_train, k2 = ½C(lr)², k3 = e^C(lr) − 1 − C(lr); "
                   "all options must pass)")
    if spec.zero_weights:
        out.append("     mask             unchanged (verl 0.6.0): the estimator sees m"
                   + ("" if spec.write_weights else "; the weights feed the metrics only (algorithm.rollout_is "
                                                     "false)"))
    else:
        out.append("     mask             the estimator sees m' = m · Π keep (written as response_mask_after_rs)")
    return out


def gate_explain_lines(g: rc.Gate) -> list[str]:
    """OpenRLHF's coefficient (algo.advantage.is_correction_*) in ``advcli explain``."""
    p_q = "p = clamp(e^rollout_lp, 1e-6, 1−1e-6), q = clamp(e^old_lp, ...)"
    unit = {"ratio": "e^lr", "binary_kl": "p·log(p/q) + (1−p)·log((1−p)/(1−q)), " + p_q,
            "tv": "|p − q|, " + p_q}[g.stat]
    if g.level == "seq":
        unit = ("e^(Σ lr·m/Σm) (the ratio's geometric mean per row)" if g.stat == "ratio"
                else f"Σ s·m/Σm per row of s = {unit}")
    band = f"[{g.low:g}, {g.high:g}]"
    what = (f"c_t = clamp(e^lr_t, {g.low:g}, {g.high:g})" if g.mode == "clip"
            else f"c_t = e^lr_t where the {'row' if g.level == 'seq' else 'token'}'s statistic is in {band}, else 0")
    return [
        "     IS correction    OpenRLHF PolicyLoss.forward (in the loss, after the advantages); needs "
        "rollout_log_probs and old_log_probs; lr = old_log_probs − rollout_log_probs",
        f"     statistic        {g.stat} at {g.level} level: {unit}",
        f"     coefficient      {what}; written as rollout_is_weights (0 where m = 0)",
        "     mask             the estimator keeps the input mask m; response_mask_after_rs = m · kept units",
        "     metrics          vllm_kl = Σ(rollout_lp − old_lp)·m/Σm; is_filter_ratio = filtered "
        + ("rows / rows" if g.level == "seq" else "tokens / Σm"),
    ]


def finish(result, state: CorrectionState | None, dtype: torch.dtype) -> None:
    """``rollout_corr/*`` per step into ``result.per_step`` and overall into ``result.metrics``
    (:func:`add_metrics`)."""
    if state is None:
        return
    add_metrics(result.per_step, result.metrics, state.spec, state.sums, state.factors, dtype, state.quantiles)
    neg_inf = int(state.sums.acc["rollout_neg_inf"][1].sum()) if "rollout_neg_inf" in state.sums.acc else 0
    if neg_inf:
        result.warnings.append(neg_inf_note(neg_inf))
    if state.quantiles is not None:
        result.warnings.extend(w for w in state.quantiles.notes if w not in result.warnings)
    if state.hist is not None and hasattr(result, "histograms"):
        result.histograms["rollout_is_weights"] = weights_histogram(state)


def neg_inf_note(count: int) -> str:
    """The warning of a run whose rollout_log_probs hold −inf at ``count`` mask=1 tokens (verl runs them)."""
    return (f"{count:,} mask=1 token(s) have a rollout_log_probs of -inf (the inference engine gave the sampled "
            "token probability 0): as in verl, their log-ratio is clamped to +20 for the IS weights and the "
            "rejection statistics (an IS weight of e^20 before truncation), and the rollout_corr/* figures that do "
            "not clamp (kl, k3_kl, the perplexities) are infinite or NaN, as verl logs them")


def weights_histogram(state: CorrectionState) -> dict:
    """The IS weights over the input's mask=1 tokens (the report's histogram format, advcli.figures):
    exact counts on equal bins over [0, upper] — truncation and IcePop keep every weight in there.
    With batch normalisation of a one-step input the edges are divided by the step's μ (the bins of
    the final weights); with several steps the counts are of the weights before normalisation."""
    spec = state.spec
    scale = 1.0
    note = "rollout IS weights, mask=1 tokens of the input"
    known = [f for f in state.factors if f is not None]
    if spec.batch_normalize and known:
        if len(state.factors) == 1:
            scale = 1.0 / known[0]
            note += f"; after batch normalisation (÷ {known[0]:.6g})"
        else:
            note += "; before batch normalisation (each step has its own factor)"
    edges = [spec.upper * k / HIST_BINS * scale for k in range(HIST_BINS + 1)]
    return {"edges": edges, "counts": state.hist.tolist(), "underflow": 0, "overflow": 0, "over": "tokens",
            "exact": True, "note": note + (" (IcePop: 0 outside the band)" if spec.icepop else
                                           f" (truncated at {spec.upper:g})")}


def add_metrics(per_step: list, metrics: dict, spec: rc.CorrectionSpec, sums: rc.MetricSums, factors: list,
                dtype: torch.dtype, quantiles: rc.WeightQuantiles | None = None) -> None:
    """Each step's ``rollout_corr/*`` figures into its ``per_step`` entry (a step without a valid token
    has none); overall: the step's own figures for a one-step input, else each metric's row-weighted
    mean over the steps that have it (like ``actor/reward_kl_penalty``; verl 0.6.0's quantiles too: a
    mean of the steps' quantiles, not the quantile of the run)."""
    per = []
    for s in range(sums.S):
        m = rc.step_metrics(spec, sums, s, factors[s], dtype) if sums.acc and sums.get("n", s) > 0 else {}
        if m and quantiles is not None:
            m.update(quantiles.step_figures(s, spec.names))
        per.append(m)
        if s < len(per_step):
            per_step[s].update(m)
    have = [(p, sums.get("rows", s)) for s, p in enumerate(per) if p]
    if not have:
        return
    if len(have) == 1:
        metrics.update(have[0][0])
        return
    for k in have[0][0]:
        vals = [(p[k], r) for p, r in have if p.get(k) is not None]
        total = sum(r for _, r in vals)
        metrics[k] = sum(v * r for v, r in vals) / total if vals and total else None


def file_metrics(ins, cmap, scope_codes, num_scopes: int, run: RunSpec | None,
                 chunk_rows: int, per_step: list, metrics: dict) -> list[str]:
    """``advcli stats``: the ``rollout_corr/*`` figures of a file with both log-prob columns, as verl logs
    them for that batch: with the correction an advcli output was produced with (``run``: the spec of its
    provenance ``config``), else with every option off (the off-policy metrics only). Nothing when the file
    lacks a log-prob column. Returns the warnings to show: a NaN or infinite log-prob on a mask=1 token makes
    the figures NaN (verl's would be too), and the warning names how many rows and the first."""
    if not (cmap.has("old_log_probs") and cmap.has("rollout_log_probs")):
        return []
    section = run.correction if run is not None else Correction()
    if section.mode == "off":  # the metrics alone: every option off, no weights
        section = Correction(mode="auto", is_upper=None)
    spec = rc.spec_from_config(section)
    dtype = torch.float64 if run is not None and run.precision == "float64" else torch.float32
    from ..io.arrow_torch import list_column_to_tensor

    cols = [cmap[r] for r in ("response_mask", "old_log_probs", "rollout_log_probs")]
    scope_codes = torch.as_tensor(scope_codes, dtype=torch.int64)  # the figures hand numpy codes over
    sums = rc.MetricSums(num_scopes)
    quantiles = (rc.WeightQuantiles(torch.bincount(scope_codes, minlength=num_scopes)) if spec.weight_quantiles
                 else None)
    row0 = 0
    nonfinite_rows, first_nonfinite = 0, None  # (row, column) of the first
    from ..io.value_checks import token_lists_whole

    for fi, row_base, batch in ins.iter_batches(cols, chunk_rows):
        token_lists_whole(batch, cols[1:], cols[0], ins.paths[fi], row_base)
        offsets, mask = list_column_to_tensor(batch.column(cols[0]))
        old = list_column_to_tensor(batch.column(cols[1]))[1].to(dtype)
        roll = list_column_to_tensor(batch.column(cols[2]))[1].to(dtype)
        layout = Ragged(torch.from_numpy(offsets))
        valid = mask != 0
        bad_old, bad_roll = (~torch.isfinite(x) & valid for x in (old, roll))
        bad = bad_old | bad_roll
        if bool(bad.any()):
            per_row = layout.count_per_row(bad.to(torch.int64))
            nonfinite_rows += int((per_row > 0).sum())
            if first_nonfinite is None:
                row = int(torch.nonzero(per_row > 0)[0])
                in_old = bool(layout.count_per_row(bad_old.to(torch.int64))[row] > 0)
                first_nonfinite = (row0 + row, cols[1] if in_old else cols[2])
        out = rc.correct_chunk(spec, layout, valid.to(dtype), old, roll)
        sums.add(out.rows, scope_codes[row0:row0 + layout.num_rows])
        if quantiles is not None:
            quantiles.add(out.raw, out.raw_counts, scope_codes[row0:row0 + layout.num_rows])
        row0 += layout.num_rows
    factors = rc.norm_factors(spec, sums) if spec.weights and spec.batch_normalize and sums.acc else [None] * num_scopes
    add_metrics(per_step, metrics, spec, sums, factors, dtype, quantiles)
    if not nonfinite_rows:
        return []
    return [f"{nonfinite_rows} row(s) hold a NaN or infinite log-prob on a mask=1 token (the first: row "
            f"{first_nonfinite[0]}, column {first_nonfinite[1]!r}), so the rollout_corr/* figures are NaN, as verl's "
            "would be; `advcli validate` names the first token"]
