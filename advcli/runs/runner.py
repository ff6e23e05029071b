"""One run, from opened inputs to published outputs and the result: what ``advcli run`` and
:func:`advcli.run` both call.

The steps, in order: the output mode checked (before the curation filter's work; the engines'
shared head, :func:`advcli.pipeline.plan.open_and_plan`, checks it for their direct callers); the groups a curation
spec drops taken out first (DAPO-style, :func:`advcli.figures.curate.prefilter_for_run`); the chosen engine
(:func:`advcli.engines.run`: the local pipeline or Ray) plans, computes and writes; the result names
the user's dumps rather than their temporary Parquet; response-level outputs (a trainer dump read
with a one-token mask) get their scalar columns back (:func:`advcli.formats.finish_outputs`).

With a :class:`advcli.io.commit.Staging` (``advcli run``) the outputs are finished in their
temporary files and put in place by the caller as its last step (after its report and summary);
without (the library), the engine puts them in place when written.
"""
from __future__ import annotations

import os
from dataclasses import field

from ..errors import AdvcliError
from ..formats import finish_outputs, name_dumps, name_sources
from ..io.modes import check_output_mode
from ..records import record


@record
class RunRequest:
    """What to run: the engine's arguments (those of :func:`advcli.pipeline.run_pipeline`)."""
    output: str | None
    cfg: dict
    flavor: object = "advcli"  # the flavor at its release (advcli.flavors.FlavorAt; a NAME[@RELEASE] is read)
    native: dict | None = None
    columns: dict = field(default_factory=dict)
    chunk_rows: int | None = 4096
    device: str = "auto"
    force: bool = False
    output_mode: str = "full"
    write_columns: list[str] | str | None = None
    engine: str = "local"
    ray_address: str | None = None
    ray_stall_timeout: float | None = None
    by_position: bool = False  # the result carries the advantage per token position (run --report)


def run_dump(inputs: list[str], output: str | None, *, flavor=None, settings=(), estimator: str | None = None,
             config: str | None = None, columns: dict | None = None, padded: bool | None = None,
             precision: str | None = None, chunk_rows: int | None = 4096, device: str = "auto", force: bool = False,
             output_mode: str = "full", write_columns: list[str] | str | None = None, engine: str = "local",
             ray_address: str | None = None, ray_stall_timeout: float | None = None, drop_uniform: bool = False,
             solve_rate: str | None = None, min_group_size: int | None = None, allow_empty: bool = False,
             by_position: bool = False, progress=None, staging=None):
    """One run from what the user gave to its :class:`advcli.results.RunResult`: the one code path of
    ``advcli run`` and :func:`advcli.run`. ``inputs`` are opened (``advcli.formats.open_inputs``); the
    configuration is :func:`advcli.runs.resolution.resolve_run`'s (the default flavor's estimator chosen from the
    dump when none is named, ``result.chosen`` saying which); ``drop_uniform``/``solve_rate``/
    ``min_group_size`` drop whole groups first (:mod:`advcli.figures.curate`); the rest as :class:`RunRequest`.
    The result carries what the run's report shows: the flavor at its release, the settings given, what the
    dump told the flavor, the estimator chosen, the --config file's keys and the curation's summary."""
    from ..engines import check_engine
    from ..errors import MissingColumn
    from ..flavors import estimator_note
    from ..io.modes import refuse_empty_output
    from .resolution import in_flavor_words, refuse_default_estimator_column, resolve_run

    check_engine(engine)
    check_output_mode(output_mode)
    refuse_empty_output(output)
    curation = None  # DAPO-style: groups dropped first (the filter's numpy imported only for a filter asked for)
    if drop_uniform or solve_rate is not None or min_group_size is not None:
        from ..figures.curate import make_spec

        curation = make_spec(drop_uniform, solve_rate, min_group_size, allow_empty=allow_empty)
    choice = resolve_run(inputs, flavor, settings, estimator=estimator, config=config, padded=padded,
                         precision=precision, columns=columns)
    if curation is not None and curation.drop_uniform:  # the run's trainer's dynamic sampling (verl, SkyRL)
        from dataclasses import replace

        from ..figures.curate import uniform_rule_of, variance_rule_of

        curation = replace(curation, variance_rule=variance_rule_of(str(choice.flavor)),
                           uniform_rule=uniform_rule_of(str(choice.flavor)))
    curation = with_mean_between(curation, choice.cfg, allow_empty)
    req = RunRequest(output=output, cfg=choice.cfg, flavor=choice.flavor, native=choice.native,
                     columns=dict(columns or {}), chunk_rows=chunk_rows, device=device, force=force,
                     output_mode=output_mode, write_columns=write_columns, engine=engine, ray_address=ray_address,
                     ray_stall_timeout=ray_stall_timeout, by_position=by_position)
    try:
        result, kept = run_inputs(inputs, req, curation=curation, progress=progress, staging=staging)
    except MissingColumn as e:  # the default estimator's column: say which estimators run without it
        refuse_default_estimator_column(choice.flavor, choice.native or {}, e, inputs)
    except AdvcliError as e:  # the group size by the flavor's key (num_generations), not the canonical one
        raise in_flavor_words(e, choice.flavor.flavor, inputs) from None
    result.from_dump = list(choice.from_dump)
    result.flavor, result.settings = choice.flavor.spec, dict(choice.native or {})
    result.chosen = choice.chosen
    result.estimator_note = estimator_note(choice.flavor, choice.native)
    if choice.config_file is not None:
        result.config_file = choice.config_file.as_dict() | {"note": choice.config_file.line()}
    if kept is not None:
        # what was dropped, per step and data source (advcli.figures.curate.summarize), naming the user's dumps and
        # output rather than the temporary files the kept rows went through
        result.curation = {**name_dumps(kept), "output": output}
    return result


def with_mean_between(curation, cfg: dict, allow_empty: bool):
    """``curation`` (a :class:`advcli.figures.curate.FilterSpec` or None) with the configuration's
    ``grouping.keep_mean_between`` (OpenRLHF's dynamic filtering) added: the groups it drops are taken out before
    the run as ``--solve-rate``'s are, grouped as the run groups (blocks of ``grouping.size`` rows where it groups
    by position, or by nothing with a ``grouping.size``; else the prompt_id groups of each step)."""
    grouping = cfg.get("grouping") or {}
    between = grouping.get("keep_mean_between")
    if between is None:
        return curation
    import dataclasses

    from ..figures.curate import FilterSpec

    try:
        lo, hi = (float(b) for b in between)
    except (TypeError, ValueError):
        lo = hi = None
    if lo is None or not lo < hi:
        raise AdvcliError(f"grouping.keep_mean_between={between!r}: expected [low, high] with low < high (OpenRLHF "
                          "asserts dynamic_filtering_range[0] < [1]: every group would be dropped)",
                          hint="e.g. --set grouping.keep_mean_between=[0,1] keeps the groups neither all solved nor "
                               "all failed")
    # blocks of grouping.size rows where the run groups by position, or has no groups but a size (OpenRLHF's gae)
    block = int(grouping["size"]) if grouping.get("by") in ("position", "none") and grouping.get("size") else None
    base = curation if curation is not None else FilterSpec(allow_empty=allow_empty)
    return dataclasses.replace(base, mean_between=(lo, hi), block_size=block)


def run_inputs(inputs: list[str], req: RunRequest, *, curation=None, progress=None, staging=None):
    """(RunResult, the curation's summary or None) of ``inputs`` (opened: ``advcli.formats.open_inputs``).

    ``curation``: an :class:`advcli.figures.curate.FilterSpec`; when active, the groups it drops are taken out
    before anything is computed and the result says so first among its warnings. ``staging``: the
    caller's :class:`advcli.io.commit.Staging`, whose temporary files the response-level outputs are
    finished in."""
    check_output_mode(req.output_mode)
    from ..engines import check_engine

    check_engine(req.engine)
    prefiltered, kept = None, None
    try:
        if curation is not None and curation.active:
            from ..figures.curate import prefilter_for_run, prefilter_path

            prefiltered = prefilter_path(req.output)  # known first: removed below however the run stops
            prefiltered, kept = prefilter_for_run(inputs, req.output, curation, req.columns, req.chunk_rows,
                                                  req.force, output_mode=req.output_mode)
        from ..engines import run as run_engine  # imports torch (and ray for --engine ray)

        try:
            result = run_engine(req.engine, [prefiltered] if prefiltered else inputs, req.output, req.cfg,
                                flavor=req.flavor, native=req.native, column_overrides=req.columns,
                                chunk_rows=req.chunk_rows, device=req.device, force=req.force, progress=progress,
                                output_mode=req.output_mode, write_columns=req.write_columns,
                                by_position=req.by_position, ray_address=req.ray_address,
                                ray_stall_timeout=req.ray_stall_timeout)
        except AdvcliError as e:  # a message names the user's file, not the temporary one of its kept rows
            if prefiltered and prefiltered in e.message:
                from ..figures.curate import input_row_message

                e.message = input_row_message(e.message, prefiltered, inputs[0])
                e.args = (e.message,)
            raise
    finally:
        if prefiltered:  # the kept rows removed, whatever signal comes meanwhile (advcli.io.commit.shielded)
            import sys

            from ..figures.curate import KEPT_ROWS

            KEPT_ROWS.pop(prefiltered, None)

            from ..io.commit import shielded

            with shielded(redeliver=not isinstance(sys.exc_info()[1], KeyboardInterrupt)):
                try:
                    os.remove(prefiltered)
                except FileNotFoundError:  # stopped before the filter wrote it
                    pass
    if prefiltered:
        from ..figures.curate import run_filter_note

        result.inputs = list(inputs)
        result.warnings.insert(0, run_filter_note(curation, kept))
    name_sources(result)  # the result names the trainer dumps, not their temporary Parquet
    if req.flavor:
        from ..flavors import at

        result.release = at(req.flavor).as_dict()  # which upstream release's semantics ran
    written = [staging.staged_path(o) if staging is not None else o for o in result.outputs]
    finish_outputs(inputs, written)  # response-level dumps: scalar advantages
    return result, kept
