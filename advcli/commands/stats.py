"""``advcli stats DUMP``: parse, then print :func:`advcli.runs.stats.dump_statistics` in the run
report's formats.
"""
from __future__ import annotations

import typer

from . import options as opt

EPILOG = """
[bold]Examples[/]

  advcli stats sample_data/rollouts.parquet
  advcli run sample_data/rollouts.parquet -o out.parquet && advcli stats out.parquet --report stats.html
  advcli stats out.parquet --report stats.md
  advcli stats out.parquet --json | python -m json.tool
  advcli stats out.parquet --log tensorboard:runs --log-step-offset 100
  advcli stats logs/exp_001 --follow --log wandb

On a raw dump: score, reward, response-length and group figures, and the advantages the trainer logged where
the dump holds them (NeMo RL, TRL, prime-rl, open-instruct). On an advcli output: also the
advantages and returns (mean/min/max, quantiles, histogram, advantage by token position) and the
configuration that produced them. --report writes .json, .md or .html (a page with plots).
With both old_log_probs and rollout_log_probs: also verl's rollout_corr/* figures, made with the rollout
correction's own math (the only case where stats loads torch).
"""


def stats_cmd(
    inputs: list[str] = typer.Argument(..., metavar="INPUT",
                                       help="A dump or an advcli output (files, a directory or a glob).",
                                       show_default=False),
    report: str | None = opt.REPORT,
    column: list[str] | None = opt.COLUMN,
    padded: bool | None = opt.PADDED,
    chunk_rows: int = opt.chunk_rows(8192),
    quiet: bool = opt.QUIET,
    json_out: bool = opt.json_out("every figure"),
    from_: str | None = opt.FROM,
    log: list[str] | None = opt.LOG,
    log_project: str | None = opt.LOG_PROJECT,
    log_name: str | None = opt.LOG_NAME,
    log_step_offset: int = opt.LOG_STEP_OFFSET,
    follow: bool = opt.FOLLOW,
    settle: float | None = opt.SETTLE,
    until_idle: float | None = opt.UNTIL_IDLE,
    state: str | None = opt.STATE,
):
    """The statistics of a dump or an advcli output: verl's metrics, quantiles, histograms, groups."""
    from ..config import parse_column_maps
    from ..report import check_report_path, emit

    if report:
        check_report_path(report, list(inputs) + [state])
    trackers = opt.log_targets(log, log_project, log_name, log_step_offset)
    settle = opt.check_follow_only(follow, settle, until_idle, state)
    if follow:
        from .follow import Options

        opts = Options("stats", column=column, source=from_, chunk_rows=chunk_rows)
        opt.run_follow(list(inputs), opts, settle, until_idle, False, state, report, trackers, json_out, quiet)
    from ..formats import name_dumps, open_inputs
    from ..runs.stats import dump_statistics
    from .progress import progress

    inputs = open_inputs(inputs, from_)  # trainer dumps -> canonical Parquet
    show = not quiet and not json_out
    cb, stop = progress(show)
    try:
        rep = dump_statistics(inputs, parse_column_maps(column), chunk_rows, progress=cb, padded=padded)
    finally:
        stop()
    rep = name_dumps(rep)  # the dumps the user gave, not their temporary Parquet
    emit(rep, report, json_out, show)
    opt.send_to_trackers(rep, trackers, quiet)
