"""``advcli validate DUMP``: everything ``advcli run`` would reject, without writing anything.

Parses and prints; :func:`advcli.pipeline.checks.check_run` does the work: the configuration, the plan and the
estimator's own rules, then one pass over the data with pyarrow and numpy (torch is not imported). ``--deep``
(and a user estimator) runs the whole pipeline without output, for the checks only the math makes.
"""
from __future__ import annotations

import json

import typer

from . import options as opt

EPILOG = """
[bold]Examples[/]

  advcli validate sample_data/rollouts.parquet
  advcli validate sample_data/rollouts.parquet --flavor verl --set algorithm.adv_estimator=gae
  advcli validate dump.parquet --flavor verl --set algorithm.use_kl_in_reward=true --output out.parquet
  advcli validate dump.parquet --flavor roll --set adv_estimator=grpo \\
      --set actor_infer.generating_args.num_return_sequences=8 --json

  advcli validate dump.parquet --estimator ./my_est.py:fn      (a user estimator: runs --deep by itself)

Exit code 0: `advcli run` with the same options would succeed. Exit code 2: the message says what it
would reject (file, row, column or key). With --output the output path is checked too. validate is
stricter in one place: NaN/inf in a token column the run carries into its output without reading it
(old_log_probs under GRPO without KL) is refused too, where the run would copy it.

Without --deep (fast, no torch): every key and estimator parameter, the columns the run needs, the
output path, and every value the run reads: nulls, masks other than 0/1, token columns whose rows are
not as long as the mask's, NaN/inf log-probs and values, NaN/inf rewards, rows without a trained token
where the reward must sit on one, steps that do not split into groups of grouping.size rows and
positional groups that disagree with prompt_id.
Only --deep (the whole run without output): a user estimator's output (shape, dtype, finite values),
whitening with too few valid tokens,
values the math makes non-finite, and the diagnostics (the --json verdict names what was not computed).
"""


def validate_cmd(
    inputs: list[str] = opt.INPUTS,
    flavor: str | None = opt.FLAVOR,
    estimator: str | None = opt.ESTIMATOR,
    set_: list[str] | None = opt.SET,
    config: str | None = opt.CONFIG,
    column: list[str] | None = opt.COLUMN,
    from_: str | None = opt.FROM,
    output: str | None = typer.Option(None, "--output", "-o", metavar="PATH",
                                         help="Also check that this output path is usable (nothing is written)."),
    force: bool = typer.Option(False, "--force", help="With --output: an existing output would be replaced."),
    chunk_rows: int = opt.chunk_rows(),
    padded: bool | None = opt.PADDED,
    precision: str | None = opt.PRECISION,
    device: str = opt.device("cpu", "auto, cpu or cuda (default cpu: validating needs no GPU)."),
    deep: bool = typer.Option(False, "--deep", help="Run the math too (imports torch): the checks only the "
                                                    "math makes, and the diagnostics (see below)."),
    json_out: bool = opt.json_out("the verdict"),
):
    """Check a dump and a configuration the way `advcli run` would, without writing (exit 0 = fine, 2 = rejected)."""
    from ..errors import AdvcliError
    from ..formats import name_sources, open_inputs
    from ..pipeline.checks import MATH_ONLY

    try:
        inputs = open_inputs(inputs, from_)  # trainer dumps -> canonical Parquet
        result, what, why, deep = _validate(inputs, flavor, set_, config, column, output, force, chunk_rows,
                                            padded, device, estimator, deep, precision)
        name_sources(result)
    except AdvcliError as e:
        if json_out:
            from ..formats import name_dump_rows  # the dump's file and line, as the error on stderr names them

            typer.echo(json.dumps({"valid": False, "error": name_dump_rows(e.message),
                                   "hint": name_dump_rows(e.hint) if e.hint else e.hint}))
        raise
    diags = [d for d in (getattr(result, "diagnostics", None) or []) if d.get("count")]
    est = result.config["estimator"]["name"]
    verdict = {"valid": True, "ran": what, "estimator": est, "inputs": result.inputs, "rows": result.rows,
               "tokens": result.tokens, "valid_tokens": result.valid_tokens,
               "warnings": list(getattr(result, "warnings", []) or []), "diagnostics": diags}
    if getattr(result, "no_token_data", None):  # a dump without token data: no token count to give
        del verdict["tokens"], verdict["valid_tokens"]
        verdict["no_token_data"] = result.no_token_data
    if not deep:
        verdict["not_computed"] = list(MATH_ONLY)  # figures only the math gives: --deep
    if why:  # the flavor runs the chosen estimator under another name (ROLL grpo: reinforce_plus_plus)
        verdict["why"] = why
    if json_out:
        typer.echo(json.dumps(verdict, default=str))
        return
    counts = ("no token data" if "no_token_data" in verdict
              else f"{result.tokens:,} tokens ({result.valid_tokens:,} with mask=1)")
    typer.echo(f"ok: {', '.join(result.inputs)} is valid for {what}: {result.rows:,} rows, {counts}")
    if verdict.get("why"):
        typer.echo(f"note: {verdict['why']}", err=True)
    for w in verdict["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    for d in diags:  # each once, a warning by its severity, with its one-line meaning
        label = "warning" if d.get("severity") == "warning" else "note"
        meaning = f": {d['meaning']}" if d.get("meaning") else ""
        typer.echo(f"{label}: {d.get('kind')}: {d.get('count')} {d.get('unit', '')}".rstrip() + meaning, err=True)


def _validate(inputs, flavor, set_, config, column, output, force, chunk_rows, padded, device, estimator=None,
              deep=False, precision=None):
    """(RunResult, what ran, why it runs under that name or None, whether the math ran) — raising the
    AdvcliError `run` would raise."""
    from .resolve import resolve_cli_config

    file_keys: list = []
    flavor, cfg, native, columns, auto_note = resolve_cli_config(inputs, flavor, set_, config, column, padded,
                                                                 file_keys=file_keys, estimator=estimator,
                                                                 precision=precision)
    from ..errors import AdvcliError, MissingColumn
    from ..pipeline.checks import check_run
    from ..runs.resolution import refuse_default_estimator_column

    try:
        result, ran_deep = check_run(inputs, cfg, column_overrides=columns, chunk_rows=chunk_rows, device=device,
                                     output=output, force=force, deep=deep, flavor=flavor, native=native)
    except MissingColumn as e:  # as run says it
        refuse_default_estimator_column(flavor, native or {}, e, inputs)
    except AdvcliError as e:  # the group size in the flavor's words, as run says it
        from ..flavors import at
        from ..runs.resolution import in_flavor_words

        raise in_flavor_words(e, at(flavor).flavor, inputs) from None
    if ran_deep and not deep:
        result.warnings.insert(0, "a user estimator: validated --deep (only running it checks what it returns)")
    if file_keys and file_keys[0].line():
        result.warnings.insert(0, f"config {file_keys[0].line()}")
    from ..flavors import estimator_note

    return result, auto_note or f"{flavor} {result.config['estimator']['name']}", estimator_note(flavor, native), \
        ran_deep
