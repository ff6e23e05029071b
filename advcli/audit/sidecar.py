"""One recomputation of an audit into a temporary sidecar: the audit's main run, its float64 rerun, the
releases and candidates it tries (:mod:`advcli.audit.recompute`) and the stage-by-stage reruns
(:mod:`advcli.audit.stages`) all go through :class:`SidecarRun`."""
from __future__ import annotations

import os


class SidecarRun:
    """One recomputation into a temporary sidecar (its files, one per input) of the new columns ``write`` (None:
    every column the run produces; the audit's comparisons read the advantages)."""

    def __init__(self, tmp: str, name: str, inputs: list[str], cfg: dict, flavor: str, native: dict,
                 columns: dict, chunk_rows: int, device: str, write: tuple[str, ...] | None = ("advantages",)):
        from ..pipeline import run_pipeline, scratch_output

        d = os.path.join(tmp, name)
        os.makedirs(d)
        out = scratch_output(inputs, d, "out")  # one sidecar per file of a directory or glob
        res = run_pipeline(inputs, out, cfg, flavor=flavor, native=native, column_overrides=columns,
                           chunk_rows=chunk_rows, device=device, force=True, output_mode="sidecar",
                           write_columns=None if write is None else list(write))
        self.paths = list(res.outputs)
        self.result = res
