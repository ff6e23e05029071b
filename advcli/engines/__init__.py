"""Execution engines for ``advcli run``.

``local`` (the default) is :func:`advcli.pipeline.run_pipeline`: one process, chunks streamed from
Parquet to Parquet. ``ray`` (:mod:`advcli.engines.ray_engine`, ``pip install 'advcli[ray]'``) runs
the same passes on a Ray cluster with Ray Data; the per-chunk math is the same function.
Nothing here imports torch or ray at import time.
"""
from __future__ import annotations

from ..errors import AdvcliError, did_you_mean

ENGINES = ("local", "ray")


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise AdvcliError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}.{did_you_mean(name, ENGINES)}")
    return name


def run(engine: str, *args, ray_address: str | None = None, ray_stall_timeout: float | None = None, **kwargs):
    """Run the pipeline on ``engine`` with :func:`advcli.pipeline.run_pipeline`'s arguments."""
    check_engine(engine)
    if engine == "ray":
        from .ray_engine import run_ray

        return run_ray(*args, address=ray_address, stall_timeout=ray_stall_timeout, **kwargs)
    if ray_address is not None:
        raise AdvcliError("--ray-address is only used with --engine ray")
    if ray_stall_timeout is not None:
        raise AdvcliError("--ray-stall-timeout is only used with --engine ray")
    from ..pipeline import run_pipeline

    return run_pipeline(*args, **kwargs)
