"""Reading chunks: the chunk size, the token columns of a chunk as flat tensors with shared
offsets (checked row by row), per-row number columns, group keys as integer codes.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from ..errors import AdvcliError
from ..io import writer as writer_module
from ..io.arrow_torch import check_mask_values, check_no_nulls, list_column_to_tensor, list_offsets
from ..io.lists import primitive_numpy
from ..io.reader import CHUNK_TOKENS, InputSet, rows_for_tokens
from ..io.value_checks import check_finite, check_lengths, check_row_numbers, note_unread_value
from .plan import Plan, RunState
from .roles import FLOAT_ROLES

TRIM_EVERY = 8  # chunks between returns of freed heap memory to the OS (advcli.io.memory)


def chunk_rows_for(plan: Plan, inputs: InputSet, chunk_rows: int | None,
                   chunk_tokens: int | None = CHUNK_TOKENS) -> int:
    """Rows per chunk: ``chunk_rows`` (the user's bound; None: no bound), lowered so that a chunk
    holds about ``chunk_tokens`` tokens on average (from the Parquet metadata; None: no token bound).

    Chunks of 0.5-2M tokens keep every per-token temporary small enough for the allocator to reuse
    (larger ones go through mmap and fault their pages in again on every op) and the read-compute-
    write overlap fine-grained. Results never depend on the chunking."""
    R = inputs.num_rows
    bound = chunk_rows or max(R, 1)
    rows = rows_for_tokens(R, inputs.list_tokens(plan.cmap["response_mask"]), chunk_rows, chunk_tokens)
    piece = writer_module.PIECE_ROWS
    if piece <= rows < bound:  # a whole number of the writer's pieces: none straddles two chunks
        rows = min(bound, max(piece, (rows + piece // 2) // piece * piece))  # (no concatenation copy)
    return rows




class ChunkReader:
    """Reads one chunk's token columns as flat tensors with shared offsets, checking each row (but those
    the run's ``state`` says a finished pass has checked: ``state.checked_roles``)."""

    def __init__(self, plan: Plan, inputs: InputSet, state: RunState | None = None):
        self.plan = plan
        self.inputs = inputs
        self.state = RunState() if state is None else state

    def tokens(self, batch: pa.RecordBatch, file: str, row_base: int, roles: list[str],
               verify: list[str] | tuple = ()):
        """(offsets, {role: flat tensor}) of the chunk's ``roles``, each checked once per run: no null
        list, the mask's 0/1 values, the same length as the mask in every row, finite floats.
        ``verify``: roles checked the same way but not returned (lengths and nulls; values too with
        ``plan.check_values``): the dump's token columns the math does not read."""
        plan = self.plan
        mask_name = plan.cmap["response_mask"]
        mask_arr = batch.column(mask_name)
        done = self.state.checked_roles  # checked by an earlier pass over the same rows: not again
        if "response_mask" not in done:
            check_no_nulls(mask_arr, file, mask_name, row_base)
        offsets, mask = list_column_to_tensor(mask_arr)
        if "response_mask" not in done:
            check_mask_values(mask, offsets, file, mask_name, row_base)
        out = {"response_mask": mask}
        for role in roles:
            if role == "response_mask":
                continue
            name = plan.cmap[role]
            arr = batch.column(name)
            if role in done:
                out[role] = list_column_to_tensor(arr)[1].to(plan.dtype) if role in FLOAT_ROLES else \
                    list_column_to_tensor(arr)[1]
                continue
            check_no_nulls(arr, file, name, row_base)
            offs, vals = list_column_to_tensor(arr)
            check_lengths(offsets, offs, file, name, mask_name, row_base)
            if role in FLOAT_ROLES:
                raw, vals = vals, vals.to(plan.dtype)
                check_finite(vals.numpy(), offsets, file, name, row_base, role in plan.neg_inf_roles,
                             source=raw.numpy() if raw.dtype != vals.dtype else None,
                             checked=mask.numpy() if role in plan.masked_only_roles else None)
            out[role] = vals
        kl_pair = [r for r in plan.neg_inf_roles if r != "rollout_log_probs"]
        if len(kl_pair) == 2 and all(r in out and r not in done for r in kl_pair):
            lp, ref = (out[r] for r in kl_pair)
            # one reduction each: a finite sum holds no −inf (the checks above let no NaN or +inf through)
            both = None if bool(torch.isfinite(lp.sum())) or bool(torch.isfinite(ref.sum())) else \
                torch.isneginf(lp) & torch.isneginf(ref)
            if both is not None and bool(both.any()):  # ref − logp = −inf − (−inf) = NaN: the trainer's KL too
                pos = int(both.nonzero()[0, 0])
                row = int(np.searchsorted(offsets, pos, side="right") - 1)
                raise AdvcliError(f"{file}: row {row_base + row}, position {pos - int(offsets[row])}: "
                                  f"{plan.cmap[kl_pair[0]]!r} and {plan.cmap[kl_pair[1]]!r} "
                                  "are both -inf: their log-ratio, and so the KL, is NaN (the trainer's too)",
                                  hint="drop or repair the row")
        for role in verify:
            if role in done or role in roles:
                continue
            name = plan.cmap[role]
            arr = batch.column(name)
            check_no_nulls(arr, file, name, row_base)
            if plan.check_values:
                offs, vals = list_column_to_tensor(arr)
                check_lengths(offsets, offs, file, name, mask_name, row_base)
                if role in FLOAT_ROLES:
                    try:  # a column the math does not read: its non-finite value is a warning (the run goes on)
                        cast = vals.to(plan.dtype)
                        check_finite(cast.numpy(), offsets, file, name, row_base, role in plan.neg_inf_roles,
                                     source=vals.numpy() if vals.dtype != cast.dtype else None)
                    except AdvcliError as e:
                        note_unread_value(self.state.group_warnings, e.message, name)
            else:  # the offsets alone: no copy of the values
                check_lengths(offsets, list_offsets(arr), file, name, mask_name, row_base)
        return offsets, out


def to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """A host tensor on the compute device. CUDA: through pinned (page-locked) host memory, from
    torch's caching host allocator, so the copy is asynchronous (``non_blocking``) and the next
    kernels queue behind it instead of waiting; CPU: the tensor itself."""
    if dev.type != "cuda" or t.device.type == "cuda":
        return t
    return t.pin_memory().to(dev, non_blocking=True)


def to_host(tensors: list) -> list:
    """Tensors on the host (None and host tensors as they are). From a GPU: each copied asynchronously
    into pinned memory, then one wait for them all, instead of a wait per tensor (``.cpu()``); a tensor
    given twice is copied once."""
    copies: dict[int, torch.Tensor] = {}
    for t in tensors:
        if t is not None and t.device.type == "cuda" and id(t) not in copies:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            copies[id(t)] = host.copy_(t, non_blocking=True)
    if copies:
        torch.cuda.current_stream().synchronize()
    return [copies.get(id(t), t) for t in tensors]


_COPY_STREAMS: dict = {}  # device index -> the stream results are copied back on


def to_host_async(tensors: list) -> tuple[list, object]:
    """(the tensors on the host, an event): as :func:`to_host`, but nothing waits: the copies from a GPU are
    queued on a copy stream of their own, behind the kernels that made the tensors (it waits for the
    current stream as it is now), so that the next chunk's kernels, queued on the current stream, run while
    they copy. The host tensors hold their values once ``event.synchronize()`` returns (event None: nothing
    was on a GPU, and CUDA is not touched). Each GPU tensor is marked as used on the copy stream
    (``record_stream``), so the caching allocator gives its memory to no later kernel before its copy is
    done; the pinned buffers come from torch's caching host allocator, reused once their copies are done."""
    gpu = [t for t in tensors if t is not None and t.device.type == "cuda"]
    if not gpu:
        return list(tensors), None
    dev = gpu[0].device
    stream = _COPY_STREAMS.get(dev.index)
    if stream is None:
        stream = _COPY_STREAMS[dev.index] = torch.cuda.Stream(device=dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    copies: dict[int, torch.Tensor] = {}
    with torch.cuda.stream(stream):
        for t in gpu:
            if id(t) not in copies:
                host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                copies[id(t)] = host.copy_(t, non_blocking=True)
                t.record_stream(stream)
        event = torch.cuda.Event()
        event.record(stream)
    return [copies.get(id(t), t) for t in tensors], event


def read_scalar(batch: pa.RecordBatch, name: str, file: str, row_base: int, dtype,
                allow_nan: bool = False) -> torch.Tensor:
    """A per-row number column as a tensor; nulls, NaN and ±inf refused (``allow_nan``: nulls and NaN
    become NaN, as TRL reads a reward function's None; ±inf still refused)."""
    arr = batch.column(name)
    if allow_nan and arr.null_count:
        arr = arr.cast(pa.float64()).fill_null(float("nan"))
    check_no_nulls(arr, file, name, row_base)
    raw = np.array(primitive_numpy(arr))
    t = torch.from_numpy(raw).to(dtype)
    if t.is_floating_point():
        vals = t.numpy()
        check_row_numbers(vals, file, name, row_base, allow_nan, source=raw if raw.dtype != vals.dtype else None)
    return t


def allows_nan(plan: Plan) -> bool:
    return plan.run.reward.nan != "refuse"  # allow, zero: NaN read, handled in prepare


def roles_to_columns(plan: Plan, roles: list[str]):
    for r in roles:
        yield plan.cmap[r]
