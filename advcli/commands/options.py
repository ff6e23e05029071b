"""The command-line options that several commands share, each declared once: the same flag, metavar
and help wherever it appears (``run``, ``validate``, ``compare``, ``inspect``, ``stats``, ``explain``
and the commands to come).

A constant is an option that means the same in every command; a function builds one whose default
(or the thing it prints) differs between commands. Every option that takes a value names it with a
metavar (``PATH``, ``N``, ``KEY=VALUE`` ...), which ``--help`` shows as click does; a flag shows none
(see :mod:`advcli.commands.helpstyle`). Only typer is imported here: ``advcli --help`` stays fast.
"""
from __future__ import annotations

import typer

from ..flavors import flavor_names_text

INPUTS = typer.Argument(..., metavar="INPUT", show_default=False,
                        help="Input Parquet file(s), a directory or a glob, or a trainer's dump (a file or its "
                             "directory: docs/formats.md); several files are one dataset (groups may span them).")

FLAVOR = typer.Option(None, "--flavor", "-f", metavar="NAME[@RELEASE]",
                      help=f"Whose semantics: {flavor_names_text()}; @RELEASE picks an upstream release or commit "
                           "(nemo@7ea279a; default: the newest advcli verified; `advcli explain --flavor NAME "
                           "--history` lists them). "
                           "Default: the trainer whose keys the config file holds, else the trainer whose dump INPUT "
                           "is, else verl, GRPO when the dump has prompt_id. On a trainer's own dump, keys not "
                           "set take what the dump tells (the group size; AReaL: the trial's saved config.yaml "
                           "beside it, else AReaL's defaults), said in the summary; a default that cannot run "
                           "there stops, naming the setting that runs.")
SET = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help="A flavor key, VALUE parsed as YAML. Repeatable.")
ESTIMATOR = typer.Option(None, "--estimator", "-e", metavar="NAME",
                         help="The estimator that runs, in the flavor's pipeline: one of the flavor's own estimator "
                              "names, a registered one (`advcli explain --flavor advcli --keys`), or your function "
                              "as module:function, ./file.py:function or an entry point of group "
                              "advcli.estimators (docs/api.md); the key advcli.estimator in a config file.")
CONFIG = typer.Option(None, "--config", "-c", metavar="PATH",
                      help="YAML or TOML file of the same keys, or the trainer's whole training config: the "
                           "flavor takes its keys and names the sections it ignores; without --flavor, the file's "
                           "keys say whose they are (NeMo RL's grpo.*: nemo).")
FROM = typer.Option(None, "--from", metavar="FORMAT", help="Read INPUT as this trainer dump format (default: "
                    "recognised from file names and keys; docs/formats.md).")
COLUMN = typer.Option(None, "--column", metavar="ROLE=NAME", help="Read a role from another column, e.g. reward=score.")
PADDED = typer.Option(None, "--padded/--ragged",
                      help="Token lists are right-padded to one width (row length = last mask=1 position + 1) or "
                           "ragged. Default: padded only for fixed-size list columns.")

OUTPUT = typer.Option(..., "--output", "-o", metavar="PATH",
                      help="Output Parquet file (a directory for several inputs).", show_default=False)
FORCE = typer.Option(False, "--force", help="Replace an existing output.")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress or summary (errors still print).")
REPORT = typer.Option(None, "--report", "-r", metavar="PATH",
                      help="Also write a report: PATH.json (every figure), .md or .html (a page with plots).")


def chunk_rows(default: int = 4096):
    """``--chunk-rows N``: the rows one chunk holds (``stats`` reads fewer columns and takes more)."""
    return typer.Option(default, "--chunk-rows", metavar="N",
                        help="Most rows held in memory at once; fewer when responses are long (a chunk holds "
                             "about 512k tokens). Results do not depend on it.")


def device(default: str = "auto",
           text: str = "auto (the GPU for large token-level runs when triton is installed; the summary "
                       "says why), cpu or cuda."):
    """``--device DEVICE``: where the math runs (``validate`` defaults to cpu, the others to auto)."""
    return typer.Option(default, "--device", metavar="DEVICE", help=text)


def json_out(what: str):
    """``--json``: print ``what`` as JSON on stdout instead of the terminal summary."""
    return typer.Option(False, "--json", help=f"Print {what} as JSON on stdout.")

# group curation: `filter`, and `run` before computing (advcli.figures.curate)
DROP_UNIFORM = typer.Option(False, "--drop-uniform", help="Drop groups whose metric (reward) is the same for every "
                                                          "row: they carry no learning signal.")
SOLVE_RATE = typer.Option(None, "--solve-rate", metavar="LO:HI", help="Keep only groups whose mean metric lies in "
                                                                      "[LO, HI], e.g. 0.1:0.9.")
MIN_GROUP_SIZE = typer.Option(None, "--min-group-size", metavar="N", help="Drop groups with fewer than N rows.")
ALLOW_EMPTY = typer.Option(False, "--allow-empty", help="Write the result even when the group filter keeps no row "
                                                        "(else it stops, with the counts).")

# the experiment tracker a command's report also goes to (advcli.results.tracker)
LOG = typer.Option(None, "--log", metavar="TRACKER",
                   help="Also write the per-step metrics, summary, configuration and diagnostics to an experiment "
                        "tracker: wandb (a wandb run; offline unless logged in or WANDB_MODE says; pip install "
                        "'advcli\\[wandb]') or tensorboard:DIR (event files in DIR; pip install "
                        "'advcli\\[tensorboard]'). Repeatable. See docs/reports.md.")
LOG_PROJECT = typer.Option(None, "--log-project", metavar="NAME",
                           help="With --log wandb: the project (default: WANDB_PROJECT, else advcli).")
LOG_NAME = typer.Option(None, "--log-name", metavar="NAME",
                        help="With --log: the run's name (wandb's run name; TensorBoard: a sub-directory of DIR).")
LOG_STEP_OFFSET = typer.Option(0, "--log-step-offset", metavar="N",
                               help="With --log: add N to every step, so that the figures line up with the "
                                    "training run's own step axis.")

PRECISION = typer.Option(None, "--precision", metavar="DTYPE",
                         help="float32 (default) reproduces the frameworks, float32 artefacts included; float64 "
                              "computes the intended math (outputs are still written as float32).")

# --follow (advcli.commands.follow): a training run's dump directory followed as the trainer writes it
FOLLOW = typer.Option(False, "--follow", help="Watch the dump directory as the trainer writes it and take each "
                                              "step once complete: one line per step, --log per step (see "
                                              "docs/audit.md).")
SETTLE = typer.Option(None, "--settle", metavar="SECONDS",
                      help="With --follow: a step whose next step has not appeared yet is taken once its files "
                           "are quiet this long (default: 2).")
UNTIL_IDLE = typer.Option(None, "--until-idle", metavar="SECONDS",
                          help="With --follow: stop when nothing in the dump changed for this long, once the step on "
                               "disk is taken (default: until Ctrl-C).")
FAIL_FAST = typer.Option(False, "--fail-fast", help="With --follow: stop at the first step that disagrees.")
STATE = typer.Option(None, "--state", metavar="PATH",
                     help="With --follow: the follower's state file (a restart resumes after the last step "
                          "taken). Default: beside the outputs (run: OUT_DIR/follow-state.json; audit and "
                          "stats: REPORT.follow-state.json with --report), else none.")


def check_follow_only(follow: bool, settle: float | None, until_idle: float | None, state: str | None,
                      fail_fast: bool = False) -> float:
    """The options that mean something only with ``--follow``: refused without it (a run that ignored them would
    say nothing of it); returns the settle time, 2 s unless given."""
    if not follow:
        given = [name for name, value in (("--settle", settle), ("--until-idle", until_idle), ("--state", state),
                                          ("--fail-fast", fail_fast or None)) if value is not None]
        if given:
            from ..errors import AdvcliError

            raise AdvcliError(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} with --follow",
                              hint="add --follow to watch the dump directory as the trainer writes it, or leave "
                                   f"{'them' if len(given) > 1 else 'it'} out for a one-off pass over what is there")
    return 2.0 if settle is None else settle


def run_follow(inputs: list[str], opts, settle: float, until_idle: float | None, fail_fast: bool,
               state: str | None, report: str | None, trackers, json_out: bool, quiet: bool) -> None:
    """``--follow``: the one dump directory followed (:func:`advcli.commands.follow.follow`); exits with its
    code."""
    from ..errors import AdvcliError
    from .follow import follow

    if len(inputs) != 1:
        raise AdvcliError("--follow watches one dump directory", hint="give the directory the trainer writes into")
    if state is None and report and opts.command != "run":  # run: beside its outputs
        state = report + ".follow-state.json"
    opts.report = report
    code = follow(inputs[0], opts, settle=settle, until_idle=until_idle, fail_fast=fail_fast, state_path=state,
                  trackers=trackers, json_out=json_out, quiet=quiet)
    raise typer.Exit(code)


def log_targets(log: list[str] | None, project: str | None, name: str | None, step_offset: int):
    """The --log options as :class:`advcli.results.tracker.LogTarget`, checked (and the library found) before any
    work."""
    if not log and not (project or name or step_offset):
        return []
    from ..results.tracker import parse_targets

    return parse_targets(log, project, name, step_offset)


def send_to_trackers(report: dict, targets, quiet: bool = False) -> None:
    """Write a finished report to the --log targets; say where each went on stderr (unless quiet)."""
    if not targets:
        return
    from ..results.tracker import log_report

    for line in log_report(report, targets):
        if not quiet:
            typer.echo(line, err=True)
