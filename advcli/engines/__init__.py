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


def run(engine: str, *args, ray_address: str | None = None, **kwargs):
    """Run the pipeline on ``engine`` with :func:`advcli.pipeline.run_pipeline`'s arguments."""
    check_engine(engine)
    if engine == "ray":
        from ..io.remote import is_uri

        paths = [str(p) for p in (list(args[0]) if args else list(kwargs.get("input_specs") or []))]
        paths.append(str(args[1] if len(args) > 1 else kwargs.get("output") or ""))
        if any(is_uri(p) for p in paths):
            raise AdvcliError("--engine ray does not read or write object-storage URIs yet",
                              hint="run the local engine on s3:// paths (docs/storage.md), or copy the dump "
                                   "to a filesystem every Ray node sees")
        from .ray_engine import run_ray

        return run_ray(*args, address=ray_address, **kwargs)
    if ray_address is not None:
        raise AdvcliError("--ray-address is only used with --engine ray")
    from ..pipeline import run_pipeline

    return run_pipeline(*args, **kwargs)
