"""``advcli audit DUMP``: parse the flags, resolve the configuration, print the audit that
:func:`advcli.audit.recompute.audit_dump` makes.

Exit 0: every mask=1 value agrees within tolerance; 1: some do not; 2: an error (as ``diff``).
"""
from __future__ import annotations

import json

import typer

from ..errors import AdvcliError
from . import options as opt

EPILOG = """
[bold]Examples[/]

  advcli audit logs/exp_001
  advcli audit outputs/completions --set num_generations=8 --report audit.html
  advcli audit dump.parquet --flavor verl --set algorithm.adv_estimator=grpo
  advcli audit dump.parquet --flavor verl --set algorithm.adv_estimator=grpo --rtol 1e-3 --no-search --json
  advcli audit logs/exp_001 --follow --log tensorboard:runs --state audit-state.json

A trainer's dump is audited with that trainer's flavor (unless --flavor or a --config file names another, as
`advcli run` chooses) against the advantages it logged (NeMo RL's advantages, TRL's advantage, prime-rl's
advantage); a Parquet file against its column `advantages`, else `advantage`. A column may hold one value per
token (list) or per row. Exit code 0: every mask=1 value agrees within |logged − recomputed| <= atol +
rtol·|recomputed|; 1: some do not (the worst rows are listed by file and line, the difference classified, and
a configuration that reproduces the logged values named when one of the candidates does); 2: an error.
"""

# ------------------------------------------------------------------------------------------ output
def _worst_line(e: dict) -> str:
    """``FILE:LINE: step 3, group ID, token 4: logged 0.5, recomputed 0.1 (|diff| 0.4), 1 of 3 tokens``."""
    def num(x):
        return "–" if x is None else f"{x:.6g}"

    head = [f"step {e['step']}"] if "step" in e else []
    if "group" in e:
        head.append(f"group {e['group']}")
    head.append(f"token {e['position']}")
    return (f"{e.get('where', 'row ' + str(e['row']))}: {', '.join(head)}: logged {num(e['logged'])}, recomputed "
            f"{num(e['recomputed'])} (|diff| {num(e['abs_diff'])}), {e['tokens_disagreeing']} of {e['tokens']} "
            f"token(s) disagree")


def print_audit(rep: dict) -> None:
    from rich.markup import escape

    from ..report.sections import audit_sections
    from ..report.terminal import kv_table, stderr_console

    con = stderr_console(highlight=False, soft_wrap=True)
    _, sections = audit_sections(rep)
    t = kv_table(con.width)
    for a, b in sections[0][2]:
        style = "" if a != "verdict" else ("[green]" if rep["agree"] else "[bold red]")
        t.add_row(escape(a), style + escape(str(b)) + ("[/]" if style else ""))
    con.print(t)
    for name, kind, payload in sections[1:]:
        if not payload:
            continue
        if kind == "text":
            con.print(f"[bold]{escape(name)}[/]")
            for x in payload:
                con.print("  " + escape(x))
        elif kind == "table" and name == "Worst rows":
            # one line a row, never wrapped nor cut (soft_wrap): a uid or a file path is read whole
            con.print(f"[bold]{escape(name)}[/] (largest |logged − recomputed| first)")
            for e in rep["worst"]:
                con.print("  " + escape(_worst_line(e)))
                if e.get("prompt"):
                    con.print("    prompt: " + escape(json.dumps(e["prompt"], ensure_ascii=False)))
        elif kind == "table" and name == "Releases tried":
            continue  # the summary's release line says which reproduce; the rows are in --report / --json
        elif kind == "table":
            hits = [r[0] for r in payload[1] if r[1] == "reproduces"]
            con.print(f"[bold]{escape(name)}[/]: {len(payload[1])} (listed in --report / --json); reproduce the "
                      f"logged values: {escape('; '.join(hits)) if hits else 'none'}")


def audit_cmd(
    inputs: list[str] = opt.INPUTS,
    flavor: str | None = opt.FLAVOR,
    estimator: str | None = opt.ESTIMATOR,
    set_: list[str] | None = opt.SET,
    config: str | None = opt.CONFIG,
    column: list[str] | None = opt.COLUMN,
    from_: str | None = opt.FROM,
    against: str | None = typer.Option(None, "--against", metavar="COLUMN",
                                          help="The logged advantages (default: where the dump's trainer logged "
                                               "them; in Parquet, advantages, else advantage)."),
    rtol: float | None = typer.Option(None, "--rtol", metavar="X", help="Relative tolerance (default 1e-4)."),
    atol: float | None = typer.Option(None, "--atol", metavar="X",
                                      help="Absolute tolerance (default 1e-5, plus half a unit in the last "
                                           "decimal where the dump may round its logged values and each has at "
                                           "most that many decimals)."),
    search: bool = typer.Option(True, "--search/--no-search", help="On disagreement, try other flavors and "
                                                                   "settings and name those that reproduce the "
                                                                   "logged values."),
    top: int = typer.Option(10, "--top", metavar="N", help="How many of the worst rows to list."),
    chunk_rows: int = opt.chunk_rows(),
    device: str = opt.device(),
    report: str | None = typer.Option(None, "--report", "-r", metavar="PATH",
                                         help="Write the audit to PATH: .json, .md or .html."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on the terminal (the exit code says)."),
    json_out: bool = opt.json_out("the audit"),
    log: list[str] | None = opt.LOG,
    log_project: str | None = opt.LOG_PROJECT,
    log_name: str | None = opt.LOG_NAME,
    log_step_offset: int = opt.LOG_STEP_OFFSET,
    follow: bool = opt.FOLLOW,
    settle: float | None = opt.SETTLE,
    until_idle: float | None = opt.UNTIL_IDLE,
    fail_fast: bool = opt.FAIL_FAST,
    state: str | None = opt.STATE,
):
    """Check logged advantages against advcli's recomputation (exit 0 = agree, 1 = disagree, 2 = error)."""
    from ..report import check_report_path

    if report:
        check_report_path(report, list(inputs) + [config, state])
    trackers = opt.log_targets(log, log_project, log_name, log_step_offset)
    from ..audit.recompute import audit_dump, check_tolerances, logged_inputs, require_logged
    from ..formats import open_inputs
    from .progress import progress as _progress
    from .resolve import resolve_cli_config

    check_tolerances(rtol, atol, top)
    settle = opt.check_follow_only(follow, settle, until_idle, state, fail_fast)
    if follow:
        from .follow import Options

        opts = Options("audit", flavor=flavor, estimator=estimator, set_=set_, config=config, column=column,
                       source=from_, chunk_rows=chunk_rows, device=device, against=against, rtol=rtol, atol=atol,
                       search=search, top=top)
        opt.run_follow(list(inputs), opts, settle, until_idle, fail_fast, state, report, trackers, json_out, quiet)
    cb, stop = _progress(not quiet and not json_out)
    try:
        inputs = open_inputs(logged_inputs(list(inputs), from_, against), from_)  # trainer dumps -> canonical Parquet
        require_logged(inputs, against)
        dumped: list[str] = []  # without --flavor, the dump's trainer's semantics, as `advcli run` takes them
        flavor, cfg, native, columns, auto_note = resolve_cli_config(inputs, flavor, set_, config, column, None,
                                                                     estimator=estimator, dump_notes=dumped)
        try:
            rep = audit_dump(inputs, flavor, cfg, native, columns, auto_note=auto_note,
                             flavor_note=dumped[0] if dumped else None, against=against, rtol=rtol, atol=atol,
                             chunk_rows=chunk_rows, device=device, search=search, top=top, progress=cb)
        except AdvcliError as e:  # the group size in the flavor's words, as run says it
            from ..flavors import at
            from ..runs.resolution import in_flavor_words

            raise in_flavor_words(e, at(flavor).flavor, inputs) from None
    finally:
        stop()
    from ..report.sections import audit_sections
    from ._sections import emit

    rep = emit(rep, "audit", report, json_out, quiet, audit_sections, print_audit)
    opt.send_to_trackers(rep, trackers, quiet)
    if not rep["agree"]:
        raise typer.Exit(1)
