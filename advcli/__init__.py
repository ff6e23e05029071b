"""advcli: offline advantages for LLM RL rollouts, with the semantics of verl, NeMo RL, ROLL,
OpenRLHF, TRL, slime, SkyRL, AReaL, prime-rl or open-instruct, streamed from Parquet to Parquet.

Library use::

    import advcli
    result = advcli.run("rollouts.parquet", "out.parquet", flavor="verl",
                        settings={"algorithm.adv_estimator": "grpo"})

Importing advcli does not import torch; the math modules do, when first used.
"""
__version__ = "0.1.0"


def run(inputs, output=None, *, flavor: str = "verl", settings: dict | None = None, columns: dict | None = None,
        chunk_rows: int = 4096, device: str = "auto", force: bool = False, precision: str | None = None,
        output_mode: str = "full", write_columns: list[str] | None = None, source: str | None = None):
    """Run the pipeline like ``advcli run`` and return its :class:`advcli.pipeline.RunResult`.

    ``inputs``: a path or a list of paths/directories/globs; ``output``: a path, or None to compute
    without writing; ``settings``: the flavor's own keys (``{"algorithm.adv_estimator": "gae"}``);
    ``output_mode``: ``"full"`` (the input plus the new columns) or ``"sidecar"`` (the new columns plus
    the row keys, ``--output-mode sidecar``); ``write_columns``: the new columns to write (a subset of
    ``["advantages", "returns", "token_level_rewards"]``; None: all the run produces); ``source``: a
    trainer dump format (``--from``; default: recognised from file names and keys, docs/formats.md).
    """
    from .formats import open_inputs
    from .resolution import resolve_for_inputs
    from .runner import RunRequest, run_inputs

    specs = [inputs] if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__") else list(inputs)
    specs = open_inputs([str(s) for s in specs], source)  # trainer dumps -> canonical Parquet
    # what a trainer dump tells the flavor, for the keys not given (result.from_dump says what was taken)
    cfg, native, from_dump = resolve_for_inputs(flavor, specs, list((settings or {}).items()))
    if precision is not None:  # "float32" (the frameworks' numbers) or "float64" (the intended math)
        from .config import SCHEMA, coerce
        cfg["precision"] = coerce("precision", precision, SCHEMA["precision"])
    req = RunRequest(output=None if output is None else str(output), cfg=cfg, flavor=flavor, native=native,
                     columns=columns or {}, chunk_rows=chunk_rows, device=device, force=force,
                     output_mode=output_mode, write_columns=write_columns)
    result, _ = run_inputs(specs, req)  # the outputs are put in place as written: no staging in a library call
    result.from_dump = from_dump
    return result
