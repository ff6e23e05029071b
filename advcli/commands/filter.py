"""``advcli filter DUMP --output OUT``: keep or drop whole groups (advcli.figures.curate), rows unchanged.

Also :func:`prefilter_for_run`: what ``advcli run --drop-uniform/--solve-rate/--min-group-size``
does first — the kept rows into a temporary file beside the output, so that the run computes every
group and batch statistic as if the dropped groups had never been sampled (DAPO's dynamic sampling).
"""
from __future__ import annotations

import sys

import typer

from . import options as opt

EPILOG = """
[bold]Examples[/]

  advcli filter sample_data/rollouts.parquet -o curated.parquet --drop-uniform
  advcli filter logs/exp_001 -o curated.parquet --drop-uniform        (a trainer's dump, as run reads it)
  advcli filter dump.parquet -o curated.parquet --solve-rate 0.1:0.9 --min-group-size 4
  advcli filter dump.parquet -o curated.parquet --metric acc --drop-uniform --report dropped.html
  advcli filter dump.parquet -o snr.parquet --variance-top-p 0.9
  advcli filter dump.parquet -o snr.parquet --variance-top-k 8 --mask-dropped
  advcli run dump.parquet -o out.parquet --flavor verl --set algorithm.adv_estimator=grpo --drop-uniform

A group is the rows sharing a prompt_id within a step (map another column with --column
prompt_id=NAME). The output holds the kept rows in input order with every column unchanged; the
summary (and --report .json/.md/.html) says what was dropped, per step and data source.

--variance-top-p/--variance-top-k is RAGEN-2's signal-to-noise filter: per step, the groups with the most
reward variance. --flavor verl (PR #7894) and --flavor skyrl (PR #2217), both open pull requests, follow
their rule: selection_eps 0.01 (top_p keeps no group of a step whose variance mass P·Σ is at most it), rows
with an all-zero response mask and non-finite rewards left out of a group's variance, and with
--variance-include-zero a zero-variance step (or P 1) keeps every group; verl ranks masked reward sums
(Σ token_level_scores·response_mask). Without a flavor it is RAGEN-2's rule; with trl (PR #7242, open)
too, since that pull request's filter function is not public where advcli can read it (only its call
site). Those pull requests mask the other groups out of the loss instead of removing them:
--mask-dropped does the same (every row kept, their response_mask set to 0). TRL's filter ranks the
rewards after its multi-reward aggregation: give its settings with --flavor trl --set.

  advcli filter completions.parquet -o snr.parquet --variance-top-p 0.9 --flavor trl \
--set multi_objective_aggregation=normalize_then_sum --set 'reward_funcs=\\[acc,fmt]'

  advcli filter dump.parquet -o snr.parquet --variance-top-p 0.9 --flavor verl --mask-dropped
"""


def filter_cmd(
    inputs: list[str] = opt.INPUTS,
    output: str = typer.Option(..., "--output", "-o", metavar="PATH",
                               help="Output Parquet file (one file for all inputs).", show_default=False),
    metric: str | None = typer.Option(None, "--metric", metavar="COLUMN",
                                         help="The per-row number groups are judged by (default: reward)."),
    drop_uniform: bool = opt.DROP_UNIFORM,
    solve_rate: str | None = opt.SOLVE_RATE,
    min_group_size: int | None = opt.MIN_GROUP_SIZE,
    variance_top_p: float | None = typer.Option(
        None, "--variance-top-p", metavar="P", help="Keep, per step, the highest-variance groups holding the share P "
        "of the step's reward variance (RAGEN-2 top_p; verl/TRL use 0.9)."),
    variance_top_k: int | None = typer.Option(
        None, "--variance-top-k", metavar="K", help="Keep, per step, the K groups with the most reward variance "
        "(RAGEN-2 top_k)."),
    variance_include_zero: bool = typer.Option(
        False, "--variance-include-zero", help="Let zero-variance groups be selected by --variance-top-p/-k."),
    variance_ddof: int = typer.Option(1, "--variance-ddof", metavar="D", help="Group variance Σ(m − mean)²/(n − D): "
                                      "1 sample variance, 0 population."),
    variance_selection_eps: float | None = typer.Option(
        None, "--variance-selection-eps", metavar="E", help="top_p keeps the shortest prefix reaching P·Σ variance − "
        "E, nothing where that is ≤ 0 (default: the flavor's rule, 0.01 for verl and skyrl, else 1e-12)."),
    flavor: str | None = typer.Option(
        None, "--flavor", "-f", metavar="NAME", help="Whose variance filter rule --variance-top-p/-k follows: verl "
        "(PR #7894), skyrl (PR #2217), both open; trl, others and none: RAGEN-2's (TRL PR #7242's own function "
        "is not public)."),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", metavar="KEY=VALUE", help="With --flavor trl: TRL's reward_funcs, reward_weights and "
        "multi_objective_aggregation; --variance-top-p/-k then rank TRL's aggregated rewards (PR #7242, open; "
        "under normalize_then_sum each reward z-scored in its group, then summed). Repeatable."),
    mask_dropped: bool = typer.Option(
        False, "--mask-dropped", help="Keep every row and set the dropped groups' response_mask to 0 (how verl "
        "PR #7894 and TRL PR #7242 apply the variance filter) instead of removing them."),
    by: str | None = typer.Option(None, "--by", metavar="COLUMN",
                                     help="Data-source column for the per-source figures (default: the first of "
                                          "data_source, domain, source, dataset, task present)."),
    allow_empty: bool = opt.ALLOW_EMPTY,
    column: list[str] | None = opt.COLUMN,
    from_: str | None = opt.FROM,
    chunk_rows: int = opt.chunk_rows(8192),
    force: bool = opt.FORCE,
    report: str | None = typer.Option(None, "--report", "-r", metavar="PATH",
                                         help="Write what was dropped to PATH: .json, .md or .html."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on the terminal."),
    json_out: bool = opt.json_out("the summary"),
):
    """Keep or drop whole groups (uniform reward, solve rate, group size, reward variance); rows unchanged."""
    from ..config import parse_column_maps
    from ..figures.curate import filter_dumps, make_spec
    from ..report import check_report_path

    spec = make_spec(drop_uniform, solve_rate, min_group_size, variance_top_p, variance_top_k, variance_include_zero,
                     variance_ddof, mask_dropped, allow_empty=allow_empty, flavor=flavor,
                     variance_selection_eps=variance_selection_eps, settings=set_)
    if report:
        check_report_path(report, list(inputs) + [output], force)
    from ..figures.curate import filter_sections
    from ..io.commit import staged
    from ._sections import emit
    from .progress import progress as _progress

    with staged(force) as outputs:  # the output is put in place last, after the report (advcli.io.commit)
        cb, stop = _progress(not quiet and not json_out)
        try:
            summary = filter_dumps(list(inputs), output, spec, source=from_, metric=metric, by=by,
                                   column_overrides=parse_column_maps(column), chunk_rows=chunk_rows, force=force,
                                   progress=cb)
        finally:
            stop()
        try:
            emit(summary, "filter", report, json_out, quiet, filter_sections, print_filter_summary)
            sys.stdout.flush()  # (the report's last bytes may still be buffered: a closed pipe shows here)
        except BrokenPipeError:  # `advcli filter ... --json | head -1`: the reader left; the filter still completes
            from .progress import silence_stdout

            silence_stdout()
        outputs.commit()


def print_filter_summary(rep: dict) -> None:
    from rich.markup import escape

    from ..figures.curate import filter_sections
    from ..report.terminal import kv_table, print_table, stderr_console

    con = stderr_console(highlight=False)
    _, sections = filter_sections(rep)
    t = kv_table(con.width)
    for a, b in sections[0][2]:
        t.add_row(escape(str(a)), escape(str(b)))
    con.print(t)
    for name, kind, payload in sections[1:]:
        if kind != "table" or not payload:
            continue
        header, rows = payload
        if len(rows) > 20:
            con.print(f"[bold]{escape(name)}[/]: {len(rows)} entries (all in --report or --json)")
            continue
        print_table(con, name, [str(h) for h in header],
                    [[x if isinstance(x, str) else ("–" if x is None else f"{x:,}" if isinstance(x, int)
                                                     else f"{x:.4g}") for x in r] for r in rows])
