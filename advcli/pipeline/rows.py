"""Pass 1, the row table: per-row lengths, rewards, KL sums and group keys over the whole input;
scopes (steps, domains), groups and the KL coefficient of every step resolved from them, and
:class:`Prepared`, what the token passes receive.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from ..io.arrow_torch import check_no_nulls
from ..io.lists import factorize, primitive_numpy
from ..io.memory import trim as trim_heap
from ..io.reader import InputSet
from ..ops import kl as kl_ops
from ..ops.batch import RowTable
from ..ops.groups import GroupIndex
from ..ops.kl import KLController, row_kl_sums
from ..ops.ragged import Ragged
from ..ops.rewards import range_map
from . import roles as role_rules
from .grouping import group_key_columns, scope_and_group_codes
from .plan import Plan, ProgressFn, RunState
from .read import TRIM_EVERY, ChunkReader, allows_nan, read_scalar, roles_to_columns


def kl_token(plan: Plan, tok: dict, mask: torch.Tensor) -> torch.Tensor:
    c = plan.run.kl
    lp, ref = role_rules.kl_inputs(c, tok, mask)
    kld = kl_ops.kl_per_token(lp, ref, c.estimator, c.input_clamp, c.output_clamp)
    return kld * mask if c.mask else kld


SAMPLE_KEEP = "sample_keep"  # the row-table column of the rows kept in the advantage (advantage.drop_*)
KL_SKIPPED = "kl_skipped"  # the row table's column of the rows kl.skip_flat_groups takes the KL term from


def kl_rows(table, row0: int, count: int) -> torch.Tensor | None:
    """bool [count]: which of the table's rows row0.. keep their KL term; None where every row does (no
    kl.skip_flat_groups): the KL diagnostics leave the others out, as their KL is 0."""
    skipped = table.columns.get(KL_SKIPPED)
    return None if skipped is None else ~skipped[row0:row0 + count].to(torch.bool)


def flat_rule(plan: Plan) -> str | None:
    """``kl.skip_flat_groups`` where it acts: KL in the reward from a row reward (SkyRL's zero_variance_filter
    runs on response-level rewards only), else None."""
    rule = plan.run.kl.skip_flat_groups
    return rule if plan.kl_on and rule != "off" and plan.reward_source != "token_level_scores" else None


def placement_index(plan: Plan, layout: Ragged, mask: torch.Tensor) -> torch.Tensor:
    """Flat index of each row's reward token (-1: nowhere, e.g. an empty row)."""
    if plan.run.reward.placement == "last_valid" or plan.padded:
        idx = layout.last_true_index(mask.bool())
        # OpenRLHF: an all-zero mask row gets eos = T-1 of the *padded batch* (its reward is masked out
        # later anyway): inside the row only for fixed-width (padded) dumps; a ragged row has no T-1 of
        # the batch, so the reward lands nowhere (token_level_rewards then hold only the KL term, as
        # OpenRLHF's do for every row shorter than the batch width)
        if plan.padded:
            return torch.where(idx >= 0, idx, layout.last_index())
        return idx
    return layout.last_index()


def defer_row_kl(plan: Plan) -> bool:
    """Whether the per-row KL (Σ_t and verl's masked mean) can wait for the write pass: nothing
    before it depends on it — a fixed controller (β does not depend on the KL), an estimator that
    reads tokens, not row scores, and no group diagnostics over the row scores. Then pass 1 reads no
    log-prob column and the KL is computed once, where the token rewards need it anyway."""
    return (plan.kl_on and plan.run.kl.controller != "adaptive" and plan.spec.level != "row"
            and not plan.spec.uses_groups and plan.spec.group_token_pass is None)


def row_table_pass(plan: Plan, inputs: InputSet, chunk_rows: int, progress: ProgressFn | None, row_kl: bool = True,
                   state: RunState | None = None):
    """Pass 1 over every row; the token columns it checks are recorded in ``state.checked_roles`` (the run's
    state, None: not recorded), which later passes then do not check again."""
    cmap = plan.cmap
    roles = ["response_mask"]
    if plan.reward_source == "token_level_scores":
        roles.append("token_level_scores")
    row_kl = plan.kl_on and row_kl
    if row_kl:
        roles += role_rules.kl_roles(plan.run.kl, cmap)
    token_means = [r for r in plan.spec.row_token_means if cmap.has(r)] if plan.spec.level == "row" else []
    roles = list(dict.fromkeys(roles + token_means))
    verify = [r for r in plan.verify_roles if r not in roles]  # checked here, once, never read again
    cols = list(roles_to_columns(plan, roles + verify))
    scalar_roles = []
    if plan.reward_source == "reward" and cmap.has("reward"):
        scalar_roles.append("reward")
    if cmap.has("reward_baseline") and "reward_baseline" in plan.spec.needs:
        scalar_roles.append("reward_baseline")
    if "is_last_step" in plan.spec.needs:  # step-wise trajectories (estimators.stepwise)
        scalar_roles.append("is_last_step")
    # per-row numbers of the reward stage and the estimator (AReaL: truncated, bootstrap_value), in the
    # run's dtype; is_last_step is read above (estimators also get their roles typed through row_inputs)
    extra_roles = [r for r in role_rules.row_scalar_roles(plan) if r != "is_last_step"]
    scalar_roles += extra_roles
    for r in scalar_roles:
        cols.append(cmap[r])
    cols += plan.components
    # the estimator's key columns are read as they are; row_inputs() converts them
    key_cols = group_key_columns(plan) + [cmap[r] for r in row_input_roles(plan)]
    cols = list(dict.fromkeys(cols + key_cols))

    reader = ChunkReader(plan, inputs, state)
    # kl.skip_flat_groups: the rewards as SkyRL compares them, float64 (flat_kl_rows)
    reward64 = flat_rule(plan) is not None and plan.reward_source == "reward" and cmap.has("reward")
    length_kind = plan.run.reward.overlong.length
    span_length = plan.run.reward.overlong.tokens is not None and length_kind in ("span", "first_run")
    parts: dict[str, list] = {k: [] for k in ("length", "valid", "span", "reward", "reward64", "keep", "kl_sum",
                                              "kl_mean", "score_sum", "reward_baseline", "is_last_step", *extra_roles,
                                              *(f"token_mean:{r}" for r in token_means))}
    comp_parts: dict[str, list] = {c: [] for c in plan.components}
    keys: dict[str, list] = {c: [] for c in key_cols}
    done, total = 0, inputs.num_rows
    for fi, row_base, batch in inputs.iter_batches(cols, chunk_rows):
        file = inputs.paths[fi]
        offsets, tok = reader.tokens(batch, file, row_base, roles, verify)
        layout = Ragged(torch.from_numpy(offsets))
        mask01 = tok["response_mask"]  # int8/bool 0-1 (checked by the reader)
        parts["length"].append(layout.lengths)
        parts["valid"].append(layout.count_per_row(mask01))
        if span_length:  # OpenRLHF's response_length for its overlong penalty; NeMo's first assistant message
            on = mask01 > 0
            parts["span"].append(layout.true_span(on) if length_kind == "span" else layout.first_run(on))
        place = placement_index(plan, layout, mask01)
        keep = torch.zeros(layout.num_rows, dtype=torch.bool)
        ok = place >= 0
        keep[ok] = mask01[place[ok]] > 0
        parts["keep"].append(keep)
        bounds = plan.run.reward.range_map  # NeMo reward_scaling: the rewards as read, mapped first
        if plan.reward_source == "reward":
            parts["reward"].append(range_map(read_scalar(batch, cmap["reward"], file, row_base, plan.dtype,
                                                         allows_nan(plan)), bounds))
            if reward64:
                parts["reward64"].append(range_map(read_scalar(batch, cmap["reward"], file, row_base, torch.float64,
                                                               allows_nan(plan)), bounds))
        elif plan.reward_source == "token_level_scores":
            parts["score_sum"].append(layout.row_sum(tok["token_level_scores"]))
        for c in plan.components:
            comp_parts[c].append(range_map(read_scalar(batch, c, file, row_base, plan.dtype, allows_nan(plan)),
                                           bounds))
        if "reward_baseline" in scalar_roles:
            parts["reward_baseline"].append(read_scalar(batch, cmap["reward_baseline"], file, row_base, plan.dtype))
        if "is_last_step" in scalar_roles:
            parts["is_last_step"].append(read_scalar(batch, cmap["is_last_step"], file, row_base, torch.float32))
        for r in extra_roles:
            parts[r].append(read_scalar(batch, cmap[r], file, row_base, plan.dtype))
        if token_means:
            on = mask01 > 0
            n = layout.count_per_row(mask01).to(torch.float64)
            for r in token_means:  # Σ_{t: m=1} x / Σ_t m in float64 (masked values never read), NaN when Σ_t m = 0
                x = tok[r].to(torch.float64)
                mean = layout.row_sum(torch.where(on, x, torch.zeros_like(x))) / n
                parts[f"token_mean:{r}"].append(torch.where(n > 0, mean, torch.full_like(mean, float("nan"))))
        if row_kl:
            mask = mask01.to(plan.dtype)
            kl_sum, kl_mean = row_kl_sums(layout, kl_token(plan, tok, mask), mask, plan.run.kl.mask)
            parts["kl_sum"].append(kl_sum)
            parts["kl_mean"].append(kl_mean)
        for c in key_cols:
            arr = batch.column(c)
            check_no_nulls(arr, file, c, row_base)
            keys[c].append(arr)
        done += batch.num_rows
        if (done // max(batch.num_rows, 1)) % TRIM_EVERY == 0:
            trim_heap()
        if progress:
            progress("rows", done, total)
    if state is not None:
        state.checked_roles |= set(roles) | set(verify)  # every row of these columns passed the checks
    if not parts["length"]:  # an input of 0 rows: empty tables, an empty output
        parts["length"] = parts["valid"] = [torch.zeros(0, dtype=torch.int64)]
        if span_length:
            parts["span"] = [torch.zeros(0, dtype=torch.int64)]
        parts["keep"] = [torch.zeros(0, dtype=torch.bool)]
        if plan.reward_source == "reward":
            parts["reward"] = [torch.zeros(0, dtype=plan.dtype)]
            if reward64:
                parts["reward64"] = [torch.zeros(0, dtype=torch.float64)]
        if plan.reward_source == "token_level_scores":
            parts["score_sum"] = [torch.zeros(0, dtype=plan.dtype)]
        if row_kl:
            parts["kl_sum"] = parts["kl_mean"] = [torch.zeros(0, dtype=plan.dtype)]
        if "reward_baseline" in scalar_roles:
            parts["reward_baseline"] = [torch.zeros(0, dtype=plan.dtype)]
        if "is_last_step" in scalar_roles:
            parts["is_last_step"] = [torch.zeros(0, dtype=torch.float32)]
        for r in extra_roles:
            parts[r] = [torch.zeros(0, dtype=plan.dtype)]
        for r in token_means:
            parts[f"token_mean:{r}"] = [torch.zeros(0, dtype=torch.float64)]
    cat = lambda xs, dt=None: torch.cat(xs) if xs else torch.zeros(0, dtype=dt or plan.dtype)  # noqa: E731
    return ({k: cat(v) for k, v in parts.items() if v}, {c: cat(v) for c, v in comp_parts.items()}, keys)


def scopes_and_groups(plan: Plan, keys: dict[str, list], num_rows: int, file: str, state: RunState | None = None):
    """(scopes, groups or None, step values) as GroupIndex: the codes of :func:`advcli.pipeline.grouping.
    scope_and_group_codes` (which decides and checks them, torch-free; what it learns goes to ``state``)."""
    scope_codes, gcodes, step_values = scope_and_group_codes(plan, keys, num_rows, file, state)
    scopes = GroupIndex(torch.from_numpy(scope_codes.astype(np.int64)), len(step_values))
    groups = None
    if gcodes is not None:
        groups = GroupIndex.from_codes(torch.from_numpy(gcodes.astype(np.int64)))
    return scopes, groups, step_values


# For a caller that runs a training run step by step (``--follow``): set to a dict before a run, it receives
# under "end" the adaptive controller's value after the run's last scope, the coefficient the next step
# starts from (``kl.coef`` of that step's configuration). None: nothing recorded.
KL_CARRY: ContextVar[dict | None] = ContextVar("advcli_kl_carry", default=None)


def kl_coefs(plan: Plan, scopes: GroupIndex, kl_mean: torch.Tensor | None,
             state: RunState | None = None) -> tuple[list[float], list[float]]:
    """β used by each scope (value before that scope's update) and each scope's current_kl
    (0.0 where ``kl_mean`` is not known yet: :func:`defer_row_kl`, a fixed controller). ``state``: the run's
    :class:`RunState`, whose controller (``state.kl``; made from the plan when None) is the one stepped, so
    that it holds the coefficient after the last scope; None: a controller of the plan's own."""
    if state is None:
        ctl = KLController.of(plan)
    else:
        if state.kl is None:
            state.kl = KLController.of(plan)
        ctl = state.kl
    betas, kls = kl_ops.scope_coefficients(ctl, scopes.codes, scopes.num_groups, kl_mean)
    carry = KL_CARRY.get()
    if carry is not None and kl_mean is not None:  # the first run's value after its last scope (an audit's
        carry.setdefault("end", ctl.value)  # search runs other configurations afterwards)
    return betas, kls


@dataclass
class Prepared:
    scopes: GroupIndex
    groups: GroupIndex | None
    step_values: list
    beta_row: torch.Tensor  # [R]
    reward_row: torch.Tensor  # [R] r̃ (post-processed, before placement)
    adv_row: torch.Tensor | None  # [R] row-level estimator output
    table: RowTable
    whiten_mean: torch.Tensor | None = None  # [S] float64
    whiten_rstd: torch.Tensor | None = None
    tlr_mean: torch.Tensor | None = None  # [S] float64: reward.whiten_tokens statistics
    tlr_rstd: torch.Tensor | None = None
    group_tables: Any = None  # GroupTokenTables of the token-statistics pass (optimal token baselines)
    token_cache: dict | None = None  # row0 -> CachedChunk from the statistics pass (token_moment_pass)
    token_cache_complete: bool = False  # every chunk cached with its layout, mask and observations
    token_spill: Any = None  # pipeline.spill.TokenSpill holding the cached chunks' tensors beyond memory
    raw_score: torch.Tensor | None = None  # [R] row reward before normalisation and KL (statistics)
    row_keys: dict | None = None  # key columns of the row pass (diagnostics name groups by prompt_id)
    kl_deferred: bool = False  # the per-row KL is computed by the write pass (defer_row_kl)
    diagnostics: list = field(default_factory=list)  # items found before the write pass (advcli.pipeline.diagnostics)
    whiten_other: tuple | None = None  # advantage.whiten_one_pass: (mean, rstd, dtype) in the other precision
    correction: Any = None  # advcli.correction.plan.CorrectionState (rollout correction), None: off
    state: RunState = field(default_factory=RunState)  # what the run learned (scope domains, block sizes, ...)


def row_input_roles(plan: Plan) -> list[str]:
    """Per-row columns the estimator reads besides the reward (``needs``/``optional`` roles of kind
    scalar or key, e.g. prime-rl's ``trainable``, ``num_turns``, ``agent_name``), present in the input."""
    from ..config.column_roles import ROLE_INFO

    special = ("reward", "reward_baseline", "prompt_id", "step", "domain")
    # is_padding: verl's synthetic padding rows, read for the figures and diagnostics whatever the estimator
    return [r for r in dict.fromkeys((*plan.spec.needs, *plan.spec.optional, "is_padding"))
            if r not in special and plan.cmap.has(r)
            and ROLE_INFO.get(r, ("", "tokens"))[1] in ("scalar", "key", "int")]


def row_inputs(plan: Plan, keys: dict, num_rows: int) -> tuple[dict, dict]:
    """(columns, labels) of :func:`row_input_roles` for the row table: numbers as tensors (float in the
    run's dtype, integers int64, booleans bool), key columns as int64 codes in first-appearance order
    with their values in ``labels``."""
    from ..config.column_roles import ROLE_INFO
    from ..io.lists import take

    columns, labels = {}, {}
    for role in row_input_roles(plan):
        arrays = keys[plan.cmap[role]]
        if ROLE_INFO[role][1] == "key":
            codes = factorize(arrays)
            columns[role] = torch.from_numpy(codes)
            labels[role] = []
            if num_rows:
                _, first = np.unique(codes, return_index=True)
                labels[role] = take(pa.chunked_array(arrays), first).to_pylist()
            continue
        arr = pa.chunked_array(arrays).combine_chunks() if arrays else pa.array([], pa.float64())
        t = torch.from_numpy(np.array(primitive_numpy(arr)))
        if t.is_floating_point():
            t = t.to(plan.dtype)
        elif t.dtype != torch.bool:
            t = t.to(torch.int64)
        columns[role] = t
    return columns, labels
