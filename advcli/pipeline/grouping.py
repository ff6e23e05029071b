"""The scopes (steps, domains) and groups of a run's rows as integer codes, checked — torch-free, so that
``advcli validate`` refuses what ``advcli run`` refuses about them without the math. The run's one decision of
its groups: the plan says which rule (``grouping.by``, the scope, the group size), :mod:`advcli.ops.grouprule`
forms them; the run, validate and audit ask :func:`scope_and_group_codes`.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import AdvcliError
from ..io.lists import arrow_from_numpy, factorize, primitive_numpy
from ..ops import grouprule
from .plan import Plan, RunState


def group_key_columns(plan: Plan) -> list[str]:
    """The key columns :func:`scope_and_group_codes` reads: prompt_id, step, domain where the run uses them."""
    cmap = plan.cmap
    key_cols = []
    if plan.group_by in ("id", "runs") or (plan.group_by == "position" and cmap.has("prompt_id")):
        key_cols.append(cmap["prompt_id"])  # position: only to check the blocks against the ids
    if cmap.has("step") and plan.run.grouping.scope != "all":
        key_cols.append(cmap["step"])
    if cmap.has("domain") and plan.run.grouping.scope == "step_domain":
        key_cols.append(cmap["domain"])
    return key_cols


def scope_and_group_codes(plan: Plan, keys: dict[str, list], num_rows: int, file: str,
                          state: RunState | None = None):
    """(scope code of each row, group code of each row or None, step value of each scope), numpy int64,
    from the key columns ``keys`` (name -> Arrow arrays): scopes by step (and domain), groups by prompt_id,
    by runs of equal prompt_id (AReaL) or by blocks of grouping.size rows, checked: blocks that do not split a
    step and blocks that disagree with a prompt_id column are refused (or warned about). What it learns goes
    to the run's ``state`` (None: a throwaway one): the scopes' domains, the block sizes, the warnings
    (``state.group_warnings``). Torch-free: ``advcli run`` (:func:`advcli.pipeline.rows.scopes_and_groups`),
    ``advcli validate`` and the audit ask it."""
    state = RunState() if state is None else state
    cmap = plan.cmap
    step_col = cmap.names.get("step") if plan.run.grouping.scope != "all" else None
    if step_col and step_col in keys:
        steps = primitive_numpy(
            pa.chunked_array(keys[step_col] or [arrow_from_numpy(np.zeros(0, np.int64))]).combine_chunks())
        scope_codes, step_values = grouprule.scope_codes(steps)  # ascending step order
    else:
        scope_codes = np.zeros(num_rows, dtype=np.int64)
        step_values = [None] if num_rows else []  # no rows, no scope: as with a step column (nothing to whiten)
    dom_col = cmap.names.get("domain") if plan.run.grouping.scope == "step_domain" else None
    if dom_col and dom_col in keys:
        # ROLL RLVR: each domain of a step is its own batch, domains in order of first appearance
        # inside the step (rlvr_pipeline.py L680-723 @8eb27cc2)
        dom_codes = factorize(keys[dom_col]) if num_rows else np.zeros(0, dtype=np.int64)
        dom_names = pa.chunked_array(keys[dom_col]).to_pylist() if num_rows else []
        nd = int(dom_codes.max()) + 1 if num_rows else 1
        pair = scope_codes.astype(np.int64) * nd + dom_codes
        uniq_pair, first = np.unique(pair, return_index=True)
        rank_in_step = np.empty(len(uniq_pair), dtype=np.int64)
        order = np.lexsort((first, uniq_pair // nd))  # by step, then first appearance
        rank_in_step[order] = np.arange(len(uniq_pair))
        scope_codes = rank_in_step[np.searchsorted(uniq_pair, pair)]
        step_values = [step_values[int(uniq_pair[k] // nd)] for k in order]
        state.scope_domains = [dom_names[int(first[k])] for k in order]
    gcodes = None
    if plan.group_by == "id":
        gcodes, _ = grouprule.id_groups(scope_codes, factorize(keys[cmap["prompt_id"]]))
    elif plan.group_by == "runs":  # AReaL: runs of consecutive equal prompt_id
        pid = factorize(keys[cmap["prompt_id"]])
        gcodes = grouprule.run_groups(scope_codes, pid)
        split_runs_warning(keys[cmap["prompt_id"]], pid, scope_codes, gcodes, file, step_values, state)
    elif plan.group_by == "position":
        from ..ops.blocks import block_sizes
        n = int(plan.run.grouping.size)
        rank = grouprule.rank_in_scope(scope_codes)  # position inside each scope, in input order
        sizes = np.bincount(scope_codes, minlength=len(step_values))
        expected = plan.run.grouping.scope_rows
        ns = block_sizes(sizes.tolist(), n, expected, plan.run.grouping.fallback)
        for si, (size, ni) in enumerate(zip(sizes.tolist(), ns)):
            if ni < 0:
                where = scope_where(state, step_values, si)
                want = f"not the {expected} rows of grouping.scope_rows" if expected is not None else \
                    (f"are not {n} copies of a batch of prompts (grouping.layout=strided)"
                     if plan.run.grouping.layout == "strided" else f"do not split into groups of {n} consecutive rows")
                raise AdvcliError(f"{file}: {size} rows{where} {want}",
                                  hint="positional grouping needs contiguous blocks of grouping.size rows; "
                                       "check the group size or group by prompt_id")
        whole = [si for si, (size, ni) in enumerate(zip(sizes.tolist(), ns)) if ni != n and size > n]
        if whole:  # slime's silent reshape to one group of the whole batch: said, never silent here
            where = "; ".join(f"{sizes[si]} rows{scope_where(state, step_values, si)}" for si in whole[:3])
            more = f" (and {len(whole) - 3} more step(s))" if len(whole) > 3 else ""
            want = f"rollout_batch_size·n = {expected}" if expected is not None else f"a multiple of the group size {n}"
            state.group_warnings.append(f"{len(whole)} step(s) normalised as ONE group of all their rows, as the "
                                       f"framework does when a step's row count is not {want}: {where}{more}; "
                                       "check the group size (grouping.size, grouping.scope_rows; slime: "
                                       "n_samples_per_prompt, rollout_batch_size)")
        tails = [si for si, size in enumerate(sizes.tolist()) if size % n and plan.run.grouping.fallback == "tail"]
        if tails:  # AReaL 1.0.4: the rows past the last whole slice, normalised with mean 0 and std 0 (#1673)
            where = "; ".join(f"{sizes[si]} rows{scope_where(state, step_values, si)} (the last {sizes[si] % n})"
                              for si in tails[:3])
            more = f" (and {len(tails) - 3} more step(s))" if len(tails) > 3 else ""
            state.group_warnings.append(
                f"{len(tails)} step(s) do not split into groups of {n} rows: {where}{more}. AReaL 1.0.4 left the "
                "group mean and std of those last rows at 0, dividing them by eps (AReaL #1673, unfixed in the "
                "release): reproduced as the release computed it, so those rows' values are divided by eps; "
                "check the group size, or run a release with per-prompt groups")
        state.block_sizes = ns
        per_scope = np.asarray(ns, dtype=np.int64)
        per = np.maximum(per_scope, 1)
        if plan.run.grouping.layout == "strided":
            # TRL's old RLOOTrainer: a scope is n copies of its m = S/n prompts (queries.repeat(rloo_k, 1)), grouped
            # by reshape(rloo_k, -1): row r is in group r mod m (rloo_trainer.py L308, L434 @v0.21.0)
            m = np.where((per_scope == n) & (sizes % n == 0), sizes // n, 1)
            block = rank % np.maximum(m, 1)[scope_codes] if num_rows else rank
            offsets = np.concatenate([[0], np.cumsum(m)[:-1]])
        else:
            block = rank // per_scope[scope_codes] if num_rows else rank
            offsets = np.concatenate([[0], np.cumsum(-(-sizes // per))[:-1]])  # a short last block counts
        gcodes = offsets[scope_codes] + block
        blocked = per_scope[scope_codes] == n  # a scope that fell back to one group has no blocks to check
        if cmap.has("prompt_id") and cmap["prompt_id"] in keys and num_rows and bool(blocked.any()):
            check_position_ids(plan, keys, file, gcodes, scope_codes, rank, n, step_values, blocked, state)
    return scope_codes, gcodes, step_values


def split_runs_warning(ids, pid: np.ndarray, scope_codes: np.ndarray, gcodes: np.ndarray, file: str,
                       step_values: list, state: RunState) -> None:
    """AReaL's groups are runs of consecutive rows with one prompt_id: a prompt_id that comes back in another
    run of the same step is a group of its own there, as AReaL would form it, but more often a dump whose
    rows were reordered after the run (the shipped sample scatters its groups). Said once, with an example."""
    ids_groups, _ = grouprule.id_groups(scope_codes, pid)
    num_ids = int(ids_groups.max()) + 1 if ids_groups.size else 0
    num_runs = int(gcodes.max()) + 1 if gcodes.size else 0
    if num_runs <= num_ids:
        return
    runs_per_id = np.bincount(np.unique(ids_groups * num_runs + gcodes) // num_runs, minlength=num_ids)
    split = np.nonzero(runs_per_id > 1)[0]
    k = int(split[0])
    rows = np.nonzero(ids_groups == k)[0]
    other = int(rows[np.nonzero(gcodes[rows] != gcodes[rows[0]])[0][0]])
    where = scope_where(state, step_values, int(scope_codes[rows[0]]))
    state.group_warnings.append(
        f"{file}: {len(split):,} prompt_id value(s) come back after other prompts' rows (e.g. "
        f"{pa.chunked_array(ids)[int(rows[0])].as_py()!r}{where}, rows {int(rows[0])} and {other}): AReaL groups "
        f"each run of consecutive rows on its own (its per-prompt trajectory dicts), so they make "
        f"{num_runs - num_ids:,} more group(s) than there are prompts. If the rows were reordered after the "
        "run, restore the rollout order (each prompt's responses contiguous) or group by the ids: "
        "--set advcli.group_by=id")


def scope_where(state: RunState, step_values: list, s: int) -> str:
    """' in step 3, domain "math"' for scope s (empty for a whole-input scope)."""
    parts = [f"step {step_values[s]}"] if step_values[s] is not None else []
    if state.scope_domains is not None:
        parts.append(f"domain {state.scope_domains[s]!r}")
    return " in " + ", ".join(parts) if parts else ""


def check_position_ids(plan: Plan, keys: dict, file: str, gcodes, scope_codes, rank, n: int, step_values,
                       rows=None, state: RunState | None = None):
    """ROLL, OpenRLHF and TRL group n consecutive rows; a prompt_id column must agree with those blocks
    (``rows``: a bool mask of the rows to check, None: all; a warning goes to ``state.group_warnings``)."""
    state = RunState() if state is None else state
    from ..ops.blocks import check_blocks_against_ids, every_id_split, first_mixed_block

    col = plan.cmap["prompt_id"]
    pid = factorize(keys[col])
    sel = np.arange(len(gcodes)) if rows is None else np.nonzero(rows)[0]
    codes = (gcodes[sel].astype(np.int64), pid[sel], scope_codes[sel].astype(np.int64))  # block, id, scope
    found = check_blocks_against_ids(*codes)
    if found is None:
        return
    kind, i, j = found
    i, j = int(sel[i]), int(sel[j])
    ids = pa.chunked_array(keys[col])
    a, b = ids[i].as_py(), ids[j].as_py()
    where = scope_where(state, step_values, int(scope_codes[j]))
    def blk(r):
        rows = np.nonzero(gcodes == gcodes[r])[0]
        return f"rows {rows[0]}-{rows[-1]}" if rows[-1] - rows[0] == len(rows) - 1 else f"rows {rows.tolist()}"
    if kind == "mixed":
        msg = (f"{file}: positional group of {n} ({blk(j)}{where}) holds several {col!r} values: row {i} has "
               f"{a!r}, row {j} has {b!r}")
    else:
        msg = (f"{file}: {col!r} {a!r} spans several positional groups of {n}{where}: row {i} ({blk(i)}) and "
               f"row {j} ({blk(j)})")
    if plan.run.grouping.id_check == "warn":  # slime never reads the ids
        state.group_warnings.append(f"{msg}; the groups are the blocks of {n} rows, as the framework forms them "
                                   "(--set advcli.group_by=id groups by the ids instead)")
        return
    if kind != "mixed" and first_mixed_block(*codes[:2]) is None and not every_id_split(*codes):
        # whole blocks of one prompt, some prompts over several: a prompt drawn for consecutive groups (twice in
        # the dataset), which the trainer runs block by block; a group size set too small splits every prompt
        state.group_warnings.append(f"{msg}: each block holds one prompt, and other prompts fill one block each, "
                                   f"so this prompt was drawn for consecutive groups; the groups are the blocks "
                                   f"of {n} rows, as the framework forms them (--set advcli.group_by=id joins "
                                   "them)")
        return
    strided = plan.run.grouping.layout == "strided"
    layout = (f"{n} copies of the batch: row r in group r mod rows/{n}, grouping.layout=strided"
              if strided else f"blocks of {n} consecutive rows")
    order = "the batch repeated, prompt by prompt in each copy" if strided else "each prompt's responses contiguous"
    raise AdvcliError(msg, hint=f"this flavor groups by position ({layout}), and the "
                      f"{col!r} column disagrees with those blocks, so the groups are ambiguous. Check the group "
                      f"size; if rows were reordered after the run, restore the rollout order ({order}) or "
                      "group by the ids instead, keeping this flavor's semantics: "
                      "--set advcli.group_by=id. If the same prompt really was drawn for consecutive groups (a "
                      "prompt twice in the dataset), keep the blocks: --set advcli.id_check=warn "
                      "(grouping.id_check=warn with --flavor advcli)")
