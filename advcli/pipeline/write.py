"""Pass 3, the write pass: every chunk's math, statistics and output batch, with reading,
computing, statistics and writing overlapped on their own threads.
"""
from __future__ import annotations

import os
import sys

import pyarrow as pa
import torch

from ..errors import AdvcliError, disk_full, is_disk_full
from ..io import remote
from ..io.commit import shielded
from ..io.memory import trim as trim_heap
from ..io.ordered import OrderedWorker
from ..io.reader import prefetched
from ..io.splice import SplicedParquetWriter, spliceable
from ..io.writer import AtomicParquetWriter, clean_stale_temps
from ..ops.kl import row_kl_sums
from ..ops.ragged import Ragged
from .observe import RunObserver
from .output import output_batch, output_schema
from .plan import Plan
from .read import TRIM_EVERY, ChunkReader, roles_to_columns, to_device, to_host_async
from .rows import Prepared, kl_coefs
from .tokens import chunk_final, chunk_math

SPLICE = True  # full output by splicing the new columns into a copy of the input (tests turn it off)
# chunks whose token columns are decoded and checked ahead of the math, on their own thread (0: on the math's
# thread; tests compare the two, benchmarks/pipelining.py times them)
DECODE_AHEAD = 2
# the output's row groups encoded and written on the writer's own thread while the math runs the next chunks
# (False: on the math's thread; tests compare the bytes and the errors, benchmarks/pipelining.py times them)
WRITE_THREAD = True


def few_row_groups(md) -> bool:
    """Whether an input's row groups are few enough to splice: the splice reads and rewrites the footer
    in Python, some milliseconds per row group, and keeps the input's layout in the output. An input of
    many small row groups (more than 64, under 1 MiB each on average: 10,000 of one row) is written the
    ordinary way, in the writer's own row groups, where re-encoding costs little: time and memory then
    stay bounded whatever the input's layout (benchmarks/row_groups.py)."""
    n = md.num_row_groups
    return n <= 64 or sum(md.row_group(g).total_byte_size for g in range(n)) >= n * (1 << 20)


def refuse_overflow(plan: Plan, file: str, row_base: int, offsets, row: dict, outs: dict) -> None:
    """A chunk's advantage or return that overflow made non-finite is refused (exit 2, nothing
    written), naming the row: rewards or values so large (beyond √max of the compute dtype, /1000)
    that the statistics' sums and squares leave its range, or (``--precision float64``) a finite
    value beyond float32, the output's type, which would be written as ±inf. A NaN written with
    exit 0 would look like the framework's own. NaN the frameworks' semantics give on ordinary
    numbers (0/0 of an empty mask, the std of a group of one) are not overflow: written as theirs. The input's
    critic values count as the rewards do (read again from ``file`` only when an output is non-finite)."""
    import numpy as np

    f32max = float(np.finfo(np.float32).max)
    wide = plan.dtype == torch.float64
    for name, v in outs.items():
        if v is None or not v.is_floating_point():
            continue
        finite = torch.isfinite(v)
        over = (v.abs() > f32max) & finite if wide else None
        if bool(finite.all()) and (over is None or not bool(over.any())):
            continue
        if over is not None and bool(over.any()):
            first, why, hint = int(torch.nonzero(over)[0, 0]), "is beyond float32, the output's type", \
                "scale the rewards down"
        else:
            limit = float(np.sqrt(np.finfo(np.float64 if wide else np.float32).max)) / 1e3
            big = [(what, float(t.abs().max())) for what, t in
                   (("reward", row.get("score_sum")), ("token reward", outs.get("token_level_rewards")))
                   if t is not None and t.numel() and float(t.abs().max()) > limit]
            big += [(what, top) for what, top in _input_magnitudes(plan, file) if top > limit]
            growth = _growth_factors(plan)
            if not big and not growth:
                continue  # not overflow: the framework's own NaN
            dtype = "float64" if wide else "float32"
            first = int(torch.nonzero(~finite)[0, 0])
            if big:
                why = (f"the {dtype} statistics overflow ({big[0][0]}s up to {big[0][1]:.3g}; {dtype} holds up to "
                       f"{float(np.finfo(dtype).max):.3g})")
                scaled = "values" if big[0][0] == "value" else "rewards"
                hint = (f"run with --precision float64 (the statistics then hold), or scale the {scaled} down"
                        if not wide else f"scale the {scaled} down")
            else:  # γ or λ above 1: the discounted sums grow as γ^T along a row
                r = _row_at(offsets, first)
                said = ", ".join(f"{k}={g:g}" for k, g in growth)
                why = (f"{said} above 1 makes the discounted sums grow geometrically along the row "
                       f"({int(offsets[r + 1]) - int(offsets[r])} tokens here) beyond the {dtype} range, as in the "
                       "trainer")
                hint = "a discount γ and a GAE λ lie in [0, 1]; check the value given"
        r = _row_at(offsets, first)
        raise AdvcliError(f"{file}: row {row_base + r}: {name} {float(v[first]):.6g} at position "
                          f"{first - int(offsets[r])}: {why}; nothing was written", hint=hint)


def _input_magnitudes(plan: Plan, file: str) -> list[tuple[str, float]]:
    """(what, the largest |value|) of the critic values in the input ``file``, where the run reads them: values
    so large that the statistics' squares overflow (a whitening's variance) make the advantages NaN as rewards
    do. Read on the error path only (the write pass reads no more than it writes)."""
    import pyarrow.compute as pc

    from ..io.reader import InputSet

    name = plan.cmap.names.get("values")
    if name is None or "values" not in plan.token_roles:
        return []
    top = None
    for _, _, b in InputSet.open([file]).iter_batches([name], 65536):
        flat = pc.list_flatten(b.column(0))
        m = pc.max(pc.abs(flat.cast("float64"))).as_py() if len(flat) else None
        top = m if top is None or (m is not None and m > top) else top
    return [("value", float(top))] if top is not None else []


def _row_at(offsets, position: int) -> int:
    """The chunk's row (0-based) holding flat token ``position``, by the chunk's row ``offsets``."""
    import numpy as np

    return int(np.searchsorted(np.asarray(offsets), position, side="right")) - 1


def _growth_factors(plan: Plan) -> list[tuple[str, float]]:
    """The estimator's discount-like parameters above 1 (``gamma``, ``lam``, ``lam_*``): (name, value)."""
    return [(k, float(v)) for k, v in (plan.params or {}).items()
            if (k == "gamma" or k == "lam" or k.startswith(("gamma_", "lam_"))) and isinstance(v, (int, float))
            and not isinstance(v, bool) and v > 1]


def finish_row_kl(plan: Plan, res: Prepared, row: dict, kl_sum: torch.Tensor, kl_mean: torch.Tensor,
                   run_observer: RunObserver | None) -> None:
    """The per-row KL that :func:`prepare_run` deferred to the write pass: into ``row``, the row score
    (exactly as prepare_run computes it) and the run statistics, before they are finished."""
    row["kl_sum"], row["kl_mean"] = kl_sum, kl_mean
    _, kls = kl_coefs(plan, res.scopes, kl_mean)
    res.table.score = res.table.score - (res.beta_row * kl_sum.to(torch.float64)).to(plan.dtype)
    res.kl_deferred = False
    st = getattr(run_observer, "figures", None)
    if st is not None and getattr(st, "rows_set", False):
        from ..figures.arrays import to_numpy  # the collector holds numpy arrays (its padding rows are cut by them)

        st.kl_row = to_numpy(kl_mean, "float64")
        st.kls = kls
        st.score = to_numpy(res.table.score, "float64")


def _cheapest_column(inputs, fallback: str) -> str:
    """A column whose reading costs next to nothing (a scalar column; the mask where there is none),
    read only so that the write pass's batches are cut as the statistics pass's were."""
    md = inputs.metadata[0]
    size: dict[str, int] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            size[col.path_in_schema] = size.get(col.path_in_schema, 0) + col.total_uncompressed_size
    scalar = [f.name for f in inputs.schema if f.name in size]  # a nested column's paths are "name.…"
    return min(scalar, key=lambda n: size[n]) if scalar else fallback


def _close_spill(res: Prepared) -> None:
    if res.token_spill is not None:
        res.token_spill.close()
        res.token_spill = None


def stream_pass(plan, inputs, res, row, chunk_rows, run_observer, progress, outs, mode="full", flavor="advcli",
                 native=None):
    """The last pass: every chunk's math, statistics and (with ``outs``) its output batch.

    Overlap: while this thread computes chunk k, the reader thread reads the next batches, a decoding
    thread decodes and checks the token columns of the next DECODE_AHEAD chunks, a statistics thread
    accumulates chunk k-1's run statistics (in chunk order) and the writer thread (WRITE_THREAD) encodes
    and writes the row groups of the chunks before (pyarrow and torch release the GIL).

    Memory: at most these chunks are held at once: 2 read (PREFETCH queued + 1 being read),
    DECODE_AHEAD + 1 decoded, 2 on this thread (k computing, k-1 finishing: one behind), 2 at the
    statistics thread (1 queued + 1 accumulated); and of the output, under one row group waiting to be
    complete, 2 queued for the writer thread and 1 being encoded (row groups of ROW_GROUP_WEIGHT rows plus
    list values, advcli/io/writer.py), whatever the dump's size."""
    reader = ChunkReader(plan, inputs, res.state)
    # the statistics pass kept every chunk with what the statistics read from its token columns
    # (moments.token_moment_pass): no token column is decoded again
    cached = bool(res.token_cache_complete)
    tok_cols = [] if cached else list(roles_to_columns(plan, plan.token_roles))
    writing = outs is not None
    splice = False
    if writing:
        base_fields, out_schema = output_schema(plan, inputs, flavor, native, mode)
        # full output: the input's column chunks are copied, not decoded and encoded again, where
        # every input allows it (advcli.io.splice); the pass then reads only what the math reads
        splice = mode == "full" and SPLICE and all(few_row_groups(md) for md in inputs.metadata) and \
            all(spliceable(p, plan.output_columns) for p in inputs.paths)
        if splice:
            cols = tok_cols
            new_schema = pa.schema([out_schema.field(n) for n in plan.output_columns])
        else:
            cols = inputs.schema.names if mode == "full" else list(dict.fromkeys(
                tok_cols + [f.name for f in base_fields]))
        for o in outs:
            clean_stale_temps(o)
    else:
        cols = tok_cols
    if not cols:  # pyarrow cuts batches at row groups when it reads no column: read one, the cheapest
        cols = [_cheapest_column(inputs, plan.cmap["response_mask"])]

    def open_writer(i: int):
        if splice:
            return SplicedParquetWriter(outs[i], inputs.paths[i], out_schema, plan.output_columns,
                                        threaded=WRITE_THREAD, identity=inputs.identity_of(i))
        return AtomicParquetWriter(outs[i], out_schema, threaded=WRITE_THREAD)

    writers: list[AtomicParquetWriter | None] = [None] * len(outs or [])
    last_fi: int | None = None  # the input whose output is being written
    kl_parts: tuple[list, list] | None = ([], []) if res.kl_deferred else None
    R = inputs.num_rows
    row0 = chunks = 0
    observer = OrderedWorker(run_observer.add, depth=1, name="advcli-observer")

    def decoded():
        """Every batch with its token columns decoded and checked (None when the statistics pass kept them):
        run DECODE_AHEAD chunks ahead on a thread of its own, so the checks of chunk k+1 overlap the math of
        chunk k; an error there surfaces when the loop reaches that chunk, as it did on this thread."""
        for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
            yield fi, rb, batch, None if cached else reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)

    chunks_in = prefetched(decoded(), DECODE_AHEAD) if DECODE_AHEAD > 0 else decoded()
    def compute(fi, rb, batch, dec, row0):
        """Chunk k's math, queued on the device; its results' copies to the host queued behind it (CUDA:
        pinned memory, with an event to wait on). Returns what :func:`finish` needs."""
        hit = res.token_cache.pop(row0, None) if res.token_cache else None
        if hit is not None:
            hit.load(res.token_spill)
        seen = None
        if cached:
            if hit is None or hit.rows != batch.num_rows:
                raise RuntimeError(f"internal: the statistics pass's chunks do not match the write pass's at "
                                   f"row {row0}; please report this")
            offsets, tok, seen = hit.offsets, {}, hit.seen
            mask = hit.mask
        else:
            offsets, tok = dec
            mask = tok["response_mask"]
        layout = Ragged(torch.from_numpy(offsets))
        extras = None
        if hit is not None and hit.rows == batch.num_rows:  # the statistics pass computed this chunk
            mask = to_device(mask, plan.device).to(plan.dtype)
            adv, ret, tlr, mask = chunk_final(plan, res, layout.to(plan.device), hit.adv, hit.ret, hit.tlr,
                                               mask, row0, apply_whiten=True)
            row_kl = hit.row_kl
            del hit
        else:
            extras = {} if kl_parts is not None or res.correction is not None else None
            adv, ret, tlr, mask = chunk_math(plan, res, layout, tok, row0, apply_whiten=True, extras=extras)
            row_kl = (row_kl_sums(layout.to(mask.device), extras["kld"], extras["kl_mask"], plan.run.kl.mask)
                      if kl_parts is not None else None)
        weights = extras.get("rollout_is_weights") if res.correction is not None else None
        after_rs = None
        if res.correction is not None:  # verl: the estimator's mask; OpenRLHF: the kept units
            after_rs = mask if res.correction.spec.corrects_mask else extras["response_mask_after_rs"]
        event = None
        if plan.device.type == "cuda":  # copies queued, not waited for: the next chunk's math goes first
            (adv, ret, tlr, mask, weights, after_rs, *kl), event = to_host_async(
                [adv, ret, tlr, mask, weights, after_rs, *(row_kl if kl_parts is not None else ())])
            row_kl = tuple(kl) or row_kl
        return fi, rb, batch, row0, offsets, layout, tok, seen, (adv, ret, tlr, mask, weights, after_rs, row_kl), event

    def finish(fi, rb, batch, row0, offsets, layout, tok, seen, results, event):
        """Chunk k's host work, done once chunk k+1's math is queued: the overflow check, the run statistics
        (handed to their thread), the output batch (to the writer's thread)."""
        nonlocal last_fi, chunks
        if writing and writers[fi] is None:
            if last_fi is not None:  # that input is done: close its output (renamed at the end)
                writers[last_fi].prepare()
            # created and held in one step: a signal in between (Python runs handlers right after the call
            # that created the file returns) left a temporary file no writer held, so none removed it;
            # held here, it is raised once the writer is in `writers`, whose clean-up removes it
            with shielded():
                writers[fi] = open_writer(fi)
            last_fi = fi
        if event is not None:  # the one wait for the chunk's results
            event.synchronize()
        adv, ret, tlr, mask, weights, after_rs, row_kl = results
        refuse_overflow(plan, inputs.paths[fi], rb, offsets, row,
                        {"advantages": adv, "returns": ret, "token_level_rewards": tlr})
        if kl_parts is not None:
            kl_parts[0].append(row_kl[0].cpu())
            kl_parts[1].append(row_kl[1].cpu())
        observer.submit(row0, layout, mask, adv, ret, tlr, tok, seen)
        extra = ({"rollout_is_weights": weights, "response_mask_after_rs": after_rs}
                 if res.correction is not None else None)
        if splice:
            writers[fi].write(output_batch(plan, batch, [], new_schema, adv, ret, tlr, offsets, rb, extra))
        elif writing:
            writers[fi].write(output_batch(plan, batch, base_fields, out_schema, adv, ret, tlr, offsets, rb,
                                           extra))
        chunks += 1
        if chunks % TRIM_EVERY == 0:
            trim_heap()
        if progress:
            progress("write" if writing else "compute", row0 + batch.num_rows, R)

    try:
        # one chunk behind: chunk k's host work runs after chunk k+1's math is queued, so on a GPU the device
        # computes k+1 (and copies k's results back) while the host checks, observes and encodes k. Errors
        # keep the order of a one-chunk-at-a-time loop: chunk k's own comes before anything from chunk k+1.
        pending = None
        chunk_iter = iter(chunks_in)
        while True:
            try:  # reading, decoding and checking chunk k+1, then its math
                item = next(chunk_iter, None)
                if item is None:
                    break
                fi, rb, batch, dec = item
                computed = compute(fi, rb, batch, dec, row0)
            except BaseException as e:
                if pending is not None and not isinstance(e, KeyboardInterrupt):  # stopped: nothing more to do
                    finish(*pending)
                raise
            row0 += batch.num_rows
            if pending is not None:
                finish(*pending)
            pending = computed
        if pending is not None:
            finish(*pending)
            pending = None
        observer.close()
        res.token_cache = None
        _close_spill(res)
        if kl_parts is not None:
            empty = torch.zeros(0, dtype=plan.dtype)
            finish_row_kl(plan, res, row, torch.cat(kl_parts[0]) if kl_parts[0] else empty,
                           torch.cat(kl_parts[1]) if kl_parts[1] else empty, run_observer)
        if writing:
            for i, o in enumerate(outs):  # an input with no rows still gets its (empty) output
                if writers[i] is None:
                    with shielded():  # as in finish: created and held in one step
                        writers[i] = AtomicParquetWriter(o, out_schema, threaded=WRITE_THREAD)
            for w in writers:
                w.commit()
    except BaseException as e:
        # the clean-up runs to its end whatever signal comes meanwhile (advcli.io.commit.shielded): a second
        # SIGTERM raised in it (a killed server's child gets one as each of the server's threads ends) used
        # to skip the outputs' removal. The temporary outputs go first, then the threads are stopped (the
        # decoding thread finishes the chunk it is on: the longest wait here)
        with shielded(redeliver=not isinstance(e, KeyboardInterrupt)):
            _close_spill(res)
            for w in writers:
                if w is not None:
                    w.abort()
            close_chunks = getattr(chunks_in, "close", None)
            if close_chunks is not None:
                close_chunks()
            try:
                observer.close()
            except BaseException:  # noqa: BLE001 - the first error is the one to report
                pass
        exc = sys.exc_info()[1]
        if writing and is_disk_full(exc) and not remote.is_uri(outs[last_fi or 0]):
            need = (sum(os.path.getsize(p) for p in inputs.paths if os.path.exists(p)) if mode == "full" else None)
            raise disk_full(os.path.dirname(os.path.abspath(outs[last_fi or 0])), "the output",
                            need) from None
        raise
