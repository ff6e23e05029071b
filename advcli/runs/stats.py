"""``advcli stats``: the statistics of any dump or advcli output, in the run report's formats.

The figures are those of ``advcli run`` (advcli.figures.FigureCollector, verl's metric names), fed from the
file instead of the pipeline:

- sequence score (``critic/score``): Σ ``token_level_scores`` when the file has them, else the
  ``reward`` column; sequence reward (``critic/rewards``): Σ ``token_level_rewards`` when the file
  has them (an advcli output with KL in the reward), else the score; on an advcli output whose run
  reshaped its rewards (group normalisation, scaling, a reward on every position, ROLL's masked
  placement), both as that run computed them, replayed from its recorded configuration;
- advantages/returns (``critic/advantages``, ``critic/returns``): the ``advantages``/``returns``
  columns over the mask=1 tokens — only for advcli outputs (a raw dump has none, and those figures
  are left out); ``critic/values`` when there is a ``values`` column;
- groups by ``prompt_id`` within each ``step``; per step when there is a ``step`` column;
- the advantage by token position (:mod:`advcli.figures.positions`).

Two reads of the file: the small columns and the mask (the row table the collector needs first),
then the token columns.
"""
from __future__ import annotations

import time

from ..errors import AdvcliError


def dump_statistics(inputs: list[str], column_overrides: dict | None = None, chunk_rows: int = 8192,
                    progress=None, padded: bool | None = None) -> dict:
    """:func:`file_statistics` of opened inputs as ``advcli stats`` and ``advcli.stats`` give them: a dump
    without token data (its one-token rows) without the token figures, ``no_token_data`` saying why."""
    from ..formats import drop_token_figures, no_token_data

    rep = file_statistics(inputs, column_overrides, chunk_rows, progress=progress, padded=padded)
    held = [name for name, key in (("advantage", "critic/advantages/"), ("return", "critic/returns/"))
            if any(k.startswith(key) for k in rep["metrics"])]
    reason = no_token_data(inputs, " and ".join(held) or None)
    if reason:
        drop_token_figures(rep, reason)
    return rep


def file_statistics(inputs: list[str], column_overrides: dict | None = None, chunk_rows: int = 8192,
                    progress=None, padded: bool | None = None) -> dict:
    """The report dict (see advcli.report) of a dump or an advcli output. ``padded`` (``--padded/--ragged``):
    token lists right-padded to one width, a row's length its last mask=1 position + 1; default: as the run
    that wrote an advcli output said (its ``padded``), else for fixed-size list columns only."""
    import numpy as np
    import pyarrow as pa

    from ..io.arrays import import_pandas

    import_pandas()  # (not first in pyarrow's compiled code, where a Ctrl-C raised at its end was lost)
    from ..config.columns import is_list_type, resolve_columns
    from ..figures.arrays import Codes
    from ..figures.collector import FigureCollector
    from ..figures.of_file import file_group_health, health_columns, reward_kl
    from ..figures.positions import PositionStats
    from ..formats import info_for
    from ..io.arrays import keys_codes, list_parts, numeric, provenance, row_sums
    from ..io.lists import check_no_nulls, primitive_numpy
    from ..io.reader import InputSet
    from ..io.value_checks import check_mask, check_row_numbers, token_lists_whole
    from ..report import build_report
    from ..results import RunResult

    t0 = time.perf_counter()
    ins = InputSet.open(inputs)
    file0 = ins.paths[0]
    cmap = resolve_columns(ins.schema, column_overrides or {}, file0)
    names = ins.schema.names
    cmap.require("response_mask", "the statistics are over the mask=1 tokens")
    mask_col = cmap["response_mask"]
    prov = provenance(ins.schema)
    # an output of verl's rollout correction: the mask its estimator used (OpenRLHF's coefficient, gate_level,
    # leaves the estimator the input mask: the run's figures are over that one)
    gated = (((prov or {}).get("config") or {}).get("rollout_correction") or {}).get("gate_level") is not None
    if "response_mask_after_rs" in names and "response_mask" not in (column_overrides or {}) and not gated:
        mask_col = "response_mask_after_rs"
    if padded is None:  # the run's own setting on its output, else padded for fixed-size lists only
        recorded = ((prov or {}).get("config") or {}).get("padded")
        padded = recorded if isinstance(recorded, bool) else pa.types.is_fixed_size_list(
            ins.schema.field(mask_col).type)
    chunk_rows = ins.chunk_rows(chunk_rows)  # and about CHUNK_TOKENS tokens: long responses, small chunks
    info = info_for(ins.paths[0])  # a trainer's dump: the column of the advantages it logged, where it has one
    logged = info.logged if info is not None and info.logged in names else None
    adv_col = "advantages" if "advantages" in names else logged
    has_adv = adv_col is not None
    adv_is_list = has_adv and is_list_type(ins.schema.field(adv_col).type)
    has_ret = "returns" in names
    tlr_col = "token_level_rewards" if "token_level_rewards" in names else None
    tls_col = cmap.names.get("token_level_scores")
    val_col = cmap.names.get("values")
    if not (has_adv or tls_col or cmap.has("reward")):
        raise AdvcliError(f"{file0}: neither 'advantages' nor a reward ('reward' or 'token_level_scores') to "
                          f"describe. Columns present: {', '.join(names)}",
                          hint="map the reward column with --column reward=NAME")

    # pass 1: the row table
    small = [cmap[r] for r in ("prompt_id", "step", "reward") if cmap.has(r)]
    pad_col = "is_padding" if "is_padding" in names else None  # verl's synthetic padding rows: in no figure
    if pad_col:
        small.append(pad_col)
    health_cols = health_columns(ins.schema, cmap, prov)  # data source and reward components (group health)
    small += [c for c in health_cols["source"] + health_cols["components"] if c not in small]
    cols1 = list(dict.fromkeys(small + [mask_col] + [c for c in (tls_col, tlr_col) if c]))
    parts: dict[str, list] = {c: [] for c in small}
    valid, score_parts, tlr_parts = [], [], []
    R = ins.num_rows
    done = 0
    # numbers: a null is refused where it is (a null group id is not: run keeps it where it groups nothing)
    checked = [cmap[r] for r in ("reward", "step") if cmap.has(r)]
    reward_col = cmap["reward"] if cmap.has("reward") else None
    for fi, row_base, batch in ins.iter_batches(cols1, chunk_rows):
        for c in checked:
            check_no_nulls(batch.column(c), ins.paths[fi], c, row_base)
        token_lists_whole(batch, [c for c in (tls_col, tlr_col) if c], mask_col, ins.paths[fi], row_base)
        if reward_col:  # ±inf refused as `run` refuses it; NaN is a missing reward, left out of the figures
            check_row_numbers(np.asarray(primitive_numpy(batch.column(reward_col))), ins.paths[fi], reward_col,
                              row_base, allow_nan=True)
        for c in small:
            parts[c].append(batch.column(c))
        offs, m = list_parts(batch.column(mask_col))
        check_mask(m, offs, ins.paths[fi], mask_col, row_base)  # a 0.5 would count as a token here and not in run
        valid.append(row_sums(offs, (m != 0).astype(np.float64)).astype(np.int64))
        if tls_col:
            o2, v2 = list_parts(batch.column(tls_col))
            score_parts.append(row_sums(o2, v2))
        if tlr_col:
            o3, v3 = list_parts(batch.column(tlr_col))
            tlr_parts.append(row_sums(o3, v3))
        done += batch.num_rows
        if progress:
            progress("rows", done, R)
    V = np.concatenate(valid) if valid else np.zeros(0, np.int64)
    if tls_col:
        raw = np.concatenate(score_parts) if score_parts else np.zeros(0)
    elif cmap.has("reward"):
        raw = numeric(pa.chunked_array(parts[cmap["reward"]], type=ins.schema.field(cmap["reward"]).type),
                      cmap["reward"], file0).astype(np.float64)
    else:
        raw = np.zeros(R)
    seq = np.concatenate(tlr_parts) if tlr_col and tlr_parts else raw
    if cmap.has("step") and R:
        st = numeric(pa.chunked_array(parts[cmap["step"]], type=ins.schema.field(cmap["step"]).type),
                     cmap["step"], file0)
        step_values, scode = np.unique(st, return_inverse=True)
        step_values = [int(v) for v in step_values]
        scode = scode.ravel()
    else:
        step_values, scode = [None], np.zeros(R, np.int64)
    groups = None
    if cmap.has("prompt_id") and R:
        codes, _ = keys_codes(pa.chunked_array(parts[cmap["prompt_id"]],
                                               type=ins.schema.field(cmap["prompt_id"]).type))
        _, g = np.unique(np.stack([scode, codes]), axis=1, return_inverse=True)
        groups = Codes.of(g.ravel())
    scopes = Codes.of(scode)
    rs = FigureCollector(R, padded=padded)
    from ..config.runspec import RunSpec
    produced_by = (prov or {}).get("config")  # an advcli output: the configuration that produced it
    run = RunSpec.from_config(produced_by) if produced_by else None
    flat_inputs = None
    if cmap.has("reward") and R and not tls_col:  # kl.skip_flat_groups: the groups the run's KL left out
        flat_inputs = (raw, V, g.ravel() if groups is not None else scode)
    kl = reward_kl(ins, run, column_overrides or {}, scode, len(step_values), chunk_rows, flat_inputs) if run else None
    if run is not None:  # the scores and rewards the run computed, where it reshaped them
        shaped = reshaped_scores(ins, produced_by, run, column_overrides or {}, chunk_rows)
        if shaped is not None:
            raw = shaped[0]
            if not tlr_col:  # (a token_level_rewards column holds them already)
                seq = shaped[1]
    rs.set_rows(raw_score=raw, score=np.asarray(seq, np.float64),
                scopes=scopes, step_values=step_values, groups=groups, valid_len=V,
                has_values=val_col is not None and has_adv, **(kl or {}))
    if pad_col and R:
        rs.set_padding(np.asarray(pa.chunked_array(parts[pad_col]).fill_null(False).to_numpy(zero_copy_only=False),
                                  bool))

    # pass 2: the token columns
    cols2 = list(dict.fromkeys([mask_col] + [c for c in (adv_col, "returns" if has_ret else None, tlr_col,
                                                         val_col if has_adv else None) if c]))
    row0 = 0
    positions = PositionStats()
    for fi, row_base, batch in ins.iter_batches(cols2, chunk_rows):
        token_lists_whole(batch, [c for c in cols2 if c != mask_col and (c != adv_col or adv_is_list)], mask_col,
                          ins.paths[fi], row_base)
        offs, m = list_parts(batch.column(mask_col))
        mask = m != 0
        B = batch.num_rows
        if rs.keep is not None and not rs.keep[row0:row0 + B].all():  # padding rows: in no token figure either
            mask &= np.repeat(rs.keep[row0:row0 + B], np.diff(offs))  # (a response-level output's mask is all 1)
        num_tokens = int(offs[-1])
        zeros = np.zeros(num_tokens, np.float32)
        adv_np = None
        if has_adv and adv_is_list:
            adv_np = list_parts(batch.column(adv_col))[1]
        elif has_adv:  # a logged value per row (TRL's advantage) stands on each of its row's tokens; a row without
            col = batch.column(adv_col)  # one (prime-rl's never assigned) is in no advantage figure
            adv_np = np.repeat(np.asarray(col.to_numpy(zero_copy_only=False), np.float64), np.diff(offs))
            if col.null_count:
                mask &= np.repeat(~np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool), np.diff(offs))
        adv = adv_np.astype(np.float32) if has_adv else zeros
        ret = list_parts(batch.column("returns"))[1].astype(np.float32) if has_ret else zeros
        if tlr_col:
            tlr = list_parts(batch.column(tlr_col))[1].astype(np.float64)
        else:  # the sequence reward on the row's last token: Σ_t gives it
            tlr = np.zeros(num_tokens, np.float64)
            ok = np.diff(offs) > 0
            tlr[offs[1:][ok] - 1] = np.asarray(seq[row0:row0 + B], np.float64)[ok]
        values = list_parts(batch.column(val_col))[1].astype(np.float32) if val_col and has_adv else None
        rs.add_chunk(row0, offs, mask, adv, ret, tlr, values)
        if has_adv:
            positions.add(offs, adv_np, mask)
        row0 += B
        if progress:
            progress("tokens", row0, R)
    rs.has_advantages = has_adv  # a raw dump: no zero-advantage share
    out = rs.finish()
    health = file_group_health(rs, parts, ins.schema, health_cols) if out.get("group_health") else None
    padding = int((~rs.keep).sum()) if rs.keep is not None else 0
    metrics, per_step, hist = out["metrics"], out["per_step"], out["histograms"]
    if not has_adv:  # a raw dump: no advantages to describe (the catalog's figures that need them)
        from ..report.catalog import needing

        drop = set(needing("advantages"))
        metrics = {k: v for k, v in metrics.items() if k not in drop}
        per_step = [{k: v for k, v in s.items() if k not in drop} for s in per_step]
        hist = {k: h for k, h in hist.items() if f"histograms/{k}" not in drop}
    if not has_ret:  # no returns column: the figures of the returns
        from ..report.catalog import needing

        drop = set(needing("returns"))
        metrics = {k: v for k, v in metrics.items() if k not in drop}
        per_step = [{k: v for k, v in s.items() if k not in drop} for s in per_step]
    from ..correction.plan import file_metrics  # rollout_corr/* where both log-prob columns are there
    warnings = file_metrics(ins, cmap, scopes.codes, scopes.num_groups, run, chunk_rows, per_step, metrics)
    for s in per_step:
        for k in ("kl_coef", "kl"):
            if s.get(k) is None:
                s.pop(k, None)
    seconds = time.perf_counter() - t0

    missing = np.flatnonzero(np.isnan(raw)) if reward_col and not tls_col and len(raw) else np.zeros(0, np.int64)
    if missing.size:  # a NaN reward is a missing one (TRL's None): left out of the figures, and said
        from ..formats import name_dump_rows
        from ..io.value_checks import file_row

        file, row = file_row(ins.paths, ins.file_rows(), int(missing[0]))  # named as run names it (a dump's line)
        warnings.append(f"{missing.size} row(s) with a NaN {reward_col!r} (the first: "
                        f"{name_dump_rows(f'{file}: row {row}')}) are left "
                        "out of the reward and score figures; `advcli run` refuses them unless the flavor reads "
                        "NaN as a missing reward (TRL) or reward.nan says what to do")
    r = RunResult(inputs=ins.paths, outputs=[], rows=R - padding, tokens=int(rs.kept().resp_len.sum()),
                  valid_tokens=int(V.sum()),
                  seconds=seconds, config=(prov or {}).get("config") or {}, metrics=metrics, per_step=per_step,
                  histograms=hist, group_health=health, by_position=positions.result() if has_adv else None,
                  release=(prov or {}).get("release"),  # an advcli output: the upstream release that made it
                  warnings=warnings)
    flavor = (prov or {}).get("flavor")
    native = (prov or {}).get("flavor_config")
    note = None
    if prov:
        estimator = ((prov.get("config") or {}).get("estimator") or {}).get("name", "")
        note = f"statistics of an advcli output ({flavor} {estimator})"
    elif adv_col is not None:
        note = (f"statistics of a dump; the advantages are the trainer's own, as it logged them (column {adv_col!r}): "
                "`advcli audit` checks them against a recomputation")
    else:
        note = "statistics of a dump (no advantages: score, reward, length and group figures)"
    if padding:
        from ..formats.conversion import PADDING_NOTE
        note += "; " + PADDING_NOTE.format(n=padding)
    return build_report(r, flavor=flavor, native=native, command="stats", note=note,
                        extra={"produced_by": {k: prov.get(k) for k in ("advcli_version", "inputs",
                                                                        "input_fingerprint")}} if prov else None)


def reshapes_rewards(run) -> bool:
    """Whether the run's reward section changes the row reward before the estimator (shaping, the no-EOS
    rule, normalisation, a clamp): torch-free, so stats of any other output stays so."""
    r = run.reward
    return ((r.normalize.mean, r.normalize.std) != ("none", "none") or r.norm is not None or r.clip is not None
            or r.bias != 0.0 or r.scale != 1.0 or r.shape_clip is not None or r.overlong.tokens is not None
            or r.no_eos_value is not None or r.no_eos_penalty is not None or r.truncated_factor is not None
            or r.zero_truncated or r.mask_placed
            or r.placement == "all" or r.range_map is not None)


def reshaped_scores(ins, cfg: dict, run, column_overrides: dict, chunk_rows: int):
    """(each row's score, each row's Σ_t token reward) as the run computed them (numpy [R] float64), for
    ``critic/score`` and (without a ``token_level_rewards`` column) ``critic/rewards`` of an advcli output whose
    run reshaped its rewards (ROLL's and slime's group normalisation, AReaL's scaling, a reward placed on every
    position, ROLL's masked placement …): the run's own pass 1 and :func:`advcli.pipeline.prepare.row_rewards`
    on the rows the output kept, with the recorded configuration; ``reward.placement=all`` puts r̃ on each of
    the row's L positions (Σ = r̃·L). None when nothing reshaped the rewards, or where a replay could not be the
    run's (token-reward whitening, a rollout correction's rejected rows): the figures are then the dump's
    scores, as without a run."""
    if not reshapes_rewards(run) or run.reward.whiten_tokens:
        return None
    from ..pipeline.plan import RunState, make_plan  # the math (torch), once there is some to do
    from ..pipeline.prepare import row_rewards
    from ..pipeline.rows import row_table_pass, scopes_and_groups

    try:
        plan = make_plan(cfg, ins, column_overrides, "cpu")
    except AdvcliError:  # a column the run read is not in the output (dropped afterwards)
        return None
    if plan.correction is not None:
        return None
    state = RunState()
    row, comps, keys = row_table_pass(plan, ins, chunk_rows, None, row_kl=False, state=state)
    scopes, groups, _ = scopes_and_groups(plan, keys, ins.num_rows, ins.paths[0], state)
    raw, reward_row, score, _ = row_rewards(plan, row, comps, scopes, groups, state)
    if run.reward.placement == "all":
        score = reward_row.double() * row["length"].double()
    return raw.double().numpy(), score.double().numpy()
