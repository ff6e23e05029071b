"""One run from end to end: :func:`run_pipeline`.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from ..config.runspec import recorded_config
from ..io.writer import check_output_path
from ..results import RunResult
from .observe import RunObserver
from .output import output_paths, undone_on_failure
from .plan import ProgressFn, open_and_plan
from .prepare import prepare_run
from .read import CHUNK_TOKENS, chunk_rows_for
from .write import stream_pass

if TYPE_CHECKING:
    from ..flavors import FlavorAt

PIPELINE_THREADS = 3  # besides torch's intra-op pool: the reader, statistics and writer threads


@contextmanager
def intra_op_threads(dev: torch.device):
    """torch's intra-op pool on the CPU sized to the cores the pipeline's own threads leave free.

    The write pass already runs the reader, the statistics and the writer beside the compute thread
    (and the statistics pass two compute workers): an intra-op pool as large as the machine
    oversubscribes it (on 2 cores: 2 pools of 2 plus 3 threads) and its workers spin
    (docs/performance.md). Only ever lowers the count, restores it afterwards, and leaves it alone when the user set
    OMP_NUM_THREADS."""
    old = torch.get_num_threads()
    want = max(1, min(old, (os.cpu_count() or 1) - PIPELINE_THREADS))
    if dev.type != "cpu" or "OMP_NUM_THREADS" in os.environ or want == old:
        yield
        return
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run_pipeline(input_specs: list[str], output: str | None, cfg: dict, *, flavor: FlavorAt | str = "advcli",
                 native: dict | None = None, column_overrides: dict[str, str] | None = None,
                 chunk_rows: int | None = 4096, device: str = "auto", force: bool = False,
                 progress: ProgressFn | None = None, output_mode: str = "full",
                 chunk_tokens: int | None = CHUNK_TOKENS, write_columns: list[str] | str | None = None,
                 check_values: bool = False, by_position: bool = False) -> RunResult:
    """Every pass of one run (module docstring). ``output_mode``: ``full`` (the input plus the new
    columns) or ``sidecar`` (the new columns plus the row keys: :func:`output_schema`);
    ``write_columns``: which new columns to write (:func:`choose_output_columns`). Every token column
    the dump has is checked (nulls, lengths against the mask), read by the math or not;
    ``check_values`` checks the values of those the math does not read too (``advcli validate``);
    ``by_position``: the result carries the advantage per token position (``advcli run --report``)."""
    t0 = time.perf_counter()
    inputs, plan = open_and_plan(input_specs, cfg, column_overrides, device, chunk_rows, output_mode, write_columns,
                                 check_values)
    outs: list[str] = []
    with undone_on_failure(output):  # a failed run leaves no empty output directory behind
        if output is not None:
            outs = output_paths(inputs, output)
            for o in outs:
                check_output_path(o, inputs.paths, force)
        chunk_rows = chunk_rows_for(plan, inputs, chunk_rows, chunk_tokens)

        with intra_op_threads(plan.device):
            # passes 1-2: the row table and the statistics resolved from it
            res, row, betas, kls, warnings = prepare_run(plan, inputs, chunk_rows, progress, defer_kl=True)
            R = inputs.num_rows

            # pass 3: compute (and write)
            result = RunResult(inputs=inputs.paths, outputs=outs, rows=R, tokens=int(row["length"].sum()),
                               valid_tokens=int(row["valid"].sum()), seconds=0.0,
                               config=recorded_config(plan.run, plan.params), warnings=warnings)  # the file's
            run_observer = RunObserver(plan, res, row, betas, kls, by_position=wants_positions(plan, by_position))
            stream_pass(plan, inputs, res, row, chunk_rows, run_observer, progress,
                        outs if output is not None else None, output_mode, flavor, native)
    run_observer.finish(result)  # metrics, per_step, histograms, diagnostics (advcli.figures)
    result.device = plan.device_why
    return finish_result(result, plan, res, t0)


def wants_positions(plan, by_position: bool) -> bool:
    """Whether the observer gathers the advantage per token position: asked for, and advantages written."""
    return by_position and "advantages" in plan.output_columns


def finish_result(result: RunResult, plan, res, t0: float, state=None) -> RunResult:
    """Every engine's last step once the observer filled ``result``: verl's rollout_corr/* per step and
    overall, ROLL's domain of each per-step entry (from the run's ``state``, default ``res.state``), the
    run's wall time since ``t0``."""
    if res.correction is not None:
        from ..correction.plan import finish as finish_correction
        finish_correction(result, res.correction, plan.dtype)  # rollout_corr/* per step and overall
    state = getattr(res, "state", None) if state is None else state
    if state is not None and state.scope_domains is not None:
        for entry, dom in zip(result.per_step, state.scope_domains):
            entry["domain"] = dom
    result.seconds = time.perf_counter() - t0
    return result
