"""The data checks of a run without its math (torch-free): :func:`check_data` reads every column the run
reads or checks, with pyarrow and numpy, and refuses what ``advcli run``'s passes would refuse as they read
it — with the same checks (:mod:`advcli.io.value_checks`, :func:`advcli.io.lists.check_no_nulls`) and so the
same messages. ``advcli validate`` calls it after :func:`advcli.pipeline.plan.open_and_plan`, whose checks
(the configuration, the columns, the estimator's own rules on its spec) ``run`` makes first too.

What only the math finds is left to ``advcli validate --deep`` (the whole run without output): a user
estimator's output, whitening with too few
tokens, values the math makes non-finite, and the diagnostics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..config.runspec import RunSpec
from ..errors import AdvcliError
from ..io.lists import check_no_nulls, list_offsets, list_values, primitive_numpy
from ..io.reader import InputSet
from ..io.value_checks import (
    check_finite,
    check_lengths,
    check_mask,
    check_row_numbers,
    note_unread_value,
    refuse_unplaced_rows,
)
from . import roles as role_rules
from .grouping import group_key_columns, scope_and_group_codes
from .plan import Plan, RunState
from .roles import FLOAT_ROLES

if TYPE_CHECKING:
    from ..flavors import FlavorAt

FLOAT_KINDS = "f"


@dataclass
class DataCounts:
    rows: int
    tokens: int  # Σ row lengths
    valid_tokens: int  # Σ mask


def _token_roles(plan: Plan) -> list[str]:
    """Every token column the run reads or checks: the math's, the row pass's, the dump's others."""
    return [r for r in dict.fromkeys(_read_token_roles(plan) + list(plan.verify_roles)) if r != "response_mask"]


def _read_token_roles(plan: Plan) -> list[str]:
    """The token columns the run's math and row pass read (not the dump's others, :attr:`Plan.verify_roles`)."""
    roles = list(plan.token_roles)
    if plan.kl_on:
        roles += role_rules.kl_roles(plan.run.kl, plan.cmap)
    if plan.spec.level == "row":
        roles += [r for r in plan.spec.row_token_means if plan.cmap.has(r)]
    if plan.correction is not None:
        roles += [r for r in ("old_log_probs", "rollout_log_probs") if plan.cmap.has(r)]
    return [r for r in dict.fromkeys(roles) if r != "response_mask"]


def _row_number_roles(plan: Plan) -> list[str]:
    cmap = plan.cmap
    out = []
    if plan.reward_source == "reward" and cmap.has("reward"):
        out.append("reward")
    if cmap.has("reward_baseline") and "reward_baseline" in plan.spec.needs:
        out.append("reward_baseline")
    return out + [r for r in role_rules.row_scalar_roles(plan) if r not in out]


def check_data(plan: Plan, inputs: InputSet, chunk_rows: int, state: RunState | None = None) -> DataCounts:
    """Reads the columns of the run (:class:`Plan`) chunk by chunk and refuses (AdvcliError naming file,
    column, row and position) null values, masks other than 0/1, token columns whose rows are not as long
    as the mask's, non-finite token values, non-finite rewards (NaN allowed with reward.nan=allow or zero), and,
    where the reward sits on the last trained token and must (reward.unplaced=error), a row without one;
    steps that do not split into blocks of grouping.size rows and blocks that disagree with prompt_id
    (:func:`advcli.pipeline.grouping.scope_and_group_codes`, its warnings in ``state.group_warnings``)."""
    state = RunState() if state is None else state
    cmap = plan.cmap
    mask_name = cmap["response_mask"]
    token_roles = _token_roles(plan)
    read_roles = set(_read_token_roles(plan))
    precision = np.float64 if plan.run.precision == "float64" else np.float32  # what run casts them to
    number_roles = _row_number_roles(plan)
    allow_nan = plan.run.reward.nan != "refuse"
    key_cols = group_key_columns(plan)
    keys: dict[str, list] = {c: [] for c in key_cols}
    cols = list(dict.fromkeys([mask_name] + [cmap[r] for r in token_roles + number_roles] + list(plan.components)
                              + key_cols))
    float_roles = set(FLOAT_ROLES)
    chunk_rows = inputs.chunk_rows(chunk_rows, cols)  # about CHUNK_TOKENS tokens a chunk, however long the rows
    rows = tokens = valid = 0
    empty_row, empty = None, 0
    zero_row, zero = None, 0  # the first row with no token at all (global, as run names it), how many
    for fi, row_base, batch in inputs.iter_batches(cols, chunk_rows):
        file = inputs.paths[fi]
        mask_arr = batch.column(mask_name)
        check_no_nulls(mask_arr, file, mask_name, row_base)
        offsets = list_offsets(mask_arr)
        mask = _values(mask_arr)
        check_mask(mask, offsets, file, mask_name, row_base)
        for role in token_roles:
            name = cmap[role]
            arr = batch.column(name)
            check_no_nulls(arr, file, name, row_base)
            check_lengths(offsets, list_offsets(arr), file, name, mask_name, row_base)
            if role in float_roles:
                vals = _values(arr)
                if vals.dtype.kind in FLOAT_KINDS:
                    with np.errstate(over="ignore"):
                        cast = vals.astype(precision, copy=False)
                    try:  # as run checks them: at the run's precision, −inf where only a clamping KL reads it
                        check_finite(cast, offsets, file, name, row_base, role in plan.neg_inf_roles,
                                     source=vals if cast.dtype != vals.dtype else None,
                                     checked=mask if role in plan.masked_only_roles else None)
                    except AdvcliError as e:
                        if role in read_roles:
                            raise
                        note_unread_value(state.group_warnings, e.message, name)
        for name in [cmap[r] for r in number_roles] + list(plan.components):
            arr = batch.column(name)
            if allow_nan and name != cmap.names.get("reward_baseline") and arr.null_count:
                arr = arr.cast(pa.float64()).fill_null(float("nan"))
            check_no_nulls(arr, file, name, row_base)
            raw = np.asarray(primitive_numpy(arr))
            with np.errstate(over="ignore"):  # as the run reads it (pipeline.read.read_scalar)
                cast = raw.astype(precision, copy=False) if raw.dtype.kind == "f" else raw
                check_row_numbers(cast, file, name, row_base, allow_nan and name != cmap.names.get("reward_baseline"),
                                  source=raw if cast.dtype != raw.dtype else None)
        for name in key_cols:  # as the run's row pass reads them (advcli.pipeline.rows): a null id is refused
            arr = batch.column(name)
            check_no_nulls(arr, file, name, row_base)
            keys[name].append(arr)
        lengths = np.diff(offsets)
        per_row = np.bincount(np.repeat(np.arange(len(lengths)), lengths), weights=mask,
                              minlength=len(lengths)).astype(np.int64)
        if empty_row is None and (per_row == 0).any():
            empty_row = rows + int(np.nonzero(per_row == 0)[0][0])
        empty += int((per_row == 0).sum())
        if zero_row is None and (lengths == 0).any():
            zero_row = rows + int(np.nonzero(lengths == 0)[0][0])
        zero += int((lengths == 0).sum())
        rows += len(lengths)
        tokens += int(lengths.sum())
        valid += int(per_row.sum())
    scope_and_group_codes(plan, keys, rows, inputs.paths[0], state)  # blocks that do not split, ids that disagree
    refuse_unplaced_rows(plan.run.reward, plan.reward_source, inputs.paths, inputs.file_rows(), (empty_row, empty),
                         (zero_row, zero))
    return DataCounts(rows=rows, tokens=tokens, valid_tokens=valid)


def _values(arr: pa.Array) -> np.ndarray:
    vals = list_values(arr)
    if pa.types.is_boolean(vals.type):
        return np.asarray(vals.to_numpy(zero_copy_only=False), dtype=np.int8)
    return np.asarray(primitive_numpy(vals))


# the verdict's figures that only the math gives: left out (and named) unless validate runs deep
MATH_ONLY = ("diagnostics",)


def check_run(input_specs: list[str], cfg: dict, *, column_overrides: dict[str, str] | None = None,
              chunk_rows: int | None = 4096, device: str = "cpu", output: str | None = None, force: bool = False,
              deep: bool = False, flavor: FlavorAt | str = "advcli", native: dict | None = None):
    """(RunResult, deep) of ``advcli validate``: raises the AdvcliError ``advcli run`` with these arguments
    would raise, writing nothing. ``output``: that output path is checked too.

    Without ``deep`` no math runs (torch is not imported): the configuration and the plan
    (:func:`advcli.pipeline.plan.open_and_plan`, the estimator's own rules on its spec) and the data
    (:func:`check_data`); the result has no diagnostics (``not_computed`` names what was left out). With
    ``deep``, or a user estimator (only running it checks what it returns), the whole run without output."""

    from ..estimators import is_user
    from ..io.writer import check_output_path
    from ..results import RunResult
    from .output import output_paths, undone_on_failure
    from .plan import open_and_plan

    deep = deep or is_user(str(RunSpec.from_config(cfg).estimator.name))
    if device == "cuda" and not deep:  # as run refuses it (plan.pick_device): asking torch is the only way to know
        from .plan import pick_device

        pick_device(device)
    if output is not None:
        from ..io.reader import InputSet

        ins = InputSet.open(input_specs)
        with undone_on_failure(output, always=True):  # validate writes nothing, not even a directory
            outs = output_paths(ins, output)  # may create an output directory for several inputs
            for o in outs:
                check_output_path(o, ins.paths, force)
    if deep:
        from .run import run_pipeline

        return run_pipeline(input_specs, None, cfg, flavor=flavor, native=native, column_overrides=column_overrides,
                            chunk_rows=chunk_rows, device=device, force=force, check_values=True), True
    inputs, plan = open_and_plan(input_specs, cfg, column_overrides, device, chunk_rows, "full", None)
    state = RunState()
    counts = check_data(plan, inputs, chunk_rows or 4096, state)
    result = RunResult(inputs=inputs.paths, outputs=[], rows=counts.rows, tokens=counts.tokens,
                       valid_tokens=counts.valid_tokens, seconds=0.0, config=cfg,
                       warnings=list(state.group_warnings) + list(plan.warnings))
    return result, False
