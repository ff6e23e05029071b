"""Recompute the advantages a trainer logged and check them (``advcli audit``).

1. advcli's own pipeline recomputes the advantages with the named flavor's semantics into a
   temporary sidecar file (``advcli.pipeline.run_pipeline``, only the ``advantages`` column);
2. one streaming pass compares them with the logged column, token by token (mask=1 tokens decide:
   the chunk math is :mod:`advcli.audit.checks`);
3. where some disagree: a float64 recomputation and a second pass test what the difference looks
   like (float32 noise, constant or per-group scale/shift, sign, group mix-up, masked positions);
4. and, unless ``search=False``, a short list of other configurations (:func:`candidates`: the other
   flavors' group estimators, the same flavor with one setting changed) is run: the ones that
   reproduce the logged values are named.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from ..config.runspec import RunSpec
from ..errors import AdvcliError
from ..io.temps import scratch_prefix
from .sidecar import SidecarRun

# the logged advantages, where a dump keeps them: advcli's own Parquet and verl/slime exports; TRL's
# completions; an imported dump's field named like an output column (NeMo's advantages, prime-rl's advantage)
LOGGED_DEFAULTS = ("advantages", "advantage", "logged_advantages", "logged_advantage")
PROMPT_COLUMNS = ("prompt", "input", "input_prompt", "content")  # the prompt text, where a dump has it
EXCERPT = 60  # characters of a prompt shown beside a disagreeing row


def candidates(flavor: str, given: dict, has_prompt_id: bool, group_size: int | None = None) -> list[tuple[str, dict]]:
    """Configurations to try when the logged values disagree: (flavor, settings).

    The given flavor with one setting changed (every bool key flipped, each value of its
    ``Flavor.audit_switches``; a positional group size, each of its divisors), then every flavor's
    ``audit_tries``: its group estimators (position-grouped flavors read the prompt_id groups,
    ``advcli.group_by=id``, with the dump's usual ``group_size`` as their n; advcli's own: GRPO with other
    epsilons). A configuration the dump cannot run (a missing column) is skipped."""
    from ..flavors import FLAVORS, get

    out: list[tuple[str, dict]] = []
    fl = get(flavor)
    from ..flavors import resolve

    for k, key in fl.keys.items():
        if key.kind == "bool":
            cur = given.get(k, key.default)
            if isinstance(cur, bool):
                try:  # a switch the flavor refuses here (TRL's old RLOOTrainer's fields at GRPO) is no candidate
                    resolve(flavor, list({**given, k: not cur}.items()))
                except AdvcliError:
                    continue
                out.append((flavor, {**given, k: not cur}))
    for k, values in fl.audit_switches.items():  # a switch that is not a bool: each of its values
        out += [(flavor, {**given, k: v}) for v in values]
    size = given.get(fl.group_size_key) if fl.group_size_key else None
    if isinstance(size, int) and size > 2:  # the dump's runs of equal prompt may hold several groups (a VLM run's
        # prompts log as one text, their images left out): the flavor's positional groups of each divisor
        # (a prompt id then spans several blocks: said, not refused, as for a prompt drawn for consecutive groups)
        out += [(flavor, {**given, fl.group_size_key: d, "advcli.id_check": "warn"})
                for d in range(2, min(size, 257)) if size % d == 0]  # (a group of more than 256: none seen)
    if has_prompt_id:
        n = max(int(group_size or 2), 2)  # position flavors refuse n = 1 for group estimators
        out += [(f.name, s) for f in FLAVORS.values() if f.audit_tries for s in f.audit_tries(n)]
    seen, uniq = set(), []
    for f, s in out:
        key = (f, json.dumps(s, sort_keys=True, default=str))
        if key not in seen and not (f == flavor and s == given):
            seen.add(key)
            uniq.append((f, s))
    return uniq


def label(flavor, settings: dict, cfg: dict | None = None) -> str:
    """``verl grpo with algorithm.norm_adv_by_std_in_grpo=false``: the flavor (at its release: a
    :class:`advcli.flavors.FlavorAt` or ``NAME[@RELEASE]``), its estimator (given or the framework's
    default), then the other settings given."""
    from ..flavors import get, split_spec

    base = split_spec(str(flavor))[0]
    try:
        ek = get(base).estimator_key
    except AdvcliError:
        ek = None
    est = settings.get(ek) if ek else None
    if ek and est is None:
        try:
            est = get(flavor).keys[ek].default
        except (AdvcliError, KeyError):
            est = None
    if base == "nemo" and settings.get("ppo.adv_estimator.name"):
        est = "ppo " + str(settings["ppo.adv_estimator.name"])
    if settings.get("advcli.estimator"):  # --estimator: it runs instead of the flavor's own (as run's summary says)
        est = str(settings["advcli.estimator"])
    hide = {"advcli.group_by", "advcli.estimator", ek}
    if settings.get("advcli.group_by") == "id":  # the group size keys say nothing once groups come from prompt_id
        hide |= {"num_generations", "rollout.n_samples_per_prompt", "actor_infer.generating_args.num_return_sequences"}
    shown = {k: v for k, v in settings.items() if k not in hide}
    s = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in shown.items())
    return (f"{flavor}" + (f" {est}" if est else "") + (f" with {s}" if s else "")
            + (" (groups by prompt_id)" if settings.get("advcli.group_by") == "id" else ""))


# ------------------------------------------------------------------------------------------ passes
def logged_inputs(specs: list[str], source: str | None, against: str | None) -> list[str]:
    """The inputs audit reads: a trainer's folder whose dump logs no advantages but holds, beside it, a dump of the
    same run that does (slime's ``--dump-details`` folder: ``rollout_data/`` read by ``run``, ``train_data/`` with
    the advantages slime trained on) is audited through the latter, the folder that holds it given instead."""
    if against is not None or source not in (None, "", "auto"):
        return specs
    import os

    from ..formats.discovery import discover, logging_formats, natural_key
    from ..io.reader import is_glob

    out = []
    for spec in specs:
        if not (os.path.isdir(spec) or is_glob(spec)):
            out.append(spec)
            continue
        try:
            found = discover(spec)
        except AdvcliError:  # the reading itself says what is wrong
            out.append(spec)
            continue
        # by the files' names (their content is read once, when the folder chosen is opened)
        logged = [p for p in found.alone if logging_formats(p)]
        folders = {os.path.dirname(p) for p in logged}
        if found.fmt.logged is None and len(folders) == 1:  # their folder, or the files where they share the spec's
            folder = folders.pop()
            here = is_glob(spec) or os.path.samefile(folder, spec)  # beside the dump the spec names: the files
            out.extend(sorted(logged, key=natural_key) if here else [folder])
        else:
            out.append(spec)
    return out


def require_logged(inputs: list[str], against: str | None) -> None:
    """Before any configuration is resolved: a trainer's dump whose format logs no advantages (verl's
    rollout_data_dir, ROLL's, slime's, ...) and holds no column of logged values is refused as what it is, not
    through the estimator's or the column's refusal that would come first."""
    if against is not None or not inputs:
        return
    from ..formats import info_for
    from ..io.footer import schema_facts

    info = info_for(inputs[0])
    if info is None or info.logged or any(c in schema_facts(inputs[0]).names for c in LOGGED_DEFAULTS):
        return
    from ..formats import FORMATS

    fmt = FORMATS.get(info.format)
    raise nothing_logged(info.source, info.title, fmt.logged_elsewhere if fmt else "")


def nothing_logged(source: str, title: str, elsewhere: str = "") -> AdvcliError:
    """The refusal of a dump ``source`` whose format (``title``) logs no advantages (:func:`require_logged`; the
    follower's own first check, on the format and its first record); ``elsewhere``: where the trainer writes them."""
    return AdvcliError(f"{source}: this {title} holds no logged advantages (the trainer does not write "
                       "them there), so there is nothing to audit",
                       hint=(f"{elsewhere}; " if elsewhere else "") + "`advcli run` computes them; --against COLUMN "
                            "audits another column of logged values")


def _logged_column(schema, against: str | None, file0: str, imported: str | None = None) -> tuple[str, bool]:
    """(column, is_list) of the logged advantages: ``--against``, else the column the importer stored the
    trainer's own values in (``imported``), else the first of :data:`LOGGED_DEFAULTS` present."""
    import pyarrow as pa

    from ..config.columns import is_list_type, is_numeric
    from ..errors import did_you_mean

    names = schema.names
    if against is None:
        against = next((c for c in (imported, *LOGGED_DEFAULTS) if c and c in names), None)
        if against is None:
            raise AdvcliError(f"{file0}: no logged advantages to audit (no column "
                              f"{', '.join(repr(c) for c in LOGGED_DEFAULTS)}). Columns present: {', '.join(names)}",
                              hint="name it with --against COLUMN")
    elif against not in names:
        raise AdvcliError(f"--against {against!r}: no such column in {file0}.{did_you_mean(against, names)} "
                          f"Columns present: {', '.join(names)}")
    t = schema.field(against).type
    if is_list_type(t) and is_numeric(t.value_type):
        return against, True
    if is_numeric(t) and not pa.types.is_boolean(t):
        return against, False
    raise AdvcliError(f"--against {against}: column type {t}; expected numbers, one per token (list) or per row")


def _pairs(in_paths: list[str], side_paths: list[list[str]], in_cols: list[str], chunk_rows: int):
    """((input file, its row of the batch's first row), input batch, [sidecar batch per run]) in lock step over
    every file."""
    from ..io.arrays import aligned_batches
    from ..io.reader import open_parquet

    for i, p in enumerate(in_paths):
        files = [open_parquet(p)] + [open_parquet(s[i]) for s in side_paths]
        row = 0
        try:
            for bs in aligned_batches(files, [in_cols] + [["advantages"]] * len(side_paths), chunk_rows):
                yield (p, row), bs[0], bs[1:]
                row += bs[0].num_rows
        finally:
            for f in files:
                f.close()


def _flat(batch, col: str, is_list: bool, offs_mask, where: tuple[str, int] | None = None):
    """The values of ``col`` flat over the mask's tokens (a per-row value repeated); ``where``: (file, row of
    the batch's first row) of a logged column, which a list of another length than its row's mask is refused
    naming."""
    import numpy as np

    from ..io.arrays import list_parts

    arr = batch.column(col)
    if is_list:
        o, v = list_parts(arr)
        if o.size != offs_mask.size or not np.array_equal(o, offs_mask):
            bad = int(np.flatnonzero(np.diff(o) != np.diff(offs_mask))[0]) if o.size == offs_mask.size else 0
            file, row0 = where if where is not None else ("the recomputation", 0)
            n_col, n_mask = int(o[bad + 1] - o[bad]), int(offs_mask[bad + 1] - offs_mask[bad])
            has = "no value (null: the field is missing)" if arr.is_null().to_numpy(zero_copy_only=False)[bad] \
                else f"length {n_col}"
            raise AdvcliError(f"{file}: row {row0 + bad}: column {col!r} has {has}, its response mask "
                              f"length {n_mask}",
                              hint="the logged advantages must hold one value per token of the response (or one "
                                   "per row); map another column with --against")
        return v.astype(np.float64)
    vals = arr.to_numpy(zero_copy_only=False).astype(np.float64)  # a null (no value logged) reads as NaN
    return np.repeat(vals, np.diff(offs_mask))


def _unlogged(batch, col: str, is_list: bool, offs_mask):
    """Per token: whether its row has no logged value (a null per-row value: prime-rl logs advantages only
    for the traces it ships), or None when every row has one."""
    import numpy as np

    arr = batch.column(col)
    if is_list or not arr.null_count:
        return None
    return np.repeat(arr.is_null().to_numpy(zero_copy_only=False), np.diff(offs_mask))


def compare_pass(in_paths, side_paths, logged_col, is_list, mask_col, rtol, atol, chunk_rows, hyp=None):
    """One pass. Without ``hyp``: the RowTable of run 0. With ``hyp`` = (params, row_group): the
    per-hypothesis disagreeing-token counts (run 1, when given, is the float64 recomputation)."""
    import numpy as np
    import pyarrow as pa

    from ..io.arrays import list_parts
    from .checks import RowTable, compare_chunk, hypothesis_agreement

    parts, counts, row0 = [], {}, 0
    for where, b, sides in _pairs(in_paths, side_paths, [logged_col, mask_col], chunk_rows):
        offs, m = list_parts(b.column(mask_col))
        L = _flat(b, logged_col, is_list, offs, where)
        if pa.types.is_fixed_size_list(b.column(mask_col).type):
            # padded lists: advcli's rows end at the last mask=1 token (L_i); compare those positions
            keep = _trim_index(offs, list_parts(sides[0].column("advantages"))[0])
            L, m = L[keep], m[keep]
            offs = list_parts(sides[0].column("advantages"))[0]
        A = _flat(sides[0], "advantages", True, offs)
        mask = m != 0
        unlogged = _unlogged(b, logged_col, is_list, offs)
        if unlogged is not None:  # nothing logged, nothing to check: such rows count as agreeing, mask=0
            mask &= ~unlogged
            L = np.where(unlogged, A, L)
        if hyp is None:
            parts.append(compare_chunk(offs, L, A, mask, rtol, atol))
        else:
            params, group = hyp
            A64 = _flat(sides[1], "advantages", True, offs) if len(sides) > 1 else None
            g = group[row0:row0 + b.num_rows] if group is not None else None
            for k, v in hypothesis_agreement(offs, L, A, mask, g, params, rtol, atol, A64).items():
                counts[k] = counts.get(k, 0) + int(v.sum())
        row0 += b.num_rows
    return RowTable.concat(parts) if hyp is None else counts


def _trim_index(offs_full, offs_short):
    """Flat indices of the first ``len_short[i]`` tokens of each row of a padded layout."""
    import numpy as np

    n = np.diff(offs_short)
    if (n > np.diff(offs_full)).any():
        raise AdvcliError("the recomputed rows are longer than the padded lists; please report this")
    return np.repeat(offs_full[:-1], n) + (np.arange(int(n.sum())) - np.repeat(offs_short[:-1], n))


def _groups(ins, cmap, cfg, columns=None):
    """(group code per row, group ids, step per row) — (step, prompt_id) groups, else the positional groups
    the run itself formed (:func:`advcli.pipeline.grouping.scope_and_group_codes`, the pipeline's one rule:
    blocks of the group size inside each step, a step that is not a whole number of blocks as the flavor
    treats it), else None."""
    import numpy as np
    import pyarrow as pa

    from ..io.arrays import keys_codes, numeric

    R = ins.num_rows
    cols = [cmap[r] for r in ("prompt_id", "step") if cmap.has(r)]
    step = None
    if cols:
        parts = {c: [] for c in cols}
        for _, _, b in ins.iter_batches(cols, 65536):
            for c in cols:
                parts[c].append(b.column(c))
        ch = {c: pa.chunked_array(parts[c], type=ins.schema.field(c).type) for c in cols}
        if cmap.has("step"):
            step = numeric(ch[cmap["step"]], cmap["step"], ins.paths[0]).astype(np.int64)
        if cmap.has("prompt_id"):  # the dump's prompt groups, per step (advcli.ops.grouprule: the one rule)
            from ..ops.grouprule import id_groups, scope_codes

            codes, uniq = keys_codes(ch[cmap["prompt_id"]])
            g, first = id_groups(scope_codes(step)[0] if step is not None else None, codes)
            ids = [uniq[codes[i]] for i in first]
            ids = [x.item() if hasattr(x, "item") else x for x in ids]
            return g, ids, step
    grouping = RunSpec.from_config(cfg).grouping
    if grouping.by == "position" and grouping.size and R:
        from ..pipeline.grouping import group_key_columns, scope_and_group_codes
        from ..pipeline.plan import make_plan

        plan = make_plan(cfg, ins, columns or {}, "cpu")  # torch-free: the device is picked on first use
        key_cols = group_key_columns(plan)
        keys: dict[str, list] = {c: [] for c in key_cols}
        for _, _, b in ins.iter_batches(key_cols, 65536) if key_cols else ():
            for c in key_cols:
                keys[c].append(b.column(c))
        _, g, _ = scope_and_group_codes(plan, keys, R, ins.paths[0])
        n_groups = int(g.max()) + 1
        first = np.full(n_groups, R, dtype=np.int64)
        last = np.zeros(n_groups, dtype=np.int64)
        rows = np.arange(R, dtype=np.int64)
        np.minimum.at(first, g, rows)
        np.maximum.at(last, g, rows)
        return g.astype(np.int64), [f"rows {a}-{b}" for a, b in zip(first.tolist(), last.tolist())], step
    return None, None, step


RTOL, ATOL = 1e-4, 1e-5  # the default tolerances


def check_tolerances(rtol: float | None, atol: float | None, top: int = 10, *, keyword: bool = False) -> None:
    """Refuse a tolerance that is negative, NaN or infinite (NaN made every value disagree, inf every value
    agree) and a negative ``top``, naming the option (``keyword``: the library's keyword, ``rtol=``)."""
    import math

    for name, value, default in (("rtol", rtol, RTOL), ("atol", atol, ATOL)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            said = f"{name}={value!r}" if keyword else f"--{name} {value}"
            raise AdvcliError(f"{said}: a tolerance is a finite number >= 0",
                              hint=f"the default is {default:g}; a value agrees when |logged − recomputed| <= "
                                   "atol + rtol·|recomputed|")
    if top is not None and top < 0:
        said = f"top={top!r}" if keyword else f"--top {top}"
        raise AdvcliError(f"{said}: the number of worst rows to list is 0 or more", hint="the default is 10")


def rounding_tolerance(info, rtol: float | None, atol: float | None) -> tuple[float, float, str | None]:
    """(rtol, atol, note): where every logged advantage has at most d decimals, as a dump rounded to d decimals
    would (prime-rl's file monitor writes per-token floats with ``monitors.file.float_decimals`` = 4, verifiers
    0.4.0 ``RECORD_FLOAT_DECIMALS``; its scalar ``info.advantage`` goes through ``log_annotations`` as orjson
    writes it, and a rounded value cannot be told from an exact short one such as 0.5), and the user set no
    ``atol``: the default widened by that rounding's bound, half a unit in the d-th decimal; the note says so."""
    d = getattr(info, "logged_decimals", None) if info is not None else None
    rtol = RTOL if rtol is None else rtol
    if d is None:
        return rtol, ATOL if atol is None else atol, None
    if atol is not None:
        return rtol, atol, f"every logged advantage has at most {d} decimals (as if rounded); --atol {atol:g} as given"
    half = 0.5 * 10.0 ** -d
    return rtol, half + ATOL, (f"atol {half + ATOL:g} = {half:g} (every logged advantage has at most {d} decimals, as "
                               f"if rounded) + {ATOL:g}")


def trainer_flavor(inputs: list[str]) -> tuple[str | None, str | None]:
    """(flavor, note) of the trainer that wrote the (opened) dump, when advcli has its flavor: its logged
    advantages are checked against its own semantics unless another flavor is named; (None, None) else."""
    from ..flavors import names as flavor_names
    from ..formats import FORMATS, info_for

    formats = [FORMATS.get(i.format) if i is not None else None for i in (info_for(p) for p in inputs)]
    trainers = {f.trainer_flavor() if f is not None else None for f in formats}
    if len(trainers) != 1:  # dumps of several trainers, or a dump beside plain Parquet: no one trainer's semantics
        return None, None
    trainer = formats[0]
    if trainer is not None and trainer.trainer_flavor() in flavor_names():
        return trainer.trainer_flavor(), f"flavor of the dump's trainer: {trainer.title}; another with --flavor"
    return None, None


def audit_dump(inputs: list[str], flavor: str, cfg: dict, native: dict | None, columns: dict, *,
               auto_note: str | None = None, flavor_note: str | None = None, against: str | None = None,
               rtol: float | None = None, atol: float | None = None, chunk_rows: int = 4096,
               device: str = "auto", search: bool = True, top: int = 10, progress=None,
               whole: bool = True, torn: bool = False) -> dict:
    """The audit report dict (module docstring) of opened inputs (``advcli.formats.open_inputs``: a
    response-level dump, TRL's completions with one logged advantage per row, has a one-token mask) under
    a resolved configuration (``cfg``, the flavor's ``native`` keys, ``columns`` overrides);
    ``report["agree"]`` says whether every value agrees; ``whole``: the whole dump (a dump with no logged value at all
    is refused), not one step of a follow; ``torn``: a followed step taken without a torn last line, whose row's
    group is short of it (:func:`_short_group_rows`). ``auto_note``/``flavor_note``: how the estimator
    and the flavor were chosen (resolve_run's ``chosen`` / ``dump_note``), for the report's "recomputed with":
    where the dump's trainer chose the flavor, the settings checked and then why (``chosen`` repeats the why)."""
    import numpy as np

    from ..config.columns import is_list_type, resolve_columns
    from ..formats import info_for, name_dumps, source_of
    from ..io.reader import InputSet
    from .checks import classify, clip_explanation, fit_params, mixup_rows, unseen_causes, worst_rows

    check_tolerances(rtol, atol, top)
    t0 = time.perf_counter()
    info = info_for(inputs[0])
    rtol, atol, tol_note = rounding_tolerance(info, rtol, atol)
    ins = InputSet.open(inputs)
    file0 = source_of(ins.paths[0])
    logged_col, is_list = _logged_column(ins.schema, against, file0, info.logged if info is not None else None)
    spec = RunSpec.from_config(cfg)  # what the configuration does, read once
    cmap = resolve_columns(ins.schema, {**spec.columns, **columns}, file0)
    mask_col = cmap.require("response_mask", "the audit compares the mask=1 tokens")
    given = dict(native or {})  # the native keys given (--set, --config, the auto-picked estimator), coerced
    from ..flavors import at

    flavor = at(flavor)  # the flavor at its release, for every run below and the report
    what = label(flavor, native or {}, cfg) if flavor_note or not auto_note else auto_note
    if flavor_note:
        what = f"{what} ({flavor_note})"
    tmp = tempfile.mkdtemp(prefix=scratch_prefix("audit"))
    try:
        # the intermediate values the dump logs beside its advantages, that the run also produces: checked too
        produced = ("returns", "token_level_rewards") if spec.kl.in_reward else ("returns",)
        also = tuple(c for c in produced if c in ins.schema.names and c != logged_col and is_list
                     and is_list_type(ins.schema.field(c).type))
        run = SidecarRun(tmp, "main", inputs, cfg, flavor, native, columns, chunk_rows, device, ("advantages", *also))
        rt = compare_pass(ins.paths, [run.paths], logged_col, is_list, mask_col, rtol, atol, chunk_rows)
        group, group_ids, step = _groups(ins, cmap, cfg, columns)
        torn_rows = _short_group_rows(rt, group) if torn else None
        bad_tokens = int(rt.bad_valid.sum())
        bad_rows_idx = np.flatnonzero(rt.bad_valid > 0)
        tolerance = {"rtol": rtol, "atol": atol, **({"note": tol_note} if tol_note else {})}
        rep = {"command": "audit", "flavor": flavor.spec, "release": flavor.as_dict(), "settings": native or {},
               "ran": what,
               "estimator": spec.estimator.name,
               "inputs": [source_of(p) for p in ins.paths], "logged_column": logged_col,
               "logged_per": "token" if is_list else "row", "tolerance": tolerance,
               "rows": int(rt.n_valid.size), "valid_tokens": int(rt.n_valid.sum()),
               "tokens_disagreeing": bad_tokens, "rows_disagreeing": int(bad_rows_idx.size),
               "masked_tokens_disagreeing": int(rt.bad_masked.sum()),
               "nonfinite_logged": int(rt.nonfinite_logged.sum()),
               "max_abs_diff": float(rt.max_err.max()) if rt.max_err.size else 0.0}
        # a row logged as null (prime-rl's traces it did not ship) is not checked, nor a group of such rows only
        nulls = (np.concatenate([b.column(0).is_null().to_numpy(zero_copy_only=False)
                                 for _, _, b in ins.iter_batches([logged_col], 65536)] or [np.zeros(0, bool)])
                 if not is_list else None)
        if group is not None:
            gbad = np.unique(group[bad_rows_idx])
            checked = group if nulls is None or not nulls.any() else group[~nulls]
            rep["groups"] = int(np.unique(checked).size)
            rep["groups_disagreeing"] = int(gbad.size)
        if torn_rows is not None and torn_rows.size:
            rep["rows_of_torn_groups"] = int(torn_rows.size)
            rep["torn_groups"] = sorted({str(group_ids[g] if group_ids else g) for g in group[torn_rows]})
        if not is_list:
            unlogged = int(nulls.sum())
            if unlogged:
                rep["rows_without_logged_value"] = unlogged
            if whole and unlogged and unlogged == rep["rows"]:  # (a followed step may ship nothing: said, not refused)
                raise AdvcliError(f"{file0}: no row holds a logged value in {logged_col!r} ({unlogged:,} rows), so "
                                  "there is nothing to audit",
                                  hint="prime-rl logs an advantage only for the traces it ships (none when every "
                                       "cohort scored alike); `advcli run` computes them all")
        rep["worst"] = worst_rows(rt, top, group_ids, group, step)
        name_rows(rep["worst"], ins)
        rep["agree"] = bad_tokens == 0
        if not bad_tokens and also:  # the advantages agree: do the logged token rewards and returns?
            from .stages import _first_bad

            for col in also:
                hit = _first_bad(ins, run.paths, col, col, mask_col, rtol, atol, chunk_rows)
                if hit is not None:
                    hit.pop("arrays")
                    entry = {"row": hit["row"]}
                    name_rows([entry], ins)
                    rep["intermediate_disagreeing"] = {"column": col, **hit, "where": entry.get("where")}
                    rep["agree"] = False
                    break
        hyp_bad: dict = {}
        mixup = 0
        if bad_tokens:
            cfg64 = json.loads(json.dumps(cfg))
            cfg64["precision"] = "float64"
            run64 = SidecarRun(tmp, "f64", inputs, cfg64, flavor, native, columns, chunk_rows, device)
            params = fit_params(rt, group)
            hyp_bad = compare_pass(ins.paths, [run.paths, run64.paths], logged_col, is_list, mask_col, rtol, atol,
                                   chunk_rows, hyp=(params, group))
            mixup = mixup_rows(rt, step, bad_rows_idx, rtol, atol)
            rep["fitted"] = {"scale": params["c"], "shift": params["d"]}
            hits = (hyp_bad.pop("clip_low_hits", 0), hyp_bad.pop("clip_high_hits", 0))
            if "clip" in hyp_bad:  # the bounds some token reaches (None: not seen)
                rep["fitted"]["clip"] = [params["lo"] if hits[0] else None, params["hi"] if hits[1] else None]
            rep["hypotheses"] = {k: {"tokens_left": int(v)} for k, v in hyp_bad.items()}
            rep["rows_matching_another_row"] = mixup
        findings = classify(rt, hyp_bad, mixup, rt.n_valid.size)
        for f in findings:
            if f["kind"] == "scale":
                f["explanation"] = f["explanation"].format(c=rep["fitted"]["scale"])
            elif f["kind"] == "shift":
                f["explanation"] = f["explanation"].format(d=rep["fitted"]["shift"])
            elif f["kind"] == "clip":
                f["explanation"] = clip_explanation(flavor, *rep["fitted"]["clip"])
        if bad_tokens and not any(f["kind"] == "float32" for f in findings):
            findings += unseen_causes(flavor)  # what the dump cannot show (TRL: a subclass's transform, #7298)
        rep["findings"] = findings
        if bad_tokens or not rep["agree"]:  # where the dump logs intermediate values (or the run whitens, clips)
            from .stages import first_stage

            stage = first_stage(tmp, inputs, ins, cfg, flavor, native, columns, logged_col, is_list, mask_col,
                                step, rtol, atol, chunk_rows, device)
            if stage is not None:
                entry = {"row": stage["row"]}
                name_rows([entry], ins)
                stage["where"] = entry.get("where")
                rep["first_stage"] = stage
        if bad_tokens and search:  # the flavor's other releases first: the run may have used an older one
            rep["releases_tried"] = _other_releases(tmp, inputs, ins, flavor, native or {}, columns, logged_col,
                                                    is_list, mask_col, rtol, atol, chunk_rows, device)
            rep["release_matches"] = [r["label"] for r in rep["releases_tried"] if r.get("tokens_disagreeing") == 0]
            match = next((r for r in rep["releases_tried"] if r.get("tokens_disagreeing") == 0), None)
            if match is not None:  # the whole difference is the release's: no scale, shift or float32 story
                rep["findings"] = [{"kind": "release", "explanation": (
                    f"the logged values are what {match['label']} computes, to the tolerance: the run used that "
                    f"release's semantics (--flavor {match['flavor']}@{match['release']} reproduces them)")}]
            rep["search"] = _search(tmp, inputs, ins, flavor, given, columns, cmap, logged_col, is_list, mask_col,
                                    rtol, atol, chunk_rows, device, progress,
                                    group_size=int(np.bincount(np.bincount(group)).argmax()) if group is not None
                                    and group.size else None)
            matches = [c for c in rep["search"] if c.get("tokens_disagreeing") == 0]
            rep["matches"] = [c["label"] for c in matches]
            if rep.get("first_stage") and (rep["release_matches"] or rep["matches"]):
                # what reproduces the whole: a release of the flavor, else a configuration found by the search
                rep["first_stage"]["reproduced_by"] = (rep["release_matches"] or rep["matches"])[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    from ..formats import no_token_data, unread_files

    unread = unread_files(inputs)
    if unread:  # an empty or compressed step file: the audit passed over it, and says so (as run does)
        rep["files_not_read"] = unread
    reason = no_token_data(inputs)
    if reason:  # one value per response: the one-token rows are not tokens, the rows say it all
        rep["no_token_data"] = reason
        for k in ("valid_tokens", "tokens_disagreeing"):
            rep.pop(k, None)
    return name_dumps(rep)  # a skipped candidate's message names the dump, not its temporary Parquet


def _short_group_rows(rt, group):
    """A followed step taken without its torn last line (the trainer moved on leaving it half-written): that
    row's group is recomputed without it, so the rest of the group cannot be checked against what the trainer
    computed on the whole group. The rows of groups smaller than the step's largest that disagree are taken out
    of the verdict (``rt`` changed in place: not counted, not listed) -> their row indices (None: no group).
    A disagreement elsewhere in the step still counts; a step-wide whitening changes every row, and is not
    excused."""
    import numpy as np

    if group is None or not group.size:
        return None
    sizes = np.bincount(group)  # (the torn row's group is one short of the n every group of the step has)
    rows = np.flatnonzero((sizes[group] < sizes.max()) & (rt.bad_valid > 0))
    rt.bad_valid[rows] = 0
    rt.max_err[rows] = 0.0
    return rows


def name_rows(worst: list[dict], ins) -> None:
    """Each of the worst rows named where the user can find it: ``where`` = the trainer's file and line
    (``dump.parquet, row N`` for a Parquet input), ``prompt`` = the first :data:`EXCERPT` characters of its
    prompt text where the dump has one (whitespace collapsed)."""
    import numpy as np
    import pyarrow.parquet as pq

    from ..formats import info_for, locate_rows, source_of

    if not worst:
        return
    starts = np.cumsum([0] + ins.file_rows())
    by_file: dict[int, list[int]] = {}
    for e in worst:
        by_file.setdefault(int(np.searchsorted(starts, e["row"], side="right") - 1), []).append(e["row"])
    prompt_col = next((c for c in PROMPT_COLUMNS if c in ins.schema.names), None)
    for k, rows in by_file.items():
        path, first = ins.paths[k], int(starts[k])
        info = info_for(path)
        local = [r - first for r in rows]
        where = locate_rows(info, local) if info is not None else {r: f"{path}, row {r}" for r in local}
        prompts = {}
        if prompt_col is not None:
            wanted, row0 = set(local), 0
            f = pq.ParquetFile(path)
            for b in f.iter_batches(batch_size=4096, columns=[prompt_col]):  # prompt texts can be long
                for r in [r for r in wanted if row0 <= r < row0 + b.num_rows]:
                    prompts[r] = _excerpt(b.column(0)[r - row0].as_py())
                row0 += b.num_rows
                if row0 > max(wanted):
                    break
        for e in worst:
            if e["row"] in rows:
                r = e["row"] - first
                e["where"] = where.get(r, source_of(path))
                if prompts.get(r):
                    e["prompt"] = prompts[r]


def _excerpt(text) -> str | None:
    """The start of a prompt: where the dump stored a conversation as JSON (a list of ``{role, content}``
    messages: TRL's completions table since #5309), its last user message, the question the completion
    answers; another JSON list, its first element's content (NeMo's ``content``)."""
    if text is None:
        return None
    text = str(text)
    try:
        chat = json.loads(text)
    except ValueError:
        chat = None
    if isinstance(chat, list) and chat and all(isinstance(m, dict) and "role" in m for m in chat):
        users = [m for m in chat if m.get("role") == "user"]
        chat = (users or chat)[-1]
    while isinstance(chat, list) and chat:
        chat = chat[0]
    if isinstance(chat, dict):
        chat = chat.get("content")
    if isinstance(chat, list):  # multimodal content: its text parts ({"type": "text", "text": ...})
        chat = " ".join(str(c.get("text", "")) for c in chat if isinstance(c, dict) and c.get("type") == "text")
    if isinstance(chat, str):
        text = chat
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[:EXCERPT - 1] + "…"


def _other_releases(tmp, inputs, ins, flavor, native, columns, logged_col, is_list, mask_col, rtol, atol, chunk_rows,
                    device) -> list[dict]:
    """The flavor's other known releases (``--flavor NAME@RELEASE``), newest first, each run with the same
    settings and compared with the logged values: {release, label, tokens_disagreeing, rows_disagreeing}
    (``skipped`` with the reason where that release cannot run them)."""
    from ..flavors import FlavorAt, at, known_releases, resolve

    fa = at(flavor)
    out = []
    for i, rel in enumerate(reversed(known_releases(fa.flavor))):
        if rel == fa.release:
            continue
        spec = FlavorAt(fa.flavor, rel, rel.name)
        entry = {"release": rel.name, "flavor": fa.flavor.name, "label": spec.label()}
        try:
            cfg, nat = resolve(spec, list(native.items()))
            r = SidecarRun(tmp, f"release{i}", inputs, cfg, spec, nat, columns, chunk_rows, device)
            rt = compare_pass(ins.paths, [r.paths], logged_col, is_list, mask_col, rtol, atol, chunk_rows)
            entry["tokens_disagreeing"] = int(rt.bad_valid.sum())
            entry["rows_disagreeing"] = int((rt.bad_valid > 0).sum())
            shutil.rmtree(os.path.join(tmp, f"release{i}"), ignore_errors=True)
        except AdvcliError as e:
            entry["skipped"] = e.message
        out.append(entry)
    return out


def _without_given(flavor, given: dict, fl, settings: dict) -> str:
    """A candidate of the audited flavor that leaves out settings the user gave (an ``audit_tries`` entry starts
    from the flavor's defaults): ``, without the given reward_funcs=[...]``, so that a configuration reproducing the
    logged values names every difference from the audited one (a group size is left out where the candidate
    groups by prompt_id: said by its label)."""
    from ..flavors import get, split_spec

    base = split_spec(str(flavor))[0]
    if split_spec(str(fl))[0] != base:
        return ""
    fl = get(base)
    fkey = fl.group_size_key
    dropped = {k: v for k, v in given.items() if k not in settings and k != "advcli.estimator"
               and not (k == fkey and settings.get("advcli.group_by") == "id")
               and not (k in fl.keys and fl.keys[k].default == v)}  # (a value given that is the default: no change)
    if not dropped:
        return ""
    return ", without the given " + ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                                             for k, v in dropped.items())


def _search(tmp, inputs, ins, flavor, given, columns, cmap, logged_col, is_list, mask_col, rtol, atol, chunk_rows,
            device, progress, group_size=None):
    from ..flavors import resolve
    from ..formats import check_config

    out = []
    cands = candidates(flavor, given, cmap.has("prompt_id"), group_size)
    for i, (fl, settings) in enumerate(cands):
        entry = {"flavor": str(fl), "settings": settings}
        try:
            cfg, native = resolve(fl, list(settings.items()))
            entry["label"] = label(fl, settings, cfg) + _without_given(flavor, given, fl, settings)
            check_config(inputs, cfg)  # what run refuses on this dump is never named as reproducing it
            r = SidecarRun(tmp, f"cand{i}", inputs, cfg, fl, native, columns, chunk_rows, device)
            rt = compare_pass(ins.paths, [r.paths], logged_col, is_list, mask_col, rtol, atol, chunk_rows)
            entry["tokens_disagreeing"] = int(rt.bad_valid.sum())
            entry["rows_disagreeing"] = int((rt.bad_valid > 0).sum())
            shutil.rmtree(os.path.join(tmp, f"cand{i}"), ignore_errors=True)
        except AdvcliError as e:  # this dump cannot run that configuration
            entry.setdefault("label", label(fl, settings))
            entry["skipped"] = e.message
        out.append(entry)
        if progress:
            progress("search", i + 1, len(cands))
    return out
