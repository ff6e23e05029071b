"""The Ray engine's per-step driver: the row pass on the workers, then the resolution one step at a time.

Every statistic advcli resolves before the write pass is scoped to a step (groups are keyed by
(step, prompt id), the reward normalisation is per group, the row-level estimators compare rows of a
group); the one state carried from a step to the next is the adaptive KL controller, stepped in
ascending step order (``AdaptiveKLController.update``, verl/trainer/ppo/core_algos.py L153-212
@1dda039b; ROLL: after each (step, domain) batch, rlvr_pipeline.py L680-723 @8eb27cc2; advcli:
:func:`advcli.pipeline.rows.kl_coefs`). So each step is resolved alone,
in ascending step value, with the controller's coefficient carried, which gives the local engine's
per-row values (tests/unit/test_step_scoped.py checks the premise with the local engine itself):

1. :func:`row_pass_pieces`: one Ray task per read shard runs the local engine's row pass on the shard's
   rows and keeps the per-row results in the object store; the driver receives only a summary per
   shard (its steps and their row counts, Σ mask, Σ length). A shard holding several steps is cut by
   step on the workers (one object per (shard, step)), so that one step's rows are fetched without
   another's, whether steps are contiguous in row order or interleaved.
2. :func:`resolve_steps`: per step, in ascending step value, a worker task (:func:`_resolve_step`)
   fetches that step's pieces and runs :func:`advcli.pipeline.prepare_run` on them alone; it leaves the
   step's lean table (for the write pass) and its full resolution (for the statistics actor) in the
   object store and returns a few numbers to the driver: each scope's mean KL and rows (the driver steps
   the run's one KL controller, ``Resolved.state.kl``, with them), the warnings, the step's first and last
   global row. The driver holds refs and per-step numbers, never a row: its memory does not grow with the
   rows (with the adaptive controller on, the steps run one after another, as the carried coefficient
   requires; with a fixed one, all at once). Every step is resolved with one plan, made once (whitening
   left to pass 2); the coefficient a step starts from is its run state's controller, not a plan's.
3. Whitening and batch normalisation (per scope: the step, or the whole dump as one step) are left out
   of the steps' resolution and run after it (:func:`advcli.engines.ray_moments.step_whitening`): a
   moments pass on the workers reading the resolved steps (token-level advantages, token rewards), or
   each step's row sums (row-level estimators); the driver gets a few floats per step and puts the
   mean and 1/std per step in the :class:`StepIndex`.
4. The write pass's workers fetch the step tables whose row range overlaps their batch
   (:class:`StepRows`), and place their batch among the run's valid tokens from the per-shard Σ mask
   (:meth:`Resolved.valid_base`: the advantage sample's strata, the histogram's seed pass); the
   statistics actor assembles its observer from the per-step pieces (:func:`observer_of_steps`) in its
   own process.

The runs :func:`not_step_scoped` lets through take this path: row-level group estimators and
token-level estimators computed row by row (GAE, REINFORCE++, ReMax, ...), with values, whitening or
token-reward whitening, grouped by prompt id or by position (blocks of n consecutive rows inside a
step), with one scope per step or ROLL's (step, domain) scopes: a step's rows give its domains (in order
of first appearance inside it) and the controller's update after each of them; its scopes are numbered
after the earlier steps' once every step is resolved (:attr:`StepIndex.offsets`). The others (it says
why) resolve the whole dump on the driver, as before.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import torch

from ..errors import AdvcliError
from .ray_rows import ROW_COL, cat_rows, lean, take_rows


def not_step_scoped(plan) -> str | None:
    """Why this run cannot be resolved one step at a time (None: it can).

    Taken: advcli's row-level group estimators and its token-level estimators computed row by row (GAE,
    REINFORCE++, ReMax, token rewards, distillation), values read or not, with whitening and batch
    normalisation of the advantages or token-reward whitening (per scope: pass 2 runs after the
    per-step resolution, :mod:`advcli.engines.ray_moments`), grouped by prompt id or by position, with
    one scope per step or ROLL's (step, domain) scopes (``grouping.scope: step_domain``: a step's rows give
    its domains, and the adaptive KL controller is carried from scope to scope as the local engine carries
    it). Refused, each with its reason: what reads or carries more than one step (below)."""
    import torch

    from ..pipeline import roles as role_rules
    from ..pipeline.observe import RunObserver

    spec = plan.spec
    if spec.name == "mix" or getattr(spec, "user_fn", None) is not None or (
            spec.level == "row" and not (spec.uses_groups and getattr(spec, "row_constant", False))):
        # prime-rl's EMA baseline carries its baseline across steps; a mix may hold it; your own function
        # is called with the run's step index
        return "the estimator is not known to read one step's rows only"
    if spec.group_token_pass is not None:
        return "the estimator has a token-statistics pass"
    if spec.level == "row" and not RunObserver.ROW_PATH:  # the actor builds its observer in its own process
        return "the statistics' row path is off in this process (tests): the statistics actor would not know"
    if plan.whiten and plan.whiten_spec().one_pass == torch.float32:
        return "slime's float32 one-pass whitening sums each step's tokens in order, in one process"
    if plan.correction is not None:
        return "the rollout correction has its own pass"
    if plan.kl_on and spec.level == "row" and plan.run.kl.score_sum != "exact":
        return "the row scores are summed on the step's token grid"
    if role_rules.norm_spec(plan.run.reward) is not None:
        return "reward.norm keeps float32 checks over the whole run"
    # ROLL's step domains: a step's rows give its domains (in order of first appearance inside the step)
    # and the controller's updates from domain to domain inside it; the steps' scopes are numbered after
    # the earlier steps' (StepIndex.offsets)
    # positional groups are cut inside each scope (a step), in input order: one step's rows give its blocks
    # (slime's warnings about them, counted over the run, come from the statistics actor's grouping)
    return None


def step_column(plan) -> str | None:
    """The step key column the row pass returns (``key:NAME``), None when the run has one scope."""
    if plan.run.grouping.scope == "all":
        return None
    return plan.cmap.names.get("step")


# ----------------------------------------------------------------------------- 1. the row pass


def _step_values_of(table: pa.Table, step_col: str | None) -> np.ndarray:
    from ..io.lists import primitive_numpy

    if step_col is None or f"key:{step_col}" not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int64)
    return primitive_numpy(table.column(f"key:{step_col}").combine_chunks())


def _shard_rows(shard_rows_fn, payload, item: dict, step_col: str | None) -> dict:
    """A worker task: the row pass on one shard (``shard_rows_fn(payload, item)``, the engine's worker),
    its per-row results cut by step and put in the object store -> the summary the driver receives: the
    step values and their row counts, Σ mask, Σ length, rows without a mask=1 token, and one ref per step.

    The pieces are put here (owned by this worker process, which Ray keeps alive while it owns objects
    in scope) rather than returned: a return smaller than Ray's inline limit (``max_direct_call_object_size``,
    100 KB) would be kept in the caller's memory, the driver's. Objects put this way are not rebuilt from
    lineage: a worker node lost after making them ends the run with one clear error."""
    import ray

    t = shard_rows_fn(payload, item)
    steps = _step_values_of(t, step_col)
    uniq, counts = np.unique(steps, return_counts=True)
    valid = t.column("row:valid").to_numpy()
    empty = np.flatnonzero(valid == 0)
    zero = np.flatnonzero(t.column("row:length").to_numpy() == 0)
    rows = t.column(ROW_COL).to_numpy()
    pieces = [t] if len(uniq) == 1 else [t.filter(pa.array(steps == v)) for v in uniq]
    return {"first": int(item["first"]), "rows": t.num_rows, "steps": uniq, "counts": counts.tolist(),
            "valid": int(valid.sum()), "length": int(t.column("row:length").to_numpy().sum()),
            "empty": (int(rows[empty[0]]) if empty.size else -1, int(empty.size)),
            "zero_length": (int(rows[zero[0]]) if zero.size else -1, int(zero.size)),
            "refs": [ray.put(x) for x in pieces]}


@dataclasses.dataclass
class RowPieces:
    """The row pass's results left on the workers: per step (ascending value), the refs of its pieces
    (one per shard holding it, in row order), and per-shard aggregates."""

    step_values: list
    pieces: list[list]  # [step] -> [ref of a per-row table]
    step_rows: list[int]
    valid: int
    length: int
    empty: tuple[int, int]  # (first global row with Σ mask = 0 or -1, how many)
    shard_valid: list[int] = dataclasses.field(default_factory=list)  # Σ mask per shard, in row order
    zero_length: tuple[int, int] = (-1, 0)  # (first global row with 0 tokens or -1, how many)


def row_pass_pieces(ray, shards, shard_rows_fn, payload: dict, step_col: str | None, num_rows: int,
                    watch=None) -> RowPieces:
    """The row pass on the workers, its results kept there (see the module's docstring).

    A shard that fails (bad input: its first bad row) fails the pass with the error of the **earliest**
    failing shard in row order, as the local engine names the input's first bad row, whichever task Ray
    finishes first: after a failure only the shards before it are waited for."""
    run = ray.remote(num_cpus=1)(_shard_rows)
    pref = ray.put(payload)
    first_of = {run.remote(shard_rows_fn, pref, s.as_item(), step_col): s.first for s in shards}
    waiting, done, summaries = list(first_of), 0, []
    failed: tuple | None = None  # (first row of the earliest failing shard, its error)
    if watch is not None:
        watch.stage("the row pass")
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1, timeout=1.0)
        for r in ready:
            try:
                summaries.append(ray.get(r))
            except Exception as e:  # noqa: BLE001 - raised below, once no earlier shard can fail
                if failed is None or first_of[r] < failed[0]:
                    failed = (first_of[r], e)
                continue
            done += summaries[-1]["rows"]
            if watch is not None:
                watch.rows_received("rows", min(done, num_rows), num_rows)
        if failed is not None:
            waiting = [r for r in waiting if first_of[r] < failed[0]]
    if failed is not None:
        raise failed[1]
    summaries.sort(key=lambda x: x["first"])
    if done != num_rows:
        raise AdvcliError(f"--engine ray: the row pass returned {done} rows for an input of {num_rows}")
    all_values = [x["steps"] for x in summaries]
    step_values = np.unique(np.concatenate(all_values)) if all_values else np.zeros(0)
    pieces: list[list] = [[] for _ in range(len(step_values))]
    step_rows = [0] * len(step_values)
    empty = zero = (-1, 0)
    for x in summaries:  # the summaries in row order: the first shard with such a row holds the first one
        if x["empty"][1]:
            empty = (x["empty"][0] if empty[0] < 0 else empty[0], empty[1] + x["empty"][1])
        if x["zero_length"][1]:
            zero = (x["zero_length"][0] if zero[0] < 0 else zero[0], zero[1] + x["zero_length"][1])
        where = np.searchsorted(step_values, x["steps"]).tolist()
        for k, n, ref in zip(where, x["counts"], x["refs"]):
            step_rows[k] += n
            pieces[k].append(ref)
    values = step_values.tolist() if step_col is not None else [None]
    return RowPieces(values, pieces, step_rows, sum(x["valid"] for x in summaries),
                     sum(x["length"] for x in summaries), empty, [x["valid"] for x in summaries], zero)


# ------------------------------------------------------------------------ 2. step by step


class _StepInputs:
    """The slice of :class:`advcli.io.reader.InputSet` that :func:`advcli.pipeline.prepare_run` reads
    when the row pass is given (:func:`not_step_scoped`): the step's row count and the inputs' names."""

    def __init__(self, num_rows: int, paths: list[str]):
        self.num_rows, self.paths = num_rows, paths

    def file_rows(self) -> list[int]:
        """The step's rows as one file's: the driver refused the run's unplaced rows before any step
        (:func:`resolve_steps`), and a step's "row N" is mapped to the input's row by :func:`_resolve_step`."""
        return [self.num_rows]


def unpack_rows(t: pa.Table, empty: tuple) -> tuple[dict, dict, dict]:
    """The row pass's per-row table -> ``row_table_pass``'s (row, components, keys)."""
    tens = lambda name: torch.from_numpy(t.column(name).to_numpy().copy())  # noqa: E731
    return ({k: tens(f"row:{k}") for k in empty[0]}, {k: tens(f"comp:{k}") for k in empty[1]},
            {k: [t.column(f"key:{k}").combine_chunks()] for k in empty[2]})


def global_rows(message: str, rows: np.ndarray) -> str:
    """``message`` (an error raised while one step was resolved alone) with each ``row N`` (N: a row of the
    step's table) named by its row in the input, ``rows[N]``, as the local engine names it; and each
    ``rows A-B`` or ``rows [A, B, ...]`` (a positional block) by its rows in the input, written as the
    local engine writes a block: ``rows a-b`` where they are consecutive there, else the list. The
    resolution reads no file (the row pass did), so every row it names is one of the step's table."""
    import re

    def one(m):
        n = int(m.group(1))
        return f"row {int(rows[n])}" if n < len(rows) else m.group(0)

    def block(m):
        if m.group(1) is not None:
            local = list(range(int(m.group(1)), int(m.group(2)) + 1))
        else:
            local = [int(x) for x in m.group(3).split(",")]
        if not local or max(local) >= len(rows):
            return m.group(0)
        g = [int(rows[n]) for n in local]
        return f"rows {g[0]}-{g[-1]}" if g[-1] - g[0] == len(g) - 1 else f"rows {g}"

    message = re.sub(r"\brows (?:(\d+)-(\d+)|\[([\d, ]+)\])", block, message)
    return re.sub(r"\brow (\d+)\b", one, message)


def _step_plan(plan):
    """The plan every step is resolved with, made once for the run: whitening left to pass 2 (its
    statistics are the run's per scope: :func:`advcli.engines.ray_moments.step_whitening`). The KL
    coefficient a step starts from is not in it: it is the step's run state's controller
    (:func:`_resolve_step`)."""
    run = plan.run
    whitening = dataclasses.replace(run.whitening, whiten=False, batch_normalize=False)
    reward = dataclasses.replace(run.reward, whiten_tokens=False)
    return dataclasses.replace(plan, run=dataclasses.replace(run, whitening=whitening, reward=reward))


@dataclasses.dataclass
class StepIndex:
    """What the write pass's workers get instead of the dump's table: per step, the ref of its lean
    table (``{"res": Prepared, "rows": global rows}``, its scopes coded 0..D-1 inside the step) and its
    first and last global row; ``offsets``: per step, the run's code of its first scope (the scopes of the
    earlier steps), ``step_values``: the run's step value of every scope (S of them: one per step, or
    ROLL's (step, domain) scopes); ``per_scope``: the whitening statistics, [S] float64 each, that every
    batch's table gets (:func:`advcli.engines.ray_moments.step_whitening`)."""

    steps: list[tuple]  # (ref, first row, last row)
    offsets: list[int] = dataclasses.field(default_factory=list)
    step_values: list = dataclasses.field(default_factory=list)
    per_scope: dict = dataclasses.field(default_factory=dict)

    def run_scopes(self, k: int, sub):
        """Step ``k``'s rows ``sub`` (:func:`take_rows` of its table) with the run's scope codes and step
        values: its local scope codes shifted past the earlier steps' scopes, out of the run's S."""
        from ..ops.groups import GroupIndex

        S, off = len(self.step_values), self.offsets[k]
        scopes = GroupIndex(sub.scopes.codes + off, S)
        return dataclasses.replace(sub, scopes=scopes, step_values=self.step_values,
                                   table=dataclasses.replace(sub.table, scopes=scopes))


@dataclasses.dataclass
class Resolved:
    """The per-step driver's result: the workers' index, the refs of the statistics actor's pieces, the
    run's warnings and totals, and what pass 2 and the workers' statistics need: the step value of each
    scope (S), row-level whitening sums per step (over its own scopes, placed at ``index.offsets``), the
    cells of each scope's padded grid (rows × longest row), each read shard's Σ mask (in ``cl.shards``
    order), and the run's state (ROLL's scope domains, the token columns the row pass checked)."""

    index: StepIndex
    observer_pieces: list
    warnings: list[str]
    tokens: int
    valid_tokens: int
    row_sums: list = dataclasses.field(default_factory=list)
    cells: list = dataclasses.field(default_factory=list)
    shard_valid: list = dataclasses.field(default_factory=list)
    state: object = None  # the run's advcli.pipeline.plan.RunState: the scopes' domains, the columns checked

    @property
    def step_values(self) -> list:
        """The run's step value of every scope (the index's)."""
        return self.index.step_values

    def valid_base(self, shards) -> dict:
        """{a shard's first global row: the run's valid tokens before it}: where each shard's rows start
        among the run's valid tokens (the advantage sample's strata, the histogram's seed)."""
        starts = np.concatenate([[0], np.cumsum(np.asarray(self.shard_valid, dtype=np.int64))])
        return {s.first: int(v) for s, v in zip(shards, starts[:-1].tolist())}


def _resolve_step(plan, step_plan, kl, paths: list[str], empty: tuple, chunk_rows: int, *tables: pa.Table) -> dict:
    """A worker task: one step resolved alone (:func:`advcli.pipeline.prepare_run` with ``step_plan`` on its
    rows; ``kl``: a copy of the run's KL controller as the earlier steps left it, the step's run state's) ->
    what the driver keeps: each scope's mean KL and rows (what the driver's controller is stepped with), the
    warnings, the step's first and last global row, its scopes (one, or ROLL's domains in order of first
    appearance in the step: their step values and domain names), and the refs of the workers' lean table
    and the statistics' piece (put here, not returned: see :func:`_shard_rows`)."""
    import ray

    from ..ops.batchnorm import grid_cells
    from ..pipeline import prepare_run
    from ..pipeline.plan import RunState

    t = pa.concat_tables(tables)
    t = t.take(pa.array(np.argsort(t.column(ROW_COL).to_numpy(), kind="stable")))
    rows = t.column(ROW_COL).to_numpy()
    row, comps, keys = unpack_rows(t, empty)
    del t
    state = RunState(kl=kl)
    try:
        res, row, betas, kls, warnings = prepare_run(step_plan, _StepInputs(len(rows), paths), chunk_rows, None,
                                                     row_pass=lambda *a, **k: (row, comps, keys), state=state)
    except AdvcliError as e:  # "row N" of this step's table is the input's row rows[N]
        raise AdvcliError(global_rows(e.message, rows), hint=e.hint) from None
    # the grouping's warnings (slime: steps normalised as one group, blocks that disagree with the ids) are
    # the run's, made by the statistics actor, which groups the whole run again (observer_of_steps)
    warnings = [w for w in warnings if w not in state.group_warnings]
    # the workers' table keeps the step's own scope codes (0..D-1) and group codes: the run's scope codes
    # are known once every step is resolved (StepIndex.run_scopes); cat_rows keeps groups of several steps apart
    small = lean(res)
    num_scopes = res.scopes.num_groups
    piece = {"res": res, "rows": rows, "betas": betas, "kls": kls,
             "row": {k: row[k] for k in ("kl_mean", "keep") if k in row}}
    sums = None
    if plan.whiten and plan.spec.level == "row":  # the step's whitening sums, from its rows (a few numbers)
        from ..pipeline.prepare import row_whitening_sums

        sums = row_whitening_sums(plan, res.scopes, res.adv_row, row)
    scope_rows = torch.bincount(res.scopes.codes, minlength=num_scopes).tolist()
    return {"kl": (kls, scope_rows), "warnings": warnings, "first": int(rows[0]),
            "last": int(rows[-1]), "table": ray.put({"res": small, "rows": rows}),
            "piece": ray.put(piece), "sums": sums,
            "cells": grid_cells(res.table.length, res.scopes.codes, num_scopes).tolist(),
            "scope_steps": list(res.step_values), "domains": state.scope_domains}


def resolve_steps(ray, plan, paths: list[str], rp: RowPieces, empty: tuple, chunk_rows: int, progress=None,
                  watch=None, *, file_rows: list[int]) -> Resolved:
    """:func:`advcli.pipeline.prepare_run` one step at a time, in ascending step value, each on a worker
    (:func:`_resolve_step`), the run's one KL controller (``Resolved.state.kl``: the
    :class:`advcli.ops.kl.KLController` the local engine steps over the same scopes) stepped by the
    driver over each step's scopes in order, each step starting from a copy of it: with the adaptive
    controller, a step starts when the one before it is resolved; with a fixed one, every step at once. The
    driver receives a few numbers per step; each step's tables stay in the object store."""
    from ..io.value_checks import refuse_unplaced_rows
    from ..ops.kl import KLController
    from ..pipeline.plan import RunState

    refuse_unplaced_rows(plan.run.reward, plan.reward_source, paths, file_rows, rp.empty, rp.zero_length)
    S = len(rp.step_values)
    # the run's state, as the driver learns it from the steps (the plan is not changed): its KL controller
    state = RunState(kl=KLController.of(plan))
    carried = state.kl.adaptive
    task = ray.remote(num_cpus=1)(_resolve_step)
    pref, step_pref = ray.put(plan), ray.put(_step_plan(plan))
    launched, kept = [], []
    if watch is not None:
        watch.stage("the per-step resolution")
    for s in range(S):
        launched.append(task.remote(pref, step_pref, dataclasses.replace(state.kl), paths, empty, chunk_rows,
                                    *rp.pieces[s]))
        if carried or s == S - 1:  # wait for what was launched (each step, or all at the end)
            for ref in launched[len(kept):]:
                kept.append(ray.get(ref))
                if watch is not None:
                    watch.tick()
                if progress:
                    progress("statistics", len(kept), S)
                for current, rows in zip(*kept[-1]["kl"]):  # ROLL: one update per (step, domain) scope
                    state.kl.update(current, rows)
    warnings: list[str] = []
    for k in kept:
        warnings += [w for w in k["warnings"] if w not in warnings]
    steps = [(k["table"], k["first"], k["last"]) for k in kept]
    offsets = np.concatenate([[0], np.cumsum([len(k["scope_steps"]) for k in kept])])[:-1].astype(int).tolist()
    scope_steps = [v for k in kept for v in k["scope_steps"]]
    if any(k["domains"] is not None for k in kept):  # ROLL: the run's scope domains, as its grouping names them
        state.scope_domains = [d for k in kept for d in k["domains"]]
    sums = [(k["sums"], off) for k, off in zip(kept, offsets) if k["sums"] is not None]
    return Resolved(StepIndex(steps, offsets, scope_steps), [k["piece"] for k in kept], warnings, rp.length,
                    rp.valid, sums, [c for k in kept for c in k["cells"]], rp.shard_valid, state)


# ------------------------------------------------------------------- 3. workers and statistics


class StepRows:
    """A worker's view of the resolved rows through :class:`StepIndex`: it fetches the step tables whose
    rows overlap the batch (keeping them while the next batches need them) and takes the batch's rows."""

    def __init__(self, index: StepIndex):
        self.index = index
        self.cache: dict[int, dict] = {}

    def take(self, grow: np.ndarray):
        import ray

        a, b = int(grow[0]), int(grow[-1])
        need = [k for k, (_, lo, hi) in enumerate(self.index.steps) if lo <= b and hi >= a]
        for k in [k for k in self.cache if k not in need]:
            del self.cache[k]
        parts = []
        for k in need:
            if k not in self.cache:
                self.cache[k] = ray.get(self.index.steps[k][0])
            rows = self.cache[k]["rows"]
            pos = np.minimum(np.searchsorted(rows, grow), len(rows) - 1)
            hit = rows[pos] == grow
            if hit.any():
                sub = self.index.run_scopes(k, take_rows(self.cache[k]["res"], torch.from_numpy(pos[hit])))
                parts.append((np.flatnonzero(hit), sub))
        sub = parts[0][1] if len(parts) == 1 and len(parts[0][0]) == len(grow) else cat_rows(parts, len(grow))
        return dataclasses.replace(sub, **self.index.per_scope) if self.index.per_scope else sub


def observer_of_steps(plan, piece_refs: list, num_rows: int, by_position: bool, file: str, whitening: dict):
    """The statistics actor's :class:`advcli.pipeline.observe.RunObserver`, assembled in its own process
    from the per-step pieces: per-row values put back in global row order, and the scopes, groups and
    key columns coded over the whole run again from the key columns (as the local engine numbers them:
    group health and the diagnostics' examples read that numbering); ``whitening``: pass 2's per-scope
    statistics and diagnostics (:func:`advcli.engines.ray_moments.step_whitening`)."""
    import ray

    from ..ops.batch import RowTable
    from ..pipeline.observe import RunObserver
    from ..pipeline.plan import RunState
    from ..pipeline.rows import Prepared, row_inputs, scopes_and_groups

    pieces = [ray.get(r) for r in piece_refs]
    at = torch.from_numpy(np.concatenate([p["rows"] for p in pieces]))
    order = pa.array(np.argsort(at.numpy(), kind="stable"))

    def scatter(xs):
        if any(x is None for x in xs):
            return None
        x = torch.cat(xs)
        out = torch.empty_like(x)
        out[at] = x
        return out

    first = pieces[0]["res"]
    keys = {c: [pa.concat_arrays([a for p in pieces for a in p["res"].row_keys[c]]).take(order)]
            for c in first.row_keys}
    state = RunState()  # the run's grouping (its warnings: the statistics actor's stats_settings)
    scopes, groups, step_values = scopes_and_groups(plan, keys, num_rows, file, state)
    tables = [p["res"].table for p in pieces]
    columns = {k: scatter([t.columns[k] for t in tables]) for k in first.table.columns}
    key_cols, labels = row_inputs(plan, keys, num_rows)
    columns.update(key_cols)
    table = RowTable(score=scatter([t.score for t in tables]), valid_len=scatter([t.valid_len for t in tables]),
                     length=scatter([t.length for t in tables]), scopes=scopes, groups=groups, columns=columns,
                     labels=labels)
    per = lambda name: scatter([getattr(p["res"], name) for p in pieces])  # noqa: E731
    res = Prepared(scopes, groups, step_values, per("beta_row"), per("reward_row"), per("adv_row"), table,
                   state=state)
    res.raw_score, res.row_keys, res.kl_deferred = per("raw_score"), keys, first.kl_deferred
    res.norm_checks = []
    for k, v in whitening.items():
        setattr(res, k, v)
    row = {k: scatter([p["row"][k] for p in pieces]) for k in pieces[0]["row"]}
    betas = [b for p in pieces for b in p["betas"]]
    kls = [k for p in pieces for k in p["kls"]]
    return RunObserver(plan, res, row, betas, kls, by_position=by_position)
