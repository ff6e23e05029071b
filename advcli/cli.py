"""The ``advcli`` command line: parsing and printing only (the math lives in advcli.pipeline)."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import typer

from .commands import helpstyle, register
from .commands import options as opt
from .commands.progress import progress, silence_stdout
from .errors import AdvcliError, caused_by_interrupt
from .flavors import framework_names
from .lazy_torch import import_held
from .version import __version__

app = typer.Typer(
    name="advcli",
    help="Recompute advantages, returns and KL-shaped rewards of saved LLM RL rollouts (Parquet), with "
         f"the exact semantics of {framework_names()}.\n\n"
         "Start with:  advcli run sample_data/rollouts.parquet --output out.parquet",
    cls=helpstyle.Group, no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _err(msg: str) -> None:
    from rich.markup import escape

    from .report.terminal import stderr_console

    # the message is plain text: "[acc, fmt]" in a hint must print as written, not as markup
    # (emoji off: a function named file.py:boom: in a message is text, not an emoji code); a stderr that is
    # gone or full takes nothing, and the exit status stays the error's
    stderr_console(highlight=False, soft_wrap=True, emoji=False).print(
        f"[bold red]advcli: error:[/] {escape(msg)}", markup=True)


def _version(value: bool):
    if value:
        typer.echo(f"advcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    pass


RUN_EPILOG = """
[bold]Examples[/]

  advcli run sample_data/rollouts.parquet --output out.parquet
  advcli run dump.parquet -o out.parquet --flavor verl --set algorithm.adv_estimator=gae --set algorithm.gamma=0.99
  advcli run dump.parquet -o out.parquet --flavor verl --set algorithm.adv_estimator=grpo \\
      --set algorithm.use_kl_in_reward=true --set algorithm.kl_penalty=low_var_kl
  advcli run dump.parquet -o out.parquet --flavor advcli --set estimator.name=rloo --set reward.normalize.mean=batch
  advcli run dump.parquet -o out.parquet --column reward=score --config my_run.yaml --chunk-rows 2048
  advcli run dump.parquet -o out.parquet --log wandb --log-project my-run --log-step-offset 100
  advcli run dump.parquet -o out.parquet --log tensorboard:runs --log-name rloo --set algorithm.adv_estimator=rloo
  advcli run logs/exp_001 --follow -o advantages/   (one step_N.parquet per step as the trainer writes it)

Keys are the framework's own (see `advcli explain --flavor NAME --keys`); a key not given takes the
framework's default. VALUE is YAML: true, 0.95, null, \\[acc,fmt].
"""


@app.command(epilog=RUN_EPILOG, cls=helpstyle.Command)
def run(
    inputs: list[str] = opt.INPUTS,
    output: str = opt.OUTPUT,
    flavor: str | None = opt.FLAVOR,
    estimator: str | None = opt.ESTIMATOR,
    set_: list[str] | None = opt.SET,
    config: str | None = opt.CONFIG,
    column: list[str] | None = opt.COLUMN,
    from_: str | None = opt.FROM,
    chunk_rows: int = opt.chunk_rows(),
    device: str = opt.device(),
    output_mode: str = typer.Option("full", "--output-mode", metavar="MODE",
                                    help="full (the input plus the new columns) or sidecar (only the new "
                                         "columns plus the row keys row_index, prompt_id, step: a smaller file "
                                         "that joins back to the input; see docs/performance.md)."),
    write_columns: str | None = typer.Option(None, "--write-columns", metavar="A,B",
                                                help="Which new columns to write, comma-separated: advantages, "
                                                     "returns, token_level_rewards (written when KL enters the "
                                                     "reward), rollout_is_weights and response_mask_after_rs "
                                                     "(with verl's rollout correction). Default: all the run "
                                                     "produces."),
    engine: str = typer.Option("local", "--engine", metavar="ENGINE",
                               help="local (this process) or ray (a Ray cluster via Ray Data; OUTPUT is then a "
                                    "directory of part files in row order; pip install 'advcli\\[ray]'). "
                                    "See docs/distributed.md."),
    ray_address: str | None = typer.Option(None, "--ray-address", metavar="ADDR",
                                              help="With --engine ray: the cluster to join (e.g. "
                                                   "ray://head:10001 or auto). Default: RAY_ADDRESS, else a "
                                                   "local Ray instance."),
    ray_stall_timeout: float | None = typer.Option(
        None, "--ray-stall-timeout", metavar="SECONDS",
        help="With --engine ray: after a worker node is lost, stop the run (nothing written) when it makes "
             "no progress for this long. Default: ADVCLI_RAY_STALL_TIMEOUT, else 300."),
    force: bool = opt.FORCE,
    padded: bool | None = opt.PADDED,
    precision: str | None = opt.PRECISION,
    quiet: bool = opt.QUIET,
    json_out: bool = opt.json_out("the run summary"),
    report: str | None = opt.REPORT,
    drop_uniform: bool = opt.DROP_UNIFORM,
    solve_rate: str | None = opt.SOLVE_RATE,
    min_group_size: int | None = opt.MIN_GROUP_SIZE,
    allow_empty: bool = opt.ALLOW_EMPTY,
    log: list[str] | None = opt.LOG,
    log_project: str | None = opt.LOG_PROJECT,
    log_name: str | None = opt.LOG_NAME,
    log_step_offset: int = opt.LOG_STEP_OFFSET,
    follow: bool = opt.FOLLOW,
    settle: float | None = opt.SETTLE,
    until_idle: float | None = opt.UNTIL_IDLE,
    state: str | None = opt.STATE,
):
    """Compute advantages and returns for a rollout dump and write it back with the new columns."""
    from .config import parse_column_maps, parse_set
    from .engines import check_engine
    from .formats import open_inputs
    from .runs.resolution import check_precision

    check_engine(engine)
    check_precision(precision)
    trackers = opt.log_targets(log, log_project, log_name, log_step_offset)  # checked before any work
    settle = opt.check_follow_only(follow, settle, until_idle, state)
    settings, columns = parse_set(set_), parse_column_maps(column)
    if follow:  # OUTPUT is a directory: one step_N.parquet per step, each put in place whole as it lands
        from .commands.follow import Options

        if output.endswith(".parquet") or os.path.isfile(output):
            raise AdvcliError(f"--output {output}: --follow writes one step_N.parquet per step into a directory",
                              hint="give a directory: -o advantages/")
        unsupported = [name for name, given in (("--engine ray", engine != "local"), ("--drop-uniform", drop_uniform),
                                                ("--solve-rate", solve_rate), ("--min-group-size", min_group_size))
                       if given]
        if unsupported:
            raise AdvcliError(f"--follow takes one step at a time on this machine: {', '.join(unsupported)} "
                              "does not apply", hint="run the finished dump without --follow for those")
        opts = Options("run", flavor=flavor, estimator=estimator, set_=set_, config=config, column=column,
                       source=from_, chunk_rows=chunk_rows, device=device, out_dir=output, output_mode=output_mode,
                       write_columns=write_columns, precision=precision, padded=padded)
        opt.run_follow(list(inputs), opts, settle, until_idle, False, state, report, trackers, json_out, quiet)
    if report:  # likewise, before a dump is converted
        from .report import check_report_path

        check_report_path(report, list(inputs) + [output, config, state], force)
    inputs = open_inputs(inputs, from_)  # trainer dumps -> canonical Parquet (advcli.formats)
    show = not quiet and not json_out
    from .io.memory import tune_for_streaming

    tune_for_streaming()  # this process is the run's: malloc thresholds for chunk-sized tensors

    from .io.commit import staged
    from .runs.runner import run_dump

    # the outputs stay in their temporary files until everything else is done (the report written, the
    # summary printed); putting them in place is the last step, with Ctrl-C held across it: a non-zero
    # exit at any moment leaves every output path as it was (advcli.io.commit)
    with staged(force) as outputs:
        progress_cb, stop = progress(show)
        try:  # the library's own run (advcli.run calls the same), then the printing
            result = run_dump(inputs, output, flavor=flavor, settings=settings, estimator=estimator, config=config,
                              columns=columns, padded=padded, precision=precision, chunk_rows=chunk_rows,
                              device=device, force=force, output_mode=output_mode, write_columns=write_columns,
                              engine=engine, ray_address=ray_address, ray_stall_timeout=ray_stall_timeout,
                              drop_uniform=drop_uniform, solve_rate=solve_rate, min_group_size=min_group_size,
                              allow_empty=allow_empty, by_position=bool(report), progress=progress_cb,
                              staging=outputs)
        finally:
            stop()
        rep = result.report
        from .report import emit

        try:
            emit(rep, report, json_out, show)
            sys.stdout.flush()  # (the report's last bytes may still be buffered: a closed pipe shows here)
        except BrokenPipeError:  # `advcli run ... --json | head -1`: the reader left; the run still completes
            silence_stdout()
        opt.send_to_trackers(rep, trackers, quiet)  # --log: before the outputs are put in place
        outputs.commit()


EXPLAIN_EPILOG = """
[bold]Examples[/]

  advcli explain --flavor verl --set algorithm.adv_estimator=grpo
  advcli explain --flavor verl --keys
  advcli explain --flavor nemo --history
  advcli explain --flavor nemo@7ea279a --set grpo.adv_estimator.name=grpo
  advcli explain --flavor advcli --set estimator.name=gae --set estimator.gamma=0.99
  advcli explain --flavor verl --set advcli.mix="0.7*grpo+0.3*rloo"
"""


@app.command(epilog=EXPLAIN_EPILOG, cls=helpstyle.Command, context_settings={"allow_extra_args": True})
def explain(
    ctx: typer.Context,
    flavor: str | None = typer.Option(None, "--flavor", "-f", metavar="NAME[@RELEASE]",
                                      help="Flavor whose keys are given, at an upstream release (default: the "
                                           "newest). Not given: the trainer whose keys the config file holds, "
                                           "else verl."),
    estimator: str | None = opt.ESTIMATOR,
    set_: list[str] | None = opt.SET,
    config: str | None = opt.CONFIG,
    keys: bool = typer.Option(False, "--keys", help="List the flavor's keys and defaults instead."),
    history: bool = typer.Option(False, "--history", help="List the flavor's upstream releases advcli reproduces "
                                                          "(--flavor NAME@RELEASE) and what changed between them."),
):
    """Print the resolved canonical configuration and the formulas that will run."""
    given = list(ctx.args)  # a dump given: said for what explain does, not a bare usage error
    if given:
        import os

        dump = next((g for g in given if os.path.exists(g) or "://" in g), None)
        raise AdvcliError(f"explain takes no input ({' '.join(given)}): it shows what a flavor and its settings "
                          "resolve to", hint=(f"for a dump: `advcli inspect {dump}` says what it holds and the "
                                              "command that runs it; a run's summary says what the dump told the "
                                              "flavor" if dump else "the flavor: --flavor NAME; its settings: --set "
                                              "KEY=VALUE (`advcli explain --flavor NAME --keys` lists them)"))
    from .config import parse_set
    from .flavors import DEFAULT, at, config_file_flavor, history_text, resolve
    from .runs.explain import explain_text, keys_text

    if config:
        flavor = config_file_flavor(config, flavor)
    fa = at(flavor or DEFAULT)  # the flavor at its release, made once: everything below reads it
    if history:
        typer.echo(history_text(fa.flavor))
        return
    if keys:
        typer.echo(keys_text(fa.flavor))
        return
    settings = parse_set(set_) + ([("advcli.estimator", estimator)] if estimator else [])
    cfg, native = resolve(fa, settings, config)
    typer.echo(explain_text(fa, cfg, native))


SAMPLE_EPILOG = """
[bold]Examples[/]

  advcli sample big.parquet --rows 16384 --min-len 64 --max-len 2048 --group-size 16
  advcli sample steps.parquet --rows 4000 --steps 4
"""


SAMPLE_ROW_GROUP = 16384  # rows per row group of `advcli sample`'s file (and per step of its write bar)


@app.command(epilog=SAMPLE_EPILOG, cls=helpstyle.Command)
def sample(
    output: str | None = typer.Argument(None, metavar="OUTPUT", help="Parquet file to write (a local path or an "
                                                                     "s3://, gs://, hdfs:// URI)."),
    output_option: str | None = typer.Option(None, "--output", "-o", metavar="PATH",
                                             help="The file to write, spelled as the other commands spell it "
                                                  "(instead of OUTPUT)."),
    rows: int = typer.Option(512, "--rows", "-n", metavar="N", help="Number of responses."),
    group_size: int = typer.Option(8, "--group-size", metavar="N", help="Responses per prompt."),
    min_len: int = typer.Option(16, "--min-len", metavar="N", help="Shortest response (tokens)."),
    max_len: int = typer.Option(512, "--max-len", metavar="N", help="Longest response (tokens)."),
    steps: int = typer.Option(1, "--steps", metavar="N", help="Training steps (adds a step column when > 1)."),
    seed: int = typer.Option(0, "--seed", metavar="N", min=0, help="Random seed, 0 or more (same seed, same file)."),
    contiguous: bool = typer.Option(False, "--contiguous", help="Keep each group's rows together (for "
                                                                "position-grouped flavors)."),
    force: bool = opt.FORCE,
):
    """Write a synthetic rollout dump (ragged, groups scattered, masked spans) for trials and benchmarks."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .io.remote import is_uri
    from .io.writer import check_output_path, clean_stale_temps, temp_path_for
    from .sample import make_table

    if output is not None and output_option is not None and output != output_option:
        raise AdvcliError(f"two files to write: {output} and -o {output_option}", hint="give one")
    output = output if output is not None else output_option
    if output is None:
        raise AdvcliError("no file to write", hint="advcli sample FILE.parquet (or -o FILE.parquet)")
    if rows < 1 or group_size < 1 or min_len < 1 or max_len < min_len or steps < 1:
        raise AdvcliError("need --rows >= 1, --group-size >= 1, 1 <= --min-len <= --max-len, --steps >= 1")
    check_output_path(output, [], force)
    bar, stop = progress(True)  # on a terminal: generating and writing a large dump take a while
    clean_stale_temps(output)  # a killed sample's leftover beside it
    tmp = temp_path_for(output)  # .NAME.advcli-tmp-PID beside it, the name cut short for a long one
    try:
        table = make_table(rows, group_size, min_len, max_len, seed, shuffle=not contiguous, steps=steps,
                           progress=bar)
        with pq.ParquetWriter(tmp, table.schema, compression="zstd") as w:
            step = SAMPLE_ROW_GROUP
            for start in range(0, table.num_rows, step):
                w.write_table(table.slice(start, step), row_group_size=step)
                if bar:
                    bar("write", min(start + step, table.num_rows), table.num_rows)
        if is_uri(output):  # object storage: the finished file uploaded whole (advcli.io.remote.upload)
            from .io.remote import upload

            upload(tmp, output)
            os.remove(tmp)
        else:
            os.replace(tmp, output)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        stop()
    tokens = int(pc.sum(pc.list_value_length(table.column("response_mask"))).as_py() or 0)
    typer.echo(f"wrote {output}: {table.num_rows:,} rows, {tokens:,} tokens", err=True)


register(app)  # inspect, validate, stats, compare: after run, explain and sample in `advcli --help`


_INTERRUPTED = "interrupted: nothing was written; an earlier file at the output path is as it was"
_signal_exit = {"code": 130}


def _interrupted() -> None:
    """Ctrl-C / SIGTERM: one line, status 130 / 143, and the output paths as they were; or, once a run
    has put its outputs in place (its last step, advcli.io.commit), status 0: they are complete."""
    commit = sys.modules.get("advcli.io.commit")
    if commit is not None and commit.committed():
        _err("interrupted after the outputs were put in place: they are complete")
        sys.exit(0)
    _err(_INTERRUPTED)
    if _signal_exit.get("stopping"):  # a repeat of the SIGTERM acted on, landing in the interpreter's shutdown
        import signal  # (which restores the default action), must not end the process as killed instead of 143

        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    sys.exit(_signal_exit["code"])


def _stdout_reader_gone(started_on: tuple | None) -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on it), or was one that
    rich has since pointed at /dev/null (its own end for a closed pipe: ``Console.on_broken_pipe``).
    ``started_on``: (device, inode) of stdout when the command started."""
    import select

    try:
        fd = sys.__stdout__.fileno()
        now, null = os.fstat(fd), os.stat(os.devnull)
        if started_on is not None and (now.st_dev, now.st_ino) == (null.st_dev, null.st_ino) != started_on:
            return True
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _stdout_identity() -> tuple | None:
    try:
        st = os.fstat(sys.__stdout__.fileno())
        return st.st_dev, st.st_ino
    except (OSError, ValueError, AttributeError):
        return None


def _closed_pipe() -> None:
    """`advcli inspect X | head -1`: the reader left before the command finished printing. End quietly with
    the status `git log | head` gets (141 = 128 + SIGPIPE), no message."""
    silence_stdout()
    sys.exit(141)


def _on_sigterm(signum, frame):  # SIGTERM (a scheduler's stop) cleans up like Ctrl-C, then exits 143
    if _signal_exit.get("stopping"):  # a repeat (a scheduler's, or the parent-death signal a command forked
        return  # by a killed server gets once per server thread) must not cut the first one's clean-up short
    _signal_exit["code"], _signal_exit["stopping"] = 128 + signum, True
    raise KeyboardInterrupt


# The usage errors typer raises without standalone mode: typer (>= 0.28, pyproject) vendors click, whose
# exceptions derive from typer.TyperException (click itself need not be installed). typer.Abort is its Abort.
_USAGE_ERROR = typer.TyperException


def exit_code_of(argv: list) -> int:
    """``advcli ARGV`` in this process through :func:`main` (the entry point's handling of errors, signals
    and exit codes), its output where ``sys.stdout``/``sys.stderr`` point: the exit code it ends with."""
    import signal

    old = sys.argv
    sys.argv = ["advcli", *map(str, argv)]
    try:
        term = signal.getsignal(signal.SIGTERM)
    except (ValueError, OSError):
        term = None
    try:
        main()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
        if term is not None:  # the host's SIGTERM handler back (main installs the command's own)
            try:
                signal.signal(signal.SIGTERM, term)
            except (ValueError, OSError, TypeError):
                pass


_GROUP_PAGE = ([], ["--help"], ["-h"])  # what shows `advcli --help` and nothing else


def _page_entry(info):
    """A stand-in for a registered command on the group's help page: its name, help and docstring, no
    parameters (the page lists each command's name and first line, never its options)."""
    import copy

    real = info.callback

    def entry():
        pass

    entry.__name__, entry.__qualname__, entry.__doc__ = real.__name__, real.__qualname__, real.__doc__
    stand_in = copy.copy(info)
    stand_in.callback = entry
    return stand_in


@contextmanager
def _only_what_runs(argv: list[str]):
    """While ``app`` runs ``argv``: where its first word names a command (``advcli run ...``), the app holds
    that command alone; where ``argv`` asks for the group's own page (``advcli --help``), the commands stand in
    without their parameters. typer turns every registered command into click's before it parses a word
    (typer 0.29: each parameter's annotation evaluated and its type resolved), most of its own start-up for
    the twelve commands; the one that runs is converted as before, so parsing, help and errors are the same.
    Anything else (an option, a typo) keeps them all: an unknown command's message suggests one."""
    commands, groups = app.registered_commands, app.registered_groups
    if argv in _GROUP_PAGE:
        app.registered_commands = [_page_entry(c) for c in commands]
    else:
        name = argv[0] if argv else None
        picked = [c for c in commands if (c.name or c.callback.__name__.lower().replace("_", "-")) == name]
        picked_groups = [g for g in groups if g.name == name]
        if not picked and not picked_groups:
            yield
            return
        app.registered_commands, app.registered_groups = picked, picked_groups
    try:
        yield
    finally:
        app.registered_commands, app.registered_groups = commands, groups


def _shielded():
    """SIGINT and SIGTERM held, raised again at the end (advcli.io.commit.shielded): around torch's import."""
    from .io.commit import shielded

    return shielded()


def main() -> None:
    from . import errors

    was = errors.COMMAND_OWNS_STDOUT
    errors.COMMAND_OWNS_STDOUT = True  # what a user estimator prints goes to stderr (advcli.estimators.user)
    try:
        _main()
    finally:
        errors.COMMAND_OWNS_STDOUT = was


def _main() -> None:
    import signal

    _signal_exit.update(code=130, stopping=False)  # this command's own (exit_code_of runs several in a process)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread
        pass
    stdout_was = _stdout_identity()
    try:
        with _only_what_runs(sys.argv[1:]), import_held(_shielded):
            rv = app(standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        # typer turns KeyboardInterrupt into Exit(130) and, without standalone mode, *returns* the
        # code (it would otherwise exit 0 in silence after Ctrl-C); other Exit codes come back too
        if isinstance(rv, int) and not isinstance(rv, bool) and rv:
            if rv == 130:
                _interrupted()
            sys.exit(rv)
    except AdvcliError as e:
        from .formats import name_dump_rows

        _err(name_dump_rows(str(e)))  # a trainer dump's rows are named by their file and line (advcli.formats)
        sys.exit(e.exit_code)
    except BrokenPipeError:
        _closed_pipe()
    except KeyboardInterrupt:
        _interrupted()
    except _USAGE_ERROR as e:
        if hasattr(e, "show"):
            e.show()
        else:
            _err(e.format_message())
        sys.exit(2)
    except typer.Abort:  # typer (and click) turn KeyboardInterrupt into Abort
        _interrupted()
    except SystemExit as e:
        if e.code == 1 and _stdout_reader_gone(stdout_was):  # click's and rich's end for a closed pipe: exit 1
            _closed_pipe()
        raise
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: short message, traceback on request
        if caused_by_interrupt(e):
            _interrupted()
        if os.environ.get("ADVCLI_DEBUG"):
            raise
        from .errors import is_disk_full

        if is_disk_full(e):  # the environment, not a bug: a write the commands do not name themselves
            where = getattr(e, "filename", None)
            _err(f"{where + ': ' if where else ''}no space left on the device ({str(e).splitlines()[0]}); "
                 "nothing was written\n  hint: free some space, or write elsewhere: -o on another file system, "
                 "TMPDIR=DIR for advcli's temporary files")
            sys.exit(2)
        _err(f"internal error: {type(e).__name__}: {e}\n  this is a bug in advcli; rerun with ADVCLI_DEBUG=1 "
             "for the traceback and report it")
        sys.exit(1)
