
"""``advcli run --engine ray``: the canonical pipeline on a Ray cluster, with Ray Data.

The passes are those of the local engine (:mod:`advcli.pipeline`), placed where they scale:

1. **driver**: the row pass over the small columns (group id, step, rewards, Σ mask, Σ KL),
   ``scopes_and_groups``, ``kl_coefs``, reward normalisation, the row-level estimator — all of
   :func:`advcli.pipeline.prepare_run`. This is a few tens of bytes per row; the token columns a row
   feature needs (mask, log-probs for Σ KL) are read here too, reduced per row.
   verl's rollout correction, when on, is a statistics pass on the workers
   (:mod:`advcli.engines.ray_correction_pass`).
2. **workers** (only where configured): per-scope moments of token-level advantages or token
   rewards for whitening, one ``map_batches`` pass over the token columns; the driver merges the
   batches' exact sums (:mod:`advcli.engines.ray_moments`).
3. **workers**: ``map_batches(_Worker, batch_format="pyarrow")`` (an actor class, one GPU each when
   the cluster has GPUs) over advcli's read shards, applying the same per-chunk math
   (:func:`advcli.pipeline.chunk_math`) to each batch → :func:`advcli.engines.ray_output.ordered_sink`;
   each batch's partial run statistics (not its tokens) go to one small actor that merges them in row
   order (:mod:`advcli.engines.ray_stats`, after a seed pass over the first rows that fixes the
   advantage histogram's edges when the run is token-level and large).

**Shards**: advcli plans the reads (:mod:`advcli.engines.ray_shards`): each shard is rows
``[start, stop)`` of one input file, with the global index of its first row; Ray Data carries only
these descriptions (``from_items``) and each worker reads its shard's rows with pyarrow. Every batch
therefore knows its file, its rows in that file and their global rows, whatever Ray does with blocks.
The resolved per-row table is broadcast once with ``ray.put`` and indexed by those global rows; with
the row pass on the workers, a run that allows it is resolved one step at a time and the workers fetch
the tables of the steps their batch overlaps (:mod:`advcli.engines.ray_steps`), so that the driver
holds no per-row table.

**Output**: a directory (``--output DIR``) of Parquet files ``part-<first global row:012d>.parquet``,
so that file name order is input row order (global over all input files), each file's rows in
order. Ray Data keeps batches in input order (``DataContext.execution_options.preserve_order``);
the writer (:func:`advcli.engines.ray_output.ordered_sink`) does not rely on it: every row carries its
global index to the writer, which sorts within a file and checks that the files tile rows 0..R-1
exactly. Reading the directory (pyarrow.dataset, pandas, ``ray.data.read_parquet``,
:func:`advcli.engines.ray_output.read_output`) gives the local engine's rows, columns, values and
schema metadata. It is written to a temporary directory beside it and renamed into place when complete.

**Losing a node**: Ray restarts the map actors and retries the tasks; where the nodes left cannot
run the rest, :mod:`advcli.engines.ray_faults` stops the run after a stall timeout with one line
naming the node (and the temporary output is removed).
"""


from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import tempfile
import time
import types
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ..errors import AdvcliError
from ..io.commit import put_in_place, shielded
from ..io.reader import InputSet
from ..ops.ragged import Ragged
from ..ops.whiten import MomentSums
from ..pipeline import (
    ChunkReader,
    ProgressFn,
    RunResult,
    chunk_math,
    output_batch,
    output_schema,
    prepare_run,
    roles_to_columns,
)
from ..pipeline.observe import RunObserver
from ..pipeline.output import SIDECAR_ROW
from ..pipeline.plan import RunState, open_and_plan
from ..pipeline.rows import kl_rows, row_table_pass
from ..pipeline.run import finish_result, wants_positions
from .ray_moments import gather_moments, moments_batch, step_whitening
from .ray_output import (
    check_output_dir,
    check_output_prefix,
    delete_prefix,
    ordered_sink,
    publish_prefix,
    replace_dir,
    tmp_dir,
    tmp_prefix,
)
from .ray_rows import ROW_COL, lean, take_rows
from .ray_shards import Shard, plan_shards, read_shard, shard_target
from .ray_stats import StatsSink, histogram_edges, seed_values, shard_valid_of
from .ray_steps import StepRows, not_step_scoped, observer_of_steps, unpack_rows

if TYPE_CHECKING:
    from ..flavors import FlavorAt

INSTALL_HINT = "pip install 'advcli[ray]'   (or: pip install 'ray[data]>=2.60' aiohttp)"


def import_ray():
    """``ray`` with Ray Data, or an AdvcliError saying how to get it."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise AdvcliError("--engine ray needs Ray Data, which is not installed in this environment",
                          hint=INSTALL_HINT) from None
    import importlib.util

    if importlib.util.find_spec("fsspec") and not importlib.util.find_spec("aiohttp"):
        # torch brings fsspec; Ray Data's path resolution imports fsspec.implementations.http from
        # several threads, and without aiohttp one of them can fail with an ImportError mid-read
        raise AdvcliError("--engine ray needs aiohttp next to fsspec (Ray Data's file listing imports fsspec's "
                          "http module, which fails intermittently without it)", hint=INSTALL_HINT)
    return ray




@dataclasses.dataclass(frozen=True)
class _ReadSpec:
    """What a worker needs to read its shards: the input paths (inside ``filesystem`` for object storage,
    else absolute), the columns (None: all) and the batch size."""

    paths: list[str]
    filesystem: object
    columns: list[str] | None
    chunk_rows: int


# -------------------------------------------------------------------------------------- workers


class _Worker:
    """One Ray Data actor: reads the shards it is given (:mod:`advcli.engines.ray_shards`) and applies the
    per-chunk math to each batch of their rows, whose global rows it knows from the shard."""

    def __init__(self, payload):
        import ray

        if isinstance(payload, ray.ObjectRef):
            payload = ray.get(payload)
        self.plan = dataclasses.replace(payload["plan"], device_name=payload["device"])
        self.res = payload["res"]  # the resolved table of every row, or None with the per-step index:
        self.steps = StepRows(payload["steps"]) if payload.get("steps") is not None else None
        self.read: _ReadSpec = payload["read"]
        self.mode = payload["mode"]  # "write", "moments:rewards", "moments:advantages", "rows", "correction"
        self.base_fields = payload.get("base_fields")
        self.out_schema = payload.get("out_schema")
        self.observer = payload.get("observer")  # the statistics actor (advcli.engines.ray_stats.StatsSink)
        self.stats = payload.get("stats")  # {"settings": RunObserver.partial_settings(), "edges": ...}
        self.maker = None
        self.row_kl = payload.get("row_kl", True)
        self.names = payload.get("names") or self.read.paths  # the inputs as the user named them (messages)
        self.vbase = payload.get("vbase")  # per-step driver: {shard's first row: valid tokens before it}
        self.vnext = 0  # the run's valid tokens before this batch (with vbase)
        # the token columns a pass before this one checked (the driver's RunState): not checked again
        self.reader = ChunkReader(self.plan, None, RunState(checked_roles=set(payload.get("checked") or ())))

    def __call__(self, items: pa.Table):
        try:
            for item in items.to_pylist():
                shard = Shard.of_item(item)
                rd = self.read
                self.vnext = self.vbase.get(shard.first, 0) if self.vbase else 0
                for off, batch in read_shard(rd.paths[shard.file], shard, rd.columns, rd.chunk_rows, rd.filesystem,
                                             self.names[shard.file]):
                    yield self._call(batch, shard.file, off, shard.first + (off - shard.start))
        except AdvcliError as e:  # Ray Data re-wraps and drops __cause__: carry it in the message
            raise RuntimeError(_ERR_MARK + json.dumps(["advcli", e.message, e.hint]) + _ERR_MARK) from None
        except Exception as e:  # an advcli bug: one line on the driver, the traceback in the worker's log
            import traceback

            where = traceback.extract_tb(e.__traceback__)[-1]
            msg = f"{type(e).__name__}: {e} (in a Ray worker, {os.path.basename(where.filename)}:{where.lineno})"
            raise RuntimeError(_ERR_MARK + json.dumps(["internal", msg, None]) + _ERR_MARK) from e

    def _maker(self):
        if self.maker is None:
            from ..pipeline.observe import PartialMaker

            # (with the per-step index, no run-wide Σ mask: the batch's place among the valid tokens from vbase)
            valid = self.res.table.valid_len if self.res is not None else np.zeros(0, dtype=np.int64)
            self.maker = PartialMaker(self.plan, self.stats["settings"], valid, edges=self.stats.get("edges"))
        return self.maker

    def _call(self, batch: pa.RecordBatch, fi: int, off0: int, first: int) -> pa.Table:
        """The mode's result on one batch: rows ``off0..`` of input file ``fi``, global rows ``first..``."""
        plan = self.plan
        grow = np.arange(first, first + batch.num_rows, dtype=np.int64)
        file = self.names[fi]
        if self.mode == "rows":  # pass 1 on this batch: advcli.pipeline.row_table_pass itself
            one = _OneBatch(self.read.paths, fi, off0, batch)
            row, comps, keys = row_table_pass(plan, one, max(batch.num_rows, 1), None, row_kl=self.row_kl)
            cols = {ROW_COL: pa.array(grow, type=pa.int64())}
            cols.update({f"row:{k}": pa.array(v.numpy()) for k, v in row.items()})
            cols.update({f"comp:{k}": pa.array(v.numpy()) for k, v in comps.items()})
            cols.update({f"key:{k}": pa.chunked_array(v).combine_chunks() if v else pa.array([])
                         for k, v in keys.items()})
            return pa.table(cols)
        if self.mode == "correction":  # the rollout correction's statistics (advcli.engines.ray_correction_pass)
            from .ray_correction_pass import correction_batch

            cols = correction_batch(plan, self.reader, batch, file, off0, len(grow))
            return pa.table({ROW_COL: pa.array(grow, type=pa.int64()), **cols})
        offsets, tok = self.reader.tokens(batch, file, off0, plan.token_roles)
        if self.steps is None:
            sub = take_rows(self.res, torch.from_numpy(grow))
        else:  # the tables of the steps that hold these rows
            sub = self.steps.take(grow)
        layout = Ragged(torch.from_numpy(offsets))
        if self.mode.startswith("moments"):  # per-scope whitening sums (advcli.engines.ray_moments)
            return moments_batch(plan, sub, layout, tok, grow, rewards=self.mode == "moments:rewards")
        vbase, vfirst = None, None  # each row's first valid token among the run's (per-step; else the maker's)
        if self.vbase is not None:
            valid = sub.table.valid_len.numpy().astype(np.int64)
            vfirst, vbase = self.vnext, self.vnext + np.cumsum(valid) - valid
            self.vnext += int(valid.sum())
        extras = {} if sub.correction is not None else None
        adv, ret, tlr, mask = chunk_math(plan, sub, layout, tok, 0, apply_whiten=True, extras=extras)
        extra = ({"rollout_is_weights": extras.get("rollout_is_weights"),
                  "response_mask_after_rs": mask if sub.correction.spec.corrects_mask
                  else extras["response_mask_after_rs"]}
                 if sub.correction is not None else None)  # as the local engine's write pass
        if self.mode == "seed":  # the run's first finite valid advantages (histogram_edges)
            vfirst = vfirst if vfirst is not None else int(self._maker().vstart[first])
            return seed_values(first, vfirst, self.stats["seed_tokens"], mask, adv)
        if self.observer is not None:  # this chunk's partial statistics, not its tokens
            import ray

            p = self._maker().partials(first, layout, mask, adv, ret, tlr, tok, vbase=vbase,
                                       kl_rows=kl_rows(sub.table, 0, len(grow)))
            ray.get(self.observer.add.remote(first, len(grow), p))
        rb = output_batch(plan, batch, self.base_fields, self.out_schema, adv, ret, tlr, offsets, 0, extra)
        t = pa.Table.from_batches([rb], schema=self.out_schema)
        if self.out_schema.names[0] == SIDECAR_ROW:  # each row's position in its own input file
            t = t.set_column(0, self.out_schema.field(0), pa.array(np.arange(off0, off0 + len(grow)), type=pa.int64()))
        return t.append_column(ROW_COL, pa.array(grow, type=pa.int64()))


# --------------------------------------------------------------------------------------- engine
@dataclasses.dataclass
class _Cluster:
    ray: object
    device: str  # worker device
    num_gpus: float
    concurrency: int
    chunk_rows: int
    override_num_blocks: int | None
    filesystem: object = None  # the inputs' pyarrow filesystem when they are object-storage URIs
    paths: list[str] = dataclasses.field(default_factory=list)  # the inputs, as the workers open them
    shards: list[Shard] = dataclasses.field(default_factory=list)  # advcli's read plan (ray_shards)
_ERR_MARK = "<<advcli-error>>"
def _unwrap(e: BaseException) -> BaseException:
    """The AdvcliError a worker or the driver raised, wherever Ray wrapped it; else ``e``."""
    seen = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, AdvcliError):  # Ray's RayTaskError(AdvcliError) of a task: the task's own error
            cause = getattr(x, "cause", None)
            return cause if isinstance(cause, AdvcliError) else x
        text = str(x)
        if _ERR_MARK in text:
            kind, message, hint = json.loads(text.split(_ERR_MARK)[1])
            return AdvcliError(message, hint=hint) if kind == "advcli" else RuntimeError(message)
        stack += [getattr(x, "cause", None), x.__cause__, x.__context__]
    return e


def _map(cl: _Cluster, columns: list[str] | None, payload: dict):
    """The workers' pass ``payload["mode"]`` over every shard, reading ``columns`` (None: all): one shard per
    call, each call yielding one result table per batch of the shard's rows."""
    ray = cl.ray
    payload = dict(payload, read=_ReadSpec(cl.paths, cl.filesystem,
                                           None if columns is None else list(dict.fromkeys(columns)), cl.chunk_rows))
    items = [s.as_item() for s in cl.shards]
    ds = ray.data.from_items(items, override_num_blocks=max(len(items), 1))
    kw = {"num_gpus": 1} if cl.num_gpus else {"num_cpus": 1}
    return ds.map_batches(_Worker, fn_constructor_args=(ray.put(payload),), batch_format="pyarrow",
                          batch_size=1, compute=ray.data.ActorPoolStrategy(size=cl.concurrency), **kw)


def _moments_fn(cl: _Cluster, watch=None):
    """``token_moments`` for :func:`advcli.pipeline.prepare_run`, run on the workers and merged exactly
    (:mod:`advcli.engines.ray_moments`; each part received is progress for the ``watch``)."""
    def token_moments(plan, inputs, res, chunk_rows, progress, rewards: bool) -> MomentSums:
        payload = {"plan": plan, "res": lean(res), "names": inputs.paths, "checked": set(res.state.checked_roles),
                   "device": cl.device, "mode": "moments:rewards" if rewards else "moments:advantages"}
        sums = gather_moments(_map(cl, list(roles_to_columns(plan, plan.token_roles)), payload),
                              res.scopes.num_groups, watch)
        if progress:
            progress("statistics", inputs.num_rows, inputs.num_rows)
        return sums
    return token_moments


def gather_rows(ds, R: int, stage: str, watch=None, progress_key: str | None = None) -> pa.Table:
    """The per-row results of a pass on the workers (one output row per input row, with its global
    row in ``ROW_COL``), in global row order; each batch received is progress for the ``watch`` (and,
    with ``progress_key``, the rows so far are reported to the run's progress callback under that
    stage, as the local engine reports the pass). Every row 0..R-1 exactly once, or an error naming the pass."""
    if watch is not None:
        watch.stage(stage)
    got, done = [], 0
    for b in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        got.append(b)
        done += b.num_rows
        if watch is not None:
            watch.rows_received(progress_key, min(done, R), R)
    t = pa.concat_tables(got)
    rows = t.column(ROW_COL).to_numpy()
    order = np.argsort(rows, kind="stable")
    if len(rows) != R or not np.array_equal(rows[order], np.arange(R)):
        raise AdvcliError(f"--engine ray: {stage} returned {len(rows)} rows for an input of {R}")
    return t.take(pa.array(order))


def rows_on_workers_fn(cl: _Cluster, watch=None):
    """``rows_on_workers(payload, columns, inputs, stage)``: a per-row pass on the workers (the payload's
    ``mode`` over ``columns`` of every batch, each row located in ``inputs``), gathered in global row
    order (:func:`gather_rows`). Handed to the passes that live in their own modules
    (:func:`advcli.engines.ray_correction_pass.correction_fn`), so that they need not import this engine."""
    def rows_on_workers(payload: dict, columns: list[str], inputs: InputSet, stage: str,
                        progress_key: str | None = None) -> pa.Table:
        ds = _map(cl, columns, payload)
        return gather_rows(ds, inputs.num_rows, stage, watch, progress_key)
    return rows_on_workers


class _OneBatch:
    """The slice of :class:`advcli.io.reader.InputSet` that ``row_table_pass`` uses, over one batch."""

    def __init__(self, paths: list[str], file_index: int, row_base: int, batch: pa.RecordBatch | None):
        self.paths, self.fi, self.row_base, self.batch = paths, file_index, row_base, batch
        self.num_rows = 0 if batch is None else batch.num_rows
        self.columns: list[str] | None = None

    def iter_batches(self, columns: list[str], batch_rows: int):
        self.columns = list(columns)
        if self.batch is not None and self.batch.num_rows:
            yield self.fi, self.row_base, self.batch.select(self.columns)


def _row_pass_fn(cl: _Cluster, watch=None):
    """``row_pass`` for :func:`advcli.pipeline.prepare_run` on the workers: each batch runs
    ``row_table_pass`` itself; the driver puts the per-row results in global row order."""
    def row_pass(plan, inputs, chunk_rows, progress, row_kl: bool = True, state: RunState | None = None):
        probe = _OneBatch(cl.paths, 0, 0, None)  # the columns row_table_pass reads (and its empty result)
        probed = RunState()  # the roles it checks: the run's state gets them once the workers have checked them
        empty = row_table_pass(plan, probe, chunk_rows, None, row_kl=row_kl, state=probed)
        R = inputs.num_rows
        if R == 0:
            return empty
        payload = {"plan": plan, "res": None, "names": inputs.paths, "device": "cpu", "mode": "rows",
                   "row_kl": row_kl}
        ds = _map(cl, probe.columns, payload)
        row, comps, keys = unpack_rows(gather_rows(ds, R, "the row pass", watch, "rows"), empty)
        if state is not None:
            state.checked_roles |= probed.checked_roles
        if progress:
            progress("rows", R, R)
        return row, comps, keys
    return row_pass


def _rows_of_shard(payload, item: dict) -> pa.Table:
    """Pass 1 on one read shard, in a Ray task (:func:`advcli.engines.ray_steps.row_pass_pieces`)."""
    return pa.concat_tables(list(_Worker(payload)(pa.Table.from_pylist([item]))))


def _resolve_by_step(cl: _Cluster, plan, inputs, chunk_rows: int, progress, watch):
    """Passes 1-2 with the per-step driver (:mod:`advcli.engines.ray_steps`): the row pass's results stay
    on the workers, the driver resolves one step at a time."""
    from .ray_steps import resolve_steps, row_pass_pieces, step_column

    probe = _OneBatch(cl.paths, 0, 0, None)  # the columns row_table_pass reads (and its empty result)
    probed = RunState()  # the roles it checks: the run's state gets them once the workers have checked them
    empty = row_table_pass(plan, probe, chunk_rows, None, state=probed)
    payload = {"plan": plan, "res": None, "names": inputs.paths, "device": "cpu", "mode": "rows", "row_kl": True,
               "read": _ReadSpec(cl.paths, cl.filesystem, list(dict.fromkeys(probe.columns)), cl.chunk_rows)}
    pieces = row_pass_pieces(cl.ray, cl.shards, _rows_of_shard, payload, step_column(plan), inputs.num_rows, watch)
    if progress:
        progress("rows", inputs.num_rows, inputs.num_rows)
    resolved = resolve_steps(cl.ray, plan, inputs.paths, pieces, empty, chunk_rows, progress, watch,
                             file_rows=inputs.file_rows())
    resolved.state.checked_roles |= probed.checked_roles
    return resolved


def _start(ray, address: str | None, device: str, chunk_rows: int, override_num_blocks: int | None,
           quiet: bool) -> tuple[_Cluster, bool]:
    started = False
    if not ray.is_initialized():
        local = address is None and not os.environ.get("RAY_ADDRESS")  # a new instance, not a `ray start` one
        kw = {"include_dashboard": False, "address": "local"} if local else {"address": address}
        # Ray's "Token authentication is enabled" notice: nothing for the user to do on the instance advcli
        # starts and stops itself, nor under --quiet; kept for a cluster the user runs
        auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level = auth_log.level
        if local or quiet:
            auth_log.setLevel(logging.ERROR)
        try:
            ray.init(logging_level=logging.WARNING, log_to_driver=not quiet, **kw)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise AdvcliError(f"--ray-address {address}: cannot connect to a Ray cluster ({str(e).splitlines()[0]})",
                              hint="start one with `ray start --head`, or leave --ray-address out for a local "
                                   "instance") from None
        finally:
            auth_log.setLevel(level)
        started = True
    res = ray.cluster_resources()
    gpus, cpus = float(res.get("GPU", 0)), float(res.get("CPU", 1))
    if device == "cuda" and gpus < 1:
        raise AdvcliError("--device cuda: the Ray cluster has no GPU", hint="use --device auto or cpu")
    if device not in ("auto", "cpu", "cuda"):
        raise AdvcliError(f"--device {device!r}: expected auto, cpu or cuda")
    use_gpu = gpus >= 1 and device != "cpu"
    # CPU workers leave one CPU to the read and write tasks
    conc = int(gpus) if use_gpu else max(1, int(cpus) - 1)
    return _Cluster(ray, "cuda" if use_gpu else "cpu", 1 if use_gpu else 0, conc, chunk_rows,
                    override_num_blocks), started


def run_ray(input_specs: list[str], output: str | None, cfg: dict, *, flavor: FlavorAt | str = "advcli",
            native: dict | None = None, column_overrides: dict[str, str] | None = None, chunk_rows: int = 4096,
            device: str = "auto", force: bool = False, progress: ProgressFn | None = None,
            address: str | None = None, override_num_blocks: int | None = None,
            rows_per_file: int | None = None, row_pass: str = "auto",
            write_columns: list[str] | str | None = None, output_mode: str = "full",
            stall_timeout: float | None = None, by_position: bool = False) -> RunResult:
    """:func:`advcli.pipeline.run_pipeline` on Ray (same arguments, plus the cluster ``address``;
    ``override_num_blocks``: the least number of read shards advcli plans (default: 4 per worker);
    ``rows_per_file``, default 16 chunks, is the
    least number of rows Ray gathers into one output file; ``row_pass``: where pass 1 reads the small
    columns and the mask, ``driver``, ``workers`` or ``auto`` = workers on a cluster of several nodes).
    ``output`` is a directory; ``output_mode`` ``sidecar`` writes the local engine's sidecar columns
    (``row_index`` = the row's position in its own input file) in the same part files.
    ``stall_timeout``: seconds without progress after a node was lost before the run is aborted
    (:mod:`advcli.engines.ray_faults`; default ``$ADVCLI_RAY_STALL_TIMEOUT``, else 300)."""
    from .ray_correction_pass import correction_fn
    from .ray_faults import NodeWatch
    from .ray_faults import stall_timeout as _stall_timeout

    ray = import_ray()
    stall = _stall_timeout(stall_timeout)
    t0 = time.perf_counter()
    if output is None:
        raise AdvcliError("--engine ray writes its result: give --output DIR")
    inputs, plan = open_and_plan(input_specs, cfg, column_overrides, "cpu" if device == "cpu" else "auto",
                                 chunk_rows, output_mode, write_columns)
    if ROW_COL in inputs.schema.names:
        raise AdvcliError(f"{inputs.paths[0]}: has a column named {ROW_COL!r}, which --engine ray uses itself",
                          hint="rename that column, or use --engine local")
    from ..io import remote

    uris = [remote.is_uri(p) for p in inputs.paths]
    in_fs, paths = None, [os.path.abspath(p) for p in inputs.paths]
    if any(uris):  # object storage: one store for every input (Ray Data reads with one filesystem)
        stores = [remote.filesystem_of(p)[0] for p in inputs.paths] if all(uris) else []
        if not stores or any(f is not stores[0] for f in stores):
            raise AdvcliError("--engine ray reads its inputs from one place: all local paths, or all URIs of one "
                              "bucket", hint="run these inputs with the local engine, or copy them to one bucket")
        in_fs, paths = stores[0], [remote.filesystem_of(p)[1] for p in inputs.paths]
    out_fs = None
    if remote.is_uri(output):
        check_output_prefix(output, inputs.paths, force)
        out_fs, out_key = remote.filesystem_of(output.rstrip("/"))
        tmp = tmp_prefix(output)
    else:
        check_output_dir(output, inputs.paths, force)
        tmp = tmp_dir(output)
    chunk_rows = chunk_rows or max(inputs.num_rows, 1)
    rows_per_file = rows_per_file or 16 * chunk_rows

    # the workers read batches of about CHUNK_TOKENS tokens, however long the responses (the shards and the
    # output files are still sized by rows)
    read_rows = inputs.chunk_rows(chunk_rows, [plan.cmap["response_mask"]])
    cl, started = _start(ray, address, device, read_rows, override_num_blocks, quiet=progress is None)
    from ..estimators.user import ship_file_functions

    ship_file_functions(ray.cloudpickle)  # --estimator ./file.py:fn: its function, not a module name
    cl.filesystem, cl.paths = in_fs, paths
    row_groups = [[md.row_group(i).num_rows for i in range(md.num_row_groups)] for md in inputs.metadata]
    cl.shards = plan_shards(row_groups, shard_target(inputs.num_rows, cl.concurrency, chunk_rows,
                                                     override_num_blocks))
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = progress is not None
    data_log = logging.getLogger("ray.data")
    saved_level = data_log.level
    if progress is None:
        data_log.setLevel(logging.CRITICAL)  # a worker's AdvcliError is re-raised here as one message
    watch = NodeWatch(ray, stall, progress)
    try:
        try:
            watch.__enter__()
            # passes 1-2: driver row table; token moments on the workers
            if row_pass not in ("auto", "driver", "workers"):
                raise AdvcliError(f"row_pass {row_pass!r}: expected auto, driver or workers")
            if row_pass == "auto":  # ADVCLI_RAY_ROW_PASS: the choice from the command line's environment
                row_pass = os.environ.get("ADVCLI_RAY_ROW_PASS") or (
                    "workers" if sum(1 for n in ray.nodes() if n.get("Alive")) > 1 else "driver")
                if row_pass not in ("driver", "workers"):
                    raise AdvcliError(f"ADVCLI_RAY_ROW_PASS={row_pass}: expected driver or workers")
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            stats_actor = ray.remote(num_cpus=0, scheduling_strategy=here)(StatsSink)
            token_cols = list(roles_to_columns(plan, plan.token_roles))
            plan_cpu, by_pos = dataclasses.replace(plan, device_name="cpu"), wants_positions(plan, by_position)
            res = None
            if row_pass == "workers" and inputs.num_rows and not_step_scoped(plan) is None:  # per-step driver
                steps = _resolve_by_step(cl, plan, inputs, chunk_rows, progress, watch)
                warnings, tokens, valid_tokens = steps.warnings, steps.tokens, steps.valid_tokens
                state = steps.state

                def moments_pass(mode, index):  # pass 2 on the workers, reading the resolved steps
                    run = {"plan": plan, "res": None, "steps": index, "names": inputs.paths, "device": cl.device,
                           "mode": mode, "checked": set(state.checked_roles)}
                    return gather_moments(_map(cl, token_cols, run), len(steps.step_values), watch)
                whitening = step_whitening(plan, steps, moments_pass)
                sink = stats_actor.remote(functools.partial(observer_of_steps, plan_cpu, steps.observer_pieces,
                                                            inputs.num_rows, by_pos, inputs.paths[0], whitening),
                                          inputs.num_rows)
                stats = ray.get(sink.stats_settings.remote())  # the actor assembles its observer first
                warnings = stats.pop("group_warnings") + warnings  # first, as prepare_run lists them
                rows_payload = {"res": None, "steps": steps.index, "vbase": steps.valid_base(cl.shards)}
                shard_valid = steps.shard_valid
                del steps
            else:  # the whole dump's table on the driver, broadcast
                res, row, betas, kls, warnings = prepare_run(
                    plan, inputs, chunk_rows, progress, token_moments=_moments_fn(cl, watch),
                    row_pass=_row_pass_fn(cl, watch) if row_pass == "workers" else None,
                    correction=correction_fn(rows_on_workers_fn(cl, watch)))
                tokens, valid_tokens, state = int(row["length"].sum()), int(row["valid"].sum()), res.state
                observer = RunObserver(plan_cpu, res, row, betas, kls, by_position=by_pos)
                stats = {"settings": observer.partial_settings(), "edges": None,
                         "seed_tokens": observer.figures.adv_hist.seed_tokens, "bins": observer.figures.bins}
                rows_payload = {"res": lean(res)}
                shard_valid = shard_valid_of(cl.shards, res.table.valid_len)
            # pass 3: compute and write
            base_fields, out_schema = output_schema(plan, inputs, flavor, native, output_mode)
            if not stats["settings"]["row_path"]:  # the advantage histogram's edges, before the workers count
                watch.stage("the histogram seed pass")
                seed = {"plan": plan, **rows_payload, "names": inputs.paths, "device": cl.device, "mode": "seed",
                        "stats": stats, "checked": set(state.checked_roles)}
                stats["edges"] = histogram_edges(cl, lambda c: _map(c, token_cols, seed), shard_valid,
                                                 stats["seed_tokens"], stats["bins"], tick=watch.tick)
                if stats["edges"] is not None and res is None:  # the statistics actor's histogram
                    ray.get(sink.fix_edges.remote(stats["edges"]))
                elif stats["edges"] is not None:  # the observer the actor will get
                    observer.figures.adv_hist.fix_edges(stats["edges"])
            if res is not None:
                sink = stats_actor.remote(observer, inputs.num_rows)
                del observer
            watch.stage("the compute-and-write pass")
            watch.follow_sink(sink, inputs.num_rows)
            payload = {"plan": plan, **rows_payload, "names": inputs.paths, "device": cl.device, "mode": "write",
                       "base_fields": base_fields, "out_schema": out_schema, "observer": sink, "stats": stats,
                       "checked": set(state.checked_roles)}
            cols = None if output_mode == "full" else (  # sidecar: read only what the math and the keys need
                token_cols + [f.name for f in base_fields])
            ds = _map(cl, cols, payload)
            if out_fs is None:
                shutil.rmtree(tmp, ignore_errors=True)
                os.makedirs(tmp)
            else:
                delete_prefix(out_fs, tmp)
            ds.write_datasink(ordered_sink(tmp, out_schema, inputs.num_rows, rows_per_file, upload_fs=out_fs))
            if inputs.num_rows == 0:  # no rows: one empty file keeps the schema
                with tempfile.TemporaryDirectory() as d:
                    empty = os.path.join(d if out_fs is not None else tmp, f"part-{0:012d}.parquet")
                    pq.write_table(out_schema.empty_table(), empty)
                    if out_fs is not None:
                        remote.put_file(out_fs, empty, f"{tmp}/part-{0:012d}.parquet")
            figures = ray.get(sink.finish.remote())
            watch.__exit__(None, None, None)  # nothing left to wait on: publishing is not aborted
            if out_fs is not None:  # now, or as the command's last step (advcli.io.commit.staged)
                # staged as a URI: what a response-level run rewrites before the publish
                put_in_place(output, remote.uri_in_store_of(output, tmp),
                             publish=functools.partial(publish_prefix, out_fs, tmp, out_key),
                             remove=functools.partial(delete_prefix, out_fs, tmp))
            else:  # in this try: a signal before the directory is handed over is cleaned up below
                replace_dir(tmp, output)
        except BaseException as e:  # noqa: BLE001 - Ray wraps the workers' errors; the watch's abort
            # the clean-up runs to its end whatever signal comes meanwhile (advcli.io.commit.shielded): a second
            # Ctrl-C or a repeated SIGTERM raised inside the removal of the part files left the directory behind
            with shielded(redeliver=not isinstance(e, KeyboardInterrupt)):
                watch.__exit__(None, None, None)
                if out_fs is None:
                    shutil.rmtree(tmp, ignore_errors=True)
                else:
                    delete_prefix(out_fs, tmp)
            err = _unwrap(e)
            if isinstance(err, AdvcliError):
                raise err from None
            lost = watch.error(e)  # a node left the cluster: say which, not Ray's traceback
            if lost is not None:
                raise lost from None
            if err is e:
                raise
            raise err from None
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
        data_log.setLevel(saved_level)
        if started:
            ray.shutdown()
    R = inputs.num_rows
    from ..config.runspec import recorded_config

    result = RunResult(inputs=inputs.paths, outputs=[output], rows=R, tokens=tokens, valid_tokens=valid_tokens,
                       seconds=0.0, config=recorded_config(plan.run, plan.params), warnings=warnings)  # the file's
    result.metrics, result.per_step = figures["metrics"], figures["per_step"]
    result.histograms, result.group_health = figures["histograms"], figures["group_health"]
    result.diagnostics, result.by_position = figures["diagnostics"], figures["by_position"]
    result.warnings.extend(figures["warnings"])
    why = (f"--device {device}" if device != "auto" else
           "--device auto: the cluster has a GPU" if cl.device == "cuda" else "--device auto: no GPU in the cluster")
    result.device = f"{cl.device} on the Ray workers ({why})"  # as the local engine's plan.device_why says it
    return finish_result(result, plan, res or types.SimpleNamespace(correction=None), t0, state)  # as run_pipeline
