"""advcli: offline advantages for LLM RL rollouts, with the semantics of verl, NeMo RL, ROLL,
OpenRLHF, TRL, slime, SkyRL, AReaL, prime-rl or open-instruct, streamed from Parquet to Parquet.

Library use::

    import advcli
    result = advcli.run("rollouts.parquet", "out.parquet", flavor="verl",
                        settings={"algorithm.adv_estimator": "grpo"})
    advcli.stats("out.parquet"); advcli.audit("dump.parquet"); advcli.compare("a.parquet", "b.parquet")

Each call takes a path (or a list of them) or an in-memory ``pyarrow.Table`` / ``pandas.DataFrame``, and
returns a result that shows its report in Jupyter and converts to Arrow / pandas (``.table``,
``.to_pandas()``; :mod:`advcli.results`, :mod:`advcli.results.notebook`).

Importing advcli does not import torch; the math modules do, when first used.
"""
from .errors import AdvcliError, MissingColumn
from .version import __version__

__all__ = ["__version__", "run", "stats", "audit", "compare", "filter", "estimator", "AdvcliError", "MissingColumn"]


def _in_library_words(call):
    """``call`` raising its AdvcliError in the call's keywords (``precision='float16'``, not ``--precision``),
    also for what it checks before reading an input (an in-memory input's errors are reworded there too)."""
    import functools

    @functools.wraps(call)
    def wrapped(*args, **kwargs):
        from .errors import AdvcliError, library_words

        try:
            return call(*args, **kwargs)
        except AdvcliError as e:
            e.message = library_words(e.message)
            e.hint = library_words(e.hint) if e.hint else e.hint
            e.args = (e.message,)
            raise

    return wrapped


def _specs(inputs) -> list:
    """One input (a path, a table) or a list of them, as a list."""
    if isinstance(inputs, (list, tuple)):
        return list(inputs)
    return [inputs]


def _setting_pairs(settings) -> list:
    """``settings`` as (key, value) pairs in order, as ``--set`` gives them: a nested section
    (``{'algorithm': {'adv_estimator': 'grpo'}}``) in dotted keys, as a config file's are read, down to a key
    that takes a mapping (``reward.norm``: its mapping is its value); a text value read as ``--set`` reads its
    text where it stands for a bool, null, a list or a mapping (:func:`_text_value`)."""
    from .config import flatten_keys
    from .flavors import flavor_keys, listed

    whole = {k for f in listed() for k, key in flavor_keys(f).items() if key.kind == "any"}  # may hold a mapping
    flat = flatten_keys(dict(settings or {}), keep_empty=True, whole=whole)
    return [(k, _text_value(v) if isinstance(v, str) else v) for k, v in flat.items()]


def _text_value(text: str):
    """A text setting as ``--set`` reads it where the text stands for something else: true/false, null, a
    list or a mapping (``'false'`` for a bool key was refused where ``--set k=false`` runs). A number's text
    stays text, which a number key reads as its number: YAML would read verl's threshold ``'0.1_2'`` (lower 0.1,
    upper 2) as 0.12, where the caller wrote a string."""
    from .config import parse_value
    from .errors import AdvcliError

    try:
        value = parse_value(text)
    except AdvcliError:  # not YAML: the text itself, as the key will say
        return text
    return value if value is None or isinstance(value, (bool, list, dict)) else text


def _dump_rows(message: str) -> str:
    """A message naming a converted trainer dump's temporary Parquet, naming the dump's file and line instead (as
    the command line's error does: :func:`advcli.formats.name_dump_rows`)."""
    from .formats import name_dump_rows

    return name_dump_rows(message)


def _check_arguments(flavor=None, settings=None, columns=None, chunk_rows=1, config=None) -> None:
    """The call's arguments of the wrong kind refused as the command refuses its options, naming the keyword:
    a flavor that is not a name, settings that are not a mapping, a column role advcli does not know (a
    misspelt role was taken as a column of its own, and the run read the default column), chunk_rows that
    is not a whole number, a mapping as ``config`` (a file's path)."""
    import numbers

    from .config import check_column_roles
    from .errors import AdvcliError

    if flavor is not None and not isinstance(flavor, str):
        raise AdvcliError(f"flavor={flavor!r}: expected a flavor's name, e.g. flavor='verl' or flavor='nemo@7ea279a'")
    if settings is not None and not hasattr(settings, "items"):
        raise AdvcliError(f"settings: expected a mapping of the flavor's keys to values, got {type(settings).__name__}",
                          hint="settings={'algorithm.adv_estimator': 'grpo'}")
    if config is not None and hasattr(config, "items"):
        raise AdvcliError("config: expected the path of a YAML/TOML file of settings, got a mapping",
                          hint="give the mapping as settings= (nested sections too: settings={'algorithm': "
                               "{'adv_estimator': 'grpo'}}), or write it to a file and give its path")
    if columns is not None:
        if not hasattr(columns, "items") or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in columns.items()):
            raise AdvcliError("columns: expected a mapping of roles to column names",
                              hint="columns={'reward': 'score'}")
        check_column_roles(columns, "columns=")
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, numbers.Integral)
                                   or chunk_rows < 1):
        raise AdvcliError(f"chunk_rows must be a whole number of rows, at least 1 (got {chunk_rows!r})")


@_in_library_words
def run(inputs, output=None, *, flavor: str | None = None, settings: dict | None = None, estimator=None,
        config: str | None = None, columns: dict | None = None, source: str | None = None, chunk_rows: int = 4096,
        device: str = "auto", force: bool = False, precision: str | None = None, padded: bool | None = None,
        output_mode: str = "full", write_columns: list[str] | None = None, engine: str = "local",
        ray_address: str | None = None, ray_stall_timeout: float | None = None, drop_uniform: bool = False,
        solve_rate: str | None = None, min_group_size: int | None = None, allow_empty: bool = False, log=None,
        log_project: str | None = None, log_name: str | None = None, log_step_offset: int = 0):
    """Run the pipeline as ``advcli run`` does (the command calls the same code) and return its
    :class:`advcli.results.RunResult`; each argument is the command's option of that name.

    ``inputs``: a path, a list of paths/directories/globs, or an in-memory ``pyarrow.Table`` /
    ``pandas.DataFrame`` (with ``output=None`` its rows with the new columns come back in
    ``result.table``); ``output``: a path, or None to compute without writing; ``flavor``: ``NAME`` or
    ``NAME@RELEASE`` (default, as ``advcli run`` chooses: the flavor a ``config`` file names or whose keys it
    holds, else the flavor of the trainer whose dump ``inputs`` is, unless ``settings`` are verl's, else verl with
    its estimator chosen from the dump: GRPO with a ``prompt_id`` column, else GAE with ``values``;
    ``result.chosen`` says which); ``settings``: the
    flavor's own keys (``{"algorithm.adv_estimator": "gae"}``, ``--set``); ``estimator``: the estimator that
    runs instead of the flavor's (``--estimator``): a name, a ``"module:function"`` / ``"file.py:function"``
    reference, or a function (see :func:`estimator`); ``config``: a YAML/TOML file of settings (``--config``);
    ``columns``: role → column name (``--column``); ``source``: a trainer dump format (``--from``; default:
    recognised from file names and keys, docs/formats.md); ``precision``: ``"float32"`` (the frameworks'
    numbers) or ``"float64"``; ``padded`` (``--padded``); ``output_mode``: ``"full"`` (the input plus the new
    columns) or ``"sidecar"``; ``write_columns``: the new columns to write (a subset of ``["advantages",
    "returns", "token_level_rewards"]``; None: all the run produces); ``engine``: ``"local"`` or ``"ray"``
    (with ``ray_address``, ``ray_stall_timeout``); ``drop_uniform``, ``solve_rate``, ``min_group_size``: whole
    groups dropped first (``result.curation``; one that keeps no row is refused unless ``allow_empty``);
    ``log``: tracker targets (``["wandb"]``,
    ``["tensorboard:DIR"]``) the report is sent to, with ``log_project``, ``log_name``, ``log_step_offset``.
    """
    from .errors import AdvcliError, library_words
    from .formats import open_inputs
    from .io.frames import FrameInputs, frame_kind
    from .runs.resolution import check_precision
    from .runs.runner import run_dump

    check_precision(precision)
    _check_arguments(flavor, settings, columns, chunk_rows, config)
    trackers = _trackers(log, log_project, log_name, log_step_offset)  # checked before any work
    estimator = _user_estimator(estimator)
    given = _specs(inputs)
    with FrameInputs(_dump_rows) as frames:
        specs = open_inputs([frames.path(s) for s in given], source)  # trainer dumps -> canonical Parquet
        keep_rows = output is None and any(frame_kind(s) for s in given)  # rows back in memory
        if keep_rows and len(specs) > 1:
            raise AdvcliError(f"{len(specs)} inputs with output=None: the rows come back in memory (result.table) "
                              "from one input",
                              hint="join them into one table first (pa.concat_tables([...]) or pd.concat([...]): "
                                   "several inputs are one dataset, so the numbers are the same), or give "
                                   "output='DIR/' to write one file per input")
        target = frames.output_path() if keep_rows else (None if output is None else str(output))
        # the outputs are put in place as written: no staging in a library call
        result = run_dump(specs, target, flavor=flavor, settings=_setting_pairs(settings), estimator=estimator,
                          config=None if config is None else str(config), columns=columns, padded=padded,
                          precision=precision, chunk_rows=chunk_rows, device=device, force=force,
                          output_mode=output_mode, write_columns=write_columns, engine=engine,
                          ray_address=ray_address, ray_stall_timeout=ray_stall_timeout, drop_uniform=drop_uniform,
                          solve_rate=solve_rate, min_group_size=min_group_size, allow_empty=allow_empty)
        if keep_rows:
            import pyarrow.parquet as pq

            result.output_table = pq.read_table(target)
            result.outputs = []
        result.inputs = frames.named(result.inputs)
        result.device = library_words(result.device)  # "cpu (device='auto': ...)"
        result.warnings = frames.named([library_words(w) for w in result.warnings])  # keywords, not --flags
        result.diagnostics = frames.named(result.diagnostics)
        if result.curation is not None:
            result.curation = frames.named(result.curation)
    if trackers:
        from .results.tracker import log_report

        log_report(result.report, trackers)
    return result


@_in_library_words
def stats(inputs, *, columns: dict | None = None, chunk_rows: int = 8192, source: str | None = None,
          padded: bool | None = None):
    """The figures of a dump or an advcli output, like ``advcli stats``: an :class:`advcli.results.notebook.StatsResult`
    (``.metrics``, ``.per_step``, ``.diagnostics``; ``.table``: one row per step). ``inputs``: as
    :func:`run`; ``columns``: role → column name, as ``--column``; ``padded``: as ``--padded/--ragged``."""
    from .formats import name_dumps, open_inputs
    from .io.frames import FrameInputs
    from .results.notebook import StatsResult
    from .runs.stats import dump_statistics

    _check_arguments(columns=columns, chunk_rows=chunk_rows)
    with FrameInputs(_dump_rows) as frames:
        specs = open_inputs([frames.path(s) for s in _specs(inputs)], source)
        rep = frames.named(name_dumps(dump_statistics(specs, columns or {}, chunk_rows, padded=padded)))
    return StatsResult(rep)


@_in_library_words
def filter(inputs, output=None, *, drop_uniform: bool = False, solve_rate: str | None = None,  # noqa: A001
           min_group_size: int | None = None, variance_top_p: float | None = None, variance_top_k: int | None = None,
           variance_include_zero: bool = False, variance_ddof: int = 1, variance_selection_eps: float | None = None,
           flavor: str | None = None, settings: dict | None = None, mask_dropped: bool = False,
           metric: str | None = None, by: str | None = None, columns: dict | None = None, source: str | None = None,
           chunk_rows: int = 8192, force: bool = False, allow_empty: bool = False):
    """Keep or drop whole groups, like ``advcli filter``: an :class:`advcli.results.notebook.FilterResult` (its
    report, ``.summary``, as ``--json`` prints it; ``.table``: the kept rows, read back from ``output``, or held in
    memory with ``output=None``). Each argument is the command's option of that name: ``drop_uniform``,
    ``solve_rate`` (``"LO:HI"``), ``min_group_size``, ``variance_top_p``/``variance_top_k`` (RAGEN-2's variance
    filter, with ``variance_include_zero``, ``variance_ddof``, ``variance_selection_eps``), ``flavor`` (whose
    --drop-uniform and variance rules: verl, skyrl; ``settings``: TRL's reward aggregation keys with
    ``flavor="trl"``), ``mask_dropped``, ``metric`` (the column the rules read; default the reward), ``by`` (the
    data-source column), ``columns`` (``--column``), ``source`` (``--from``). ``inputs``: as :func:`run`."""
    from .figures.curate import filter_dumps, make_spec
    from .io.frames import FrameInputs
    from .results.notebook import FilterResult

    _check_arguments(flavor, settings, columns, chunk_rows)
    pairs = _setting_pairs(settings)
    spec = make_spec(drop_uniform, solve_rate, min_group_size, variance_top_p, variance_top_k, variance_include_zero,
                     variance_ddof, mask_dropped, allow_empty=allow_empty, flavor=flavor,
                     variance_selection_eps=variance_selection_eps, settings=pairs or None)
    with FrameInputs(_dump_rows, rows_dropped=True) as frames:
        given = [frames.path(s) for s in _specs(inputs)]
        target = frames.output_path() if output is None else str(output)
        summary = frames.named(filter_dumps(given, target, spec, source=source, check_output=output is not None,
                                            metric=metric, by=by, column_overrides=dict(columns or {}),
                                            chunk_rows=chunk_rows, force=force))
        import pyarrow.parquet as pq

        kept = pq.read_table(target) if output is None else None
        if output is None:
            summary["output"] = None
    return FilterResult(summary, kept)


def _trackers(log, log_project, log_name, log_step_offset) -> list:
    """``log``/``log_project``/``log_name``/``log_step_offset`` (``--log`` ...) as tracker targets, checked
    (and the library found) before any work; [] when none is given."""
    if not (log or log_project or log_name or log_step_offset):
        return []
    from .results.tracker import parse_targets

    return parse_targets([log] if isinstance(log, str) else log, log_project, log_name, log_step_offset)


def _user_estimator(estimator):
    """A function given as ``estimator=`` kept as a user estimator (its reference); anything else as given."""
    if estimator is not None and callable(estimator):
        from .estimators.user import register_function

        return register_function(estimator)
    return estimator


@_in_library_words
def audit(inputs, *, flavor: str | None = None, settings: dict | None = None, estimator=None,
          config: str | None = None, columns: dict | None = None, against: str | None = None,
          rtol: float | None = None, atol: float | None = None, search: bool = True, top: int = 10,
          chunk_rows: int = 4096, device: str = "auto", source: str | None = None, log=None,
          log_project: str | None = None, log_name: str | None = None, log_step_offset: int = 0):
    """Check logged advantages against advcli's recomputation, like ``advcli audit`` (the same resolution and
    the same audit): an :class:`advcli.results.notebook.AuditResult` (``.agree``; ``.table``: the worst rows).
    ``flavor``: ``NAME`` or ``NAME@RELEASE``, default as :func:`run` chooses (the one a ``config`` file names or
    whose keys it holds, else the dump's trainer unless verl's keys are given, else verl, GRPO when the dump has
    prompt_id); ``settings``: the flavor's own keys (``--set``); ``estimator``: ``--estimator`` (a name, a
    reference, or a function); ``config``: a YAML/TOML file of settings (``--config``); ``against``: the logged
    column (default: where the trainer logged them; in Parquet ``advantages``, else ``advantage``);
    ``rtol``/``atol`` default as the command's (1e-4, 1e-5, ``atol`` widened where the dump may round its logged
    values); ``log``...: tracker targets, as :func:`run`; the rest as :func:`run` and the command's options."""
    from .audit.recompute import audit_dump, check_tolerances, logged_inputs
    from .formats import open_inputs
    from .io.frames import FrameInputs
    from .results.notebook import AuditResult
    from .runs.resolution import resolve_run
    from .version import stamp

    check_tolerances(rtol, atol, top, keyword=True)
    _check_arguments(flavor, settings, columns, chunk_rows, config)
    trackers = _trackers(log, log_project, log_name, log_step_offset)
    estimator = _user_estimator(estimator)
    with FrameInputs(_dump_rows) as frames:
        specs = open_inputs(logged_inputs([frames.path(s) for s in _specs(inputs)], source, against), source)
        # the command's resolution (advcli.commands.resolve: resolve_run), option for option; without a flavor, the
        # dump's trainer's
        choice = resolve_run(specs, flavor, _setting_pairs(settings), estimator=estimator,
                             config=None if config is None else str(config), columns=dict(columns or {}))
        rep = audit_dump(specs, choice.flavor, choice.cfg, choice.native, dict(columns or {}),
                         auto_note=choice.chosen, flavor_note=choice.dump_note,
                         against=against, rtol=rtol, atol=atol, chunk_rows=chunk_rows, device=device, search=search,
                         top=top)
        rep = frames.named(stamp(rep, "audit"))
    if trackers:
        from .results.tracker import log_report

        log_report(rep, trackers)
    return AuditResult(rep)


@_in_library_words
def compare(a, b=None, *, configs: list[dict] | None = None, estimators=None, flavor: str | None = None,
            settings: dict | None = None, config: str | None = None, columns: dict | None = None, top: int = 10,
            chunk_rows: int = 4096, device: str = "auto", source: str | None = None, log=None,
            log_project: str | None = None, log_name: str | None = None, log_step_offset: int = 0):
    """Compare sets of advantages, like ``advcli compare``: an :class:`advcli.results.notebook.CompareResult`
    (``.table``: the groups that differ most). The command's three forms:

    - ``compare(A, B)``: two advcli outputs of the same rows (``advcli compare A B``);
    - ``compare(DUMP, configs=[{"flavor": "verl", "settings": {...}}, {...}])``: one dump run under two
      configurations (``--flavor F --set K=V ... --flavor F2 ...``); a configuration may also hold ``"set":
      ["K=V"]``, ``"config": PATH`` and ``"estimator": NAME`` (as ``run``'s ``estimator``); another key is
      refused; ``settings``/``config`` given beside ``configs`` apply to both (the ``--set``/``--config`` before
      the first ``--flavor``);
    - ``compare(DUMP, estimators=["grpo", "rloo", fn])`` (or ``"grpo,rloo"``): two or more estimators in one
      flavor's pipeline, every pair (``--estimators``), with ``flavor``, ``settings`` and ``config`` for all.

    Each of ``a``, ``b`` is a path or an in-memory table, as :func:`run` takes; ``columns``: ``--column``;
    ``log``...: tracker targets, as :func:`run`."""
    from .errors import AdvcliError
    from .formats import name_dumps, open_inputs
    from .io.frames import FrameInputs
    from .results.notebook import CompareResult
    from .runs.compare import compare_configurations, compare_files, compare_runs, estimator_runs
    from .version import stamp

    _check_arguments(flavor, settings, columns, chunk_rows, config)
    forms = (b is not None) + (configs is not None) + (estimators is not None)
    if forms != 1 or (configs is not None and len(configs) != 2):
        raise AdvcliError("compare: give two outputs (compare(a, b)), one dump and two configurations "
                          "(compare(dump, configs=[{...}, {...}])), or one dump and estimators "
                          "(compare(dump, estimators=['grpo', 'rloo']))",
                          hint="compare('dump.parquet', configs=[{'flavor': 'verl', 'settings': "
                               "{'algorithm.adv_estimator': 'grpo'}}, {'flavor': 'verl', 'settings': "
                               "{'algorithm.adv_estimator': 'rloo'}}])")
    if b is not None and (flavor or settings or config):
        raise AdvcliError("compare: flavor, settings and config configure a run; two outputs are compared as "
                          "they are", hint="compare(dump, configs=[...]) or compare(dump, estimators=[...])")
    if configs is not None:
        if flavor is not None:
            raise AdvcliError("compare: each configuration names its flavor (configs=[{'flavor': ...}, ...])")
        configs = [dict(c) for c in configs]
        for c in configs:  # what is given beside the configurations applies to both, as before the first --flavor
            own = c.get("settings") or {}
            if hasattr(own, "items"):  # (another kind is refused by compare_configurations, naming it)
                c["settings"] = dict(_setting_pairs(settings) + _setting_pairs(own))
            if config is not None and c.get("config") is None:
                c["config"] = str(config)
    trackers = _trackers(log, log_project, log_name, log_step_offset)
    with FrameInputs(_dump_rows) as frames:
        several = b is None and isinstance(a, (list, tuple))  # one dump of several files, as run takes it
        paths = open_inputs([frames.path(x) for x in (list(a) if several else [a] if b is None else [a, b])], source)
        dump = paths if several else paths[0]
        if b is not None:
            import os

            labels = tuple(frames.names.get(p) or os.path.basename(p) for p in paths)  # a table by its kind
            res = compare_files(paths[0], paths[1], labels=labels, top=top, column_overrides=columns or {})
        elif estimators is not None:
            runs = estimator_runs(paths, estimators, flavor, _setting_pairs(settings),
                                  None if config is None else str(config), columns)
            res = compare_runs(dump, runs, columns=columns or {}, top=top, chunk_rows=chunk_rows, device=device)
        else:
            res = compare_configurations(dump, configs, columns=columns or {}, top=top, chunk_rows=chunk_rows,
                                         device=device)
        res = frames.named(stamp(name_dumps(res), "compare"))
    if trackers:
        from .results.tracker import log_report

        log_report(res, trackers)
    return CompareResult(res)


def estimator(fn=None, *, level: str = "row", needs=(), groups: bool | None = None, name: str | None = None):
    """Declare your own estimator: ``@advcli.estimator(level="token", needs=("values",))`` (docs/api.md).

    ``level``: ``"row"`` (called per step with ``rewards``, ``group``, ``lengths``, ``step``; returns one
    advantage per row) or ``"token"`` (called per chunk with ``[B, T]`` ``token_rewards``, ``mask`` and the
    token columns in ``needs``; returns ``[B, T]``); ``groups``: the run groups rows by prompt (default:
    the function has a ``group`` parameter); ``name``: the name messages show. Imports no torch."""
    from .estimators.user import estimator as declare

    return declare(fn, level=level, needs=needs, groups=groups, name=name)


# advcli.audit and advcli.compare are also the names of subpackages (advcli/audit/, advcli/runs/compare.py):
# importing one would set the package's attribute to the module, hiding the function. The package keeps
# its functions; the modules are imported by their full names as ever (sys.modules holds them).
def _keep_the_library_calls() -> None:
    import sys
    import types

    calls = {"run": run, "stats": stats, "audit": audit, "compare": compare, "filter": filter, "estimator": estimator}

    class _Package(types.ModuleType):
        def __setattr__(self, name, value):
            if name in calls and isinstance(value, types.ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package


_keep_the_library_calls()
