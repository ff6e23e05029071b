"""Pass 2, token statistics: per-scope moments of the token rewards or advantages for whitening,
computed on worker threads (results cached for the write pass when they fit).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from ..errors import AdvcliError
from ..io.memory import trim as trim_heap
from ..io.reader import InputSet
from ..ops.ragged import Ragged
from ..ops.whiten import MomentSums, WhitenSpec, prefix_kept, scope_mean_rstd
from .grouping import scope_where
from .observe import ChunkObservations, observe_tokens, observes_returns_early
from .plan import Plan, RunState
from .read import TRIM_EVERY, ChunkReader, roles_to_columns
from .rows import Prepared, kl_rows, row_kl_sums
from .spill import open_spill
from .tokens import chunk_final, chunk_math, token_chunk

MOMENT_WORKERS = 2  # chunks computed at once by the statistics pass


TOKEN_CACHE_BYTES = 256 << 20  # the statistics pass keeps its results for the write pass up to this size


@dataclass
class CachedChunk:
    """One chunk's results kept by the statistics pass for the write pass. With ``seen`` (and the
    layout and mask), the write pass has all it needs without decoding the chunk's inputs again."""

    rows: int
    adv: torch.Tensor  # before whitening (re-masked where configured)
    ret: torch.Tensor  # the estimator's returns
    tlr: torch.Tensor
    row_kl: tuple | None  # (Σ kld, masked mean) per row where the row KL is deferred
    offsets: np.ndarray | None = None  # [B+1] the chunk's list offsets
    mask: torch.Tensor | None = None  # bool, the final mask
    seen: ChunkObservations | None = None  # what the run statistics need from the token columns
    spilled: list | None = None  # adv, ret, tlr, mask in res.token_spill (those fields are then None)

    def load(self, spill) -> None:
        """Read the spilled tensors back (:mod:`.spill`)."""
        if self.spilled is not None:
            self.adv, self.ret, self.tlr, self.mask = spill.get(self.spilled)
            self.spilled = None


def moment_weights(plan: Plan, mask: torch.Tensor, rewards: bool) -> torch.Tensor:
    """Each token's weight in pass 2's moments: its mask, or 1 on every response token for the advantages
    with ``whitening.mask: all`` (SkyRL whitens over every response position)."""
    return torch.ones_like(mask) if plan.run.whitening.mask == "all" and not rewards else mask


def span_weights(plan: Plan, layout, mask: torch.Tensor, rewards: bool):
    """(the count/variance weights, the mean's own weights or None) of pass 2's moments for the
    advantages under ``whitening.mean_span`` (:func:`moment_weights` alone for ``mask``)."""
    w = moment_weights(plan, mask, rewards)
    span = plan.run.whitening.mean_span
    if rewards or span == "mask":
        return w, None
    if span == "row":
        return w, torch.ones_like(w)
    kept = prefix_kept(layout, mask)
    return w * kept, kept


def token_moment_pass(plan: Plan, inputs: InputSet, res: Prepared, chunk_rows: int, progress, rewards: bool):
    """Per-scope moments over the mask=1 tokens of the token rewards (``rewards``) or the advantages.

    For the advantages, when the input's advantages, returns and token rewards (and its mask) fit in
    :data:`TOKEN_CACHE_BYTES`, each chunk's results are kept (``res.token_cache``, by first row) so
    that the write pass only whitens them instead of computing the estimator a second time. Where
    the returns do not depend on the whitening, each chunk also keeps its layout, its mask and what
    the run statistics read from its token columns (:func:`observe_tokens`, computed here on the
    workers), and ``res.token_cache_complete`` tells the write pass that it need not decode the
    inputs at all: the token columns are decoded once per run. A bigger input is computed twice,
    in bounded memory."""
    sums = MomentSums.zeros(res.scopes.num_groups)
    reader = ChunkReader(plan, inputs, res.state)
    cols = list(roles_to_columns(plan, plan.token_roles))
    total = int(res.table.length.sum()) if res.table.length.numel() else 0
    elem = torch.empty(0, dtype=plan.dtype).element_size()
    cache: dict | None = None
    spill = None
    need = total * (elem * 3 + 1)
    observable = plan.spec.level != "row" and observes_returns_early(plan)
    if not rewards and res.correction is None:
        if need <= TOKEN_CACHE_BYTES:
            cache = {}
        elif observable:
            spill = open_spill(need)  # beyond memory: a temporary file rather than a second decode
            cache = {} if spill is not None else None
    observe = cache is not None and observable  # then every chunk's entry carries its observations
    # slime's float32 one-pass whitening sums each step's concatenated tokens with torch: kept in order
    # (CPU) to make the same calls on the same tensor (ops.whiten.ordered_float32_sums), within bounds
    ordered: list | None = [] if (not rewards and plan.whiten_spec().one_pass == torch.float32
                                  and total * 16 <= TOKEN_CACHE_BYTES) else None

    def work(fi: int, rb: int, batch: pa.RecordBatch, row0: int):
        offsets, tok = reader.tokens(batch, inputs.paths[fi], rb, plan.token_roles)
        layout = Ragged(torch.from_numpy(offsets))
        extras = {} if cache is not None and res.kl_deferred else None
        entry = None
        if cache is not None and plan.spec.level != "row":  # (row-level whitening never comes here)
            chunk = token_chunk(plan, res, layout, tok, row0, extras)
            ret = plan.spec.token_fn(chunk, plan.params)
            adv, _, tlr, mask = chunk_final(plan, res, chunk.layout, ret[0], ret[1], chunk.token_rewards,
                                             chunk.mask, row0, apply_whiten=False)
            row_kl = None
            if extras is not None:
                row_kl = tuple(x.cpu() for x in row_kl_sums(chunk.layout, extras["kld"], extras["kl_mask"],
                                                                 plan.run.kl.mask))
            entry = CachedChunk(batch.num_rows, adv, ret[1], tlr, row_kl)
            if observe:  # the write pass then reads no input column (see the docstring)
                entry.offsets, entry.mask = offsets, (mask > 0).cpu()
                entry.seen = observe_tokens(plan, res.scopes.num_groups, row0, layout, mask, ret[1], tlr, tok,
                                            kl_rows(res.table, row0, batch.num_rows))
        else:
            adv, _, tlr, mask = chunk_math(plan, res, layout, tok, row0, apply_whiten=False, rewards_only=rewards)
        v = tlr if rewards else adv
        # the per-token reduction runs here, in the worker; only per-row sums reach the main thread
        lay = layout.to(v.device)
        w, u = span_weights(plan, lay, mask, rewards)
        partials = MomentSums.row_partials(v, w, lay, res.scopes.codes[row0:row0 + batch.num_rows], u)
        if ordered is not None:
            entry = (entry, (v.detach().cpu(), w.detach().cpu(),
                             layout.broadcast(res.scopes.codes[row0:row0 + batch.num_rows])))
        return row0, batch.num_rows, partials, entry

    # chunks are independent here (the moments are summed exactly, in row order, below): compute
    # MOMENT_WORKERS of them at once; most segment ops run single-threaded inside torch
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    done = 0
    pending: deque = deque()

    def consume(fut) -> None:
        nonlocal done
        r0, n, partials, entry = fut.result()
        if ordered is not None:
            entry, tokens = entry
            ordered.append(tokens)
        sums.add_rows(*partials)
        if entry is not None:
            if spill is not None:
                entry.spilled = spill.put([entry.adv, entry.ret, entry.tlr, entry.mask])
                entry.adv = entry.ret = entry.tlr = entry.mask = None
            cache[r0] = entry
        done += 1
        if done % TRIM_EVERY == 0:
            trim_heap()
        if progress:
            progress("statistics", r0 + n, inputs.num_rows)

    workers = max(1, min(MOMENT_WORKERS, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="advcli-moments-pass") as ex:
        row0 = 0
        for fi, rb, batch in inputs.iter_batches(cols, chunk_rows):
            pending.append(ex.submit(work, fi, rb, batch, row0))
            row0 += batch.num_rows
            if len(pending) >= workers:
                consume(pending.popleft())
        while pending:
            consume(pending.popleft())
    if cache is not None:
        res.token_cache, res.token_spill = cache, spill
        res.token_cache_complete = observe
    if ordered:
        from ..ops.whiten import ordered_float32_sums
        sums.ordered = ordered_float32_sums(*(torch.cat(x) for x in zip(*ordered)), res.scopes.num_groups)
    return sums


def token_reward_small(plan: Plan) -> str:
    """``whiten_small`` of the token-reward whitening (ROLL's whiten_rewards): ROLL's compute_advantage guard
    covers both whitenings, so before #476 one valid token raises there first (``error_one``); else ``skip``."""
    return "error_one" if plan.run.whitening.small == "error_one" else "skip"


def whiten_stats(plan: Plan, sums: MomentSums, spec: WhitenSpec, step_values: list, small: str,
                 state: RunState | None = None):
    """(mean, rstd) per scope; a scope with <= 1 valid token raises (``error``), is left as it is
    (``skip``: mean 0, rstd 1, ROLL compute_advantage L1099-1106 @8eb27cc2) or computed (``compute``);
    ``error_empty`` raises only for none, ``error_one`` only for one (ROLL before #476, none skipped).
    ``state``: the run's, whose scope domains name a scope in those errors."""
    few = sums.count <= 1
    state = RunState() if state is None else state
    if small == "error_empty" and bool((sums.count == 0).any()):  # slime distributed_masked_whiten
        s = int(torch.nonzero(sums.count == 0)[0])
        raise AdvcliError(f"whitening found no valid token{scope_where(state, step_values, s)}: the framework "
                          "raises here (slime distributed_masked_whiten: ValueError, the global mask sum is zero)",
                          hint="check the response_mask column of that step")
    if small == "error_one":  # ROLL v0.2.0-v0.3.0: masked_var raises for one token; none turns whitening off
        if bool((sums.count == 1).any()):
            s = int(torch.nonzero(sums.count == 1)[0])
            raise AdvcliError(f"whitening found one valid token{scope_where(state, step_values, s)}: ROLL before "
                              "#476 stops here (masked_var raises ValueError: 'The sum of the mask is one, which can "
                              "cause a division by zero.'; utils/functionals.py at v0.2.0-v0.3.0)",
                              hint="ROLL after #476 leaves such a domain unwhitened: --flavor roll (8eb27cc), or "
                                   "--set advcli.whiten_one_token=skip")
        small = "skip"
    if small == "error" and bool(few.any()):
        s = int(torch.nonzero(few)[0])
        raise AdvcliError(f"whitening needs at least 2 valid tokens per batch; found {int(sums.count[s])}"
                          f"{scope_where(state, step_values, s)}",
                          hint="verl raises here too (masked_var: N/(N−1) with N ≤ 1): check the "
                               "response_mask column of that step. With --flavor advcli, "
                               "advantage.whiten_small=skip leaves such a step unwhitened (ROLL's rule)")
    limit = plan.run.whitening.overflow
    if limit is not None:  # verl's float16 masked sums (torch_functional.py masked_mean / masked_var)
        n = sums.count.clamp(min=1)
        dev = (sums.total_sq - sums.total * sums.total / n).clamp(min=0)
        over = (sums.total.abs() > limit) | (dev > limit)
        if bool(over.any()):
            s = int(torch.nonzero(over)[0])
            raise AdvcliError(f"whitening{scope_where(state, step_values, s)}: Σx·m = {float(sums.total[s]):.6g} and "
                              f"Σ(x − mean)²·m = {float(dev[s]):.6g} over {int(sums.count[s])} tokens; the trainer "
                              f"sums them in float16, which holds at most {limit:g}: its variance is inf and every "
                              "advantage 0 (or its mean inf and every advantage NaN), so it trains on nothing here",
                              hint="with bf16 or float32 scores (advcli.reward_dtype=bfloat16 or run) the sums fit")
    if plan.dtype == torch.float32:  # the frameworks' float32 Σm + 1e-8 (WhitenSpec.count32)
        spec = dataclasses.replace(spec, count32=True)
    mean, rstd = scope_mean_rstd(sums, spec)
    if small == "skip":
        mean = torch.where(few, torch.zeros_like(mean), mean)
        rstd = torch.where(few, torch.ones_like(rstd), rstd)
    return mean, rstd
