"""advcli: offline advantages for LLM RL rollouts, with the semantics of verl, NeMo RL, ROLL,
OpenRLHF, TRL, slime, SkyRL, AReaL or prime-rl, streamed from Parquet to Parquet.

Library use::

    import advcli
    result = advcli.run("rollouts.parquet", "out.parquet", flavor="verl",
                        settings={"algorithm.adv_estimator": "grpo"})

Importing advcli does not import torch; the math modules do, when first used.
"""
__version__ = "0.1.0"


def run(inputs, output=None, *, flavor: str = "verl", settings: dict | None = None, columns: dict | None = None,
        chunk_rows: int = 4096, device: str = "auto", force: bool = False, precision: str | None = None,
        output_mode: str = "full", write_columns: list[str] | None = None, source: str | None = None,
        estimator=None):
    """Run the pipeline like ``advcli run`` and return its :class:`advcli.pipeline.RunResult`.

    ``inputs``: a path or a list of paths/directories/globs; ``output``: a path, or None to compute
    without writing; ``settings``: the flavor's own keys (``{"algorithm.adv_estimator": "gae"}``);
    ``output_mode``: ``"full"`` (the input plus the new columns) or ``"sidecar"`` (the new columns plus
    the row keys, ``--output-mode sidecar``); ``write_columns``: the new columns to write (a subset of
    ``["advantages", "returns", "token_level_rewards"]``; None: all the run produces); ``source``: a
    trainer dump format (``--from``; default: recognised from file names and keys, docs/formats.md);
    ``estimator``: the estimator that runs instead of the flavor's (``--estimator``): a name, a
    ``"module:function"`` / ``"file.py:function"`` reference, or a function (see :func:`estimator`).
    """
    from .formats import open_inputs
    from .resolution import resolve_for_inputs
    from .runner import RunRequest, run_inputs

    specs = [inputs] if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__") else list(inputs)
    specs = open_inputs([str(s) for s in specs], source)  # trainer dumps -> canonical Parquet
    # what a trainer dump tells the flavor, for the keys not given (result.from_dump says what was taken)
    items = list((settings or {}).items())
    if estimator is not None:
        if callable(estimator):
            from .estimators.user import register_function
            estimator = register_function(estimator)
        items.append(("advcli.estimator", estimator))
    cfg, native, from_dump = resolve_for_inputs(flavor, specs, items)
    if precision is not None:  # "float32" (the frameworks' numbers) or "float64" (the intended math)
        from .config import SCHEMA, coerce
        cfg["precision"] = coerce("precision", precision, SCHEMA["precision"])
    req = RunRequest(output=None if output is None else str(output), cfg=cfg, flavor=flavor, native=native,
                     columns=columns or {}, chunk_rows=chunk_rows, device=device, force=force,
                     output_mode=output_mode, write_columns=write_columns)
    result, _ = run_inputs(specs, req)  # the outputs are put in place as written: no staging in a library call
    result.from_dump = from_dump
    return result


def estimator(fn=None, *, level: str = "row", needs=(), groups: bool | None = None, name: str | None = None):
    """Declare your own estimator: ``@advcli.estimator(level="token", needs=("values",))`` (docs/api.md).

    ``level``: ``"row"`` (called per step with ``rewards``, ``group``, ``lengths``, ``step``; returns one
    advantage per row) or ``"token"`` (called per chunk with ``[B, T]`` ``token_rewards``, ``mask`` and the
    token columns in ``needs``; returns ``[B, T]``); ``groups``: the run groups rows by prompt (default:
    the function has a ``group`` parameter); ``name``: the name messages show. Imports no torch."""
    from .estimators.user import estimator as declare

    return declare(fn, level=level, needs=needs, groups=groups, name=name)
