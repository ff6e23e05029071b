"""``advcli compare``: parse the two forms, print what :mod:`advcli.runs.compare` computes.

Two forms:

- ``advcli compare A.parquet B.parquet``: two advcli outputs of the same rows (same order, same
  list lengths).
- ``advcli compare DUMP --estimators grpo,rloo,./my_adv.py:fn``: two or more estimators on one dump,
  in one flavor's pipeline (``--flavor``, ``--set``, ``--config`` as for ``advcli run``); every pair
  compared, the pairs side by side.
- ``advcli compare DUMP --flavor F --set K=V ... --flavor F2 --set K=V ...``: two configurations on
  one dump. Each ``--flavor`` starts a configuration and the ``--set``/``--config`` after it belong to
  it; those before the first ``--flavor`` apply to both. Both run into a temporary directory, then
  they are compared as two outputs.

The figures and how they are computed: :mod:`advcli.runs.compare`.
"""
from __future__ import annotations

import typer

from ..errors import AdvcliError
from . import options as opt
from .helpstyle import Command

EPILOG = """
[bold]Examples[/]

  # how would RLOO have differed from GRPO on my run?
  advcli compare sample_data/rollouts.parquet \\
      --flavor verl --set algorithm.adv_estimator=grpo \\
      --flavor verl --set algorithm.adv_estimator=rloo

  # several estimators at once, yours included: every pair, side by side (--report pairs.html)
  advcli compare sample_data/rollouts.parquet --estimators grpo,rloo,./my_adv.py:my_fn --report pairs.html

  # the same estimator with and without std normalisation
  advcli compare sample_data/rollouts.parquet --flavor verl --set algorithm.adv_estimator=grpo \\
      --flavor verl --set algorithm.adv_estimator=grpo --set algorithm.norm_adv_by_std_in_grpo=false

  # two outputs you already have
  advcli run sample_data/rollouts.parquet -o grpo.parquet --set algorithm.adv_estimator=grpo
  advcli run sample_data/rollouts.parquet -o rloo.parquet --set algorithm.adv_estimator=rloo
  advcli compare grpo.parquet rloo.parquet --top 5 --json

Each --flavor starts a configuration; the --set/--config after it belong to it, those before the
first --flavor apply to both.
"""


class RawArgsCommand(Command):
    """Keeps the raw argument list (click loses the interleaving of --flavor and --set)."""

    def parse_args(self, ctx, args):
        ctx.meta["advcli_raw_args"] = list(args)
        return super().parse_args(ctx, args)


# ------------------------------------------------------------------------------ configurations
_FLAGS = {"--flavor": "flavor", "-f": "flavor", "--set": "set", "-s": "set", "--config": "config", "-c": "config"}


def split_configurations(raw: list[str]) -> list[dict]:
    """[{flavor, set: [...], config}] from the raw arguments: each --flavor starts one."""
    common: dict = {"set": [], "config": None}
    configs: list[dict] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if tok == "--":
            break
        name, value = tok, None
        if tok.startswith("--") and "=" in tok:
            name, value = tok.split("=", 1)
        kind = _FLAGS.get(name)
        if kind is None:
            i += 1
            continue
        if value is None:
            if i + 1 >= len(raw):
                break
            value = raw[i + 1]
            i += 2
        else:
            i += 1
        if kind == "flavor":
            configs.append({"flavor": value, "set": list(common["set"]), "config": common["config"]})
            continue
        target = configs[-1] if configs else common
        if kind == "set":
            target["set"].append(value)
        else:
            target["config"] = value
    if not configs and (common["set"] or common["config"]):
        raise AdvcliError("compare: --set/--config need two configurations; give --flavor before each one's "
                          "--set (e.g. --flavor verl --set algorithm.adv_estimator=grpo --flavor verl --set "
                          "algorithm.adv_estimator=rloo)")
    return configs


def print_comparison(res: dict) -> None:
    from rich.markup import escape as esc  # user text (paths, labels, group ids) is never markup
    from rich.table import Table

    from ..report import fmt_num
    from ..report.terminal import stdout_console

    con = stdout_console(highlight=False)
    con.print(f"[bold]A[/] {esc(str(res['a']['label']))}  ({esc(str(res['a']['path']))})")
    con.print(f"[bold]B[/] {esc(str(res['b']['label']))}  ({esc(str(res['b']['path']))})")
    if res.get("no_token_data"):
        con.print(f"token data: none: {esc(res['no_token_data'])}")
    t = Table(show_edge=False)
    t.add_column("")
    t.add_column("responses (no token data)" if res.get("no_token_data") else "tokens (mask=1)", justify="right")
    t.add_column("rows", justify="right")
    tk, rw = res["tokens"], res["row_level"]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    t.add_row("count", fmt_num(res.get("valid_tokens", res.get("rows"))), fmt_num(rw["rows_with_valid_tokens"]))
    t.add_row("correlation (Pearson)", fmt_num(tk["pearson"]), fmt_num(rw["pearson"]))
    t.add_row("rank correlation (Spearman)", "", fmt_num(rw["spearman"]))
    t.add_row("sign agreement", pct(tk["sign_agreement"]), pct(rw["sign_agreement"]))
    t.add_row("mean |A−B|", fmt_num(tk["mean_abs_diff"]), "")
    t.add_row("max |A−B|", fmt_num(tk["max_abs_diff"]), "")
    t.add_row("mean A / B", f"{fmt_num(tk['mean_a'])} / {fmt_num(tk['mean_b'])}", "")
    t.add_row("std A / B", f"{fmt_num(tk['std_a'])} / {fmt_num(tk['std_b'])}", "")
    if tk.get("returns_pearson") is not None:
        t.add_row("returns correlation", fmt_num(tk["returns_pearson"]), "")
    t.add_row("rows whose sign flips", "", fmt_num(rw["sign_flips"]))
    if tk.get("nonfinite"):
        t.add_row("left out: NaN/inf", f"{tk['nonfinite']:,} ({tk['nonfinite_in_one']:,} in one only)", "")
    con.print(t)
    g = res.get("groups")
    if g:
        con.print(f"groups: {g['count']:,}; {g['with_sign_flip']:,} with a sign flip; mean |A−B| per group "
                  f"{fmt_num(g['mean_abs_diff'])}; flat (all rows equal) in A only: {g['flat_in_a_not_b']:,}, "
                  f"in B only: {g['flat_in_b_not_a']:,}")
        if g["most_different"]:
            con.print("[bold]groups that differ most[/] (rows in input order)")
            vals = lambda xs: " ".join("nan" if x is None else f"{x:+.3g}" for x in xs[:8]) + (  # noqa: E731
                " …" if len(xs) > 8 else "")
            for e in g["most_different"]:
                at = f" (step {e['step']})" if e.get("step") is not None else ""
                con.print(f"  {esc(str(e['prompt_id']))}{at}  n={e['size']}  mean |A−B| {fmt_num(e['mean_abs_diff'])}  "
                          f"sign agreement {pct(e['sign_agreement'])}  spread A {fmt_num(e['spread_a'])} "
                          f"B {fmt_num(e['spread_b'])}")
                if e.get("rewards") is not None:
                    con.print(f"      reward {vals(e['rewards'])}")
                con.print(f"      A      {vals(e['a'])}")
                con.print(f"      B      {vals(e['b'])}")
    flips = res["row_level"].get("flip_examples") or []
    if flips:
        con.print("[bold]rows whose sign flips[/]: " + ", ".join(
            f"row {e['row']} ({fmt_num(e['a'])} → {fmt_num(e['b'])})" for e in flips))


# ------------------------------------------------------------------------------ many estimators
def print_many(rep: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..report.sections import estimators_sections
    from ..report.terminal import stdout_console

    con = stdout_console(highlight=False)
    _, sections = estimators_sections(rep)
    for k, label in sections[0][2][:-1]:
        con.print(f"[bold]{escape(k)}[/] {escape(str(label))}")
    head, rows = sections[1][2]
    t = Table(show_edge=False)
    for i, h in enumerate(head):
        t.add_column(escape(h), justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*(escape(str(x)) for x in r))
    con.print(t)
    for name, _, (_cols, table) in sections[2:]:
        if not table:
            continue
        con.print(f"[bold]{escape(name)}[/]")
        for r in table:
            con.print(f"  {escape(str(r[0]))}  n={r[1]}  mean |A−B| {r[2]}  sign agreement {r[3]}")
            con.print(f"      A  {r[4]}")
            con.print(f"      B  {r[5]}")


def run_estimators(paths: list[str], names: str, flavor: list[str] | None, set_: list[str] | None,
                   config: list[str] | None, columns: dict | None = None) -> list[dict]:
    """The resolved configuration of each estimator of ``--estimators A,B,...`` in the one flavor given
    (:func:`advcli.runs.compare.estimator_runs`, which :func:`advcli.compare` calls too)."""
    from ..config import parse_set
    from ..runs.compare import estimator_runs

    if flavor and len(flavor) > 1:
        raise AdvcliError("compare --estimators runs every estimator in one flavor's pipeline; give one --flavor",
                          hint="to compare two flavors, give --flavor F --set ... twice without --estimators")
    return estimator_runs(paths, names, (flavor or [None])[0], parse_set(set_), (config or [None])[0], columns)


# -------------------------------------------------------------------------------------- command
def compare_cmd(
    ctx: typer.Context,
    paths: list[str] = typer.Argument(..., metavar="PATH",
                                      help="Two advcli outputs, or one dump with --flavor/--set twice.",
                                      show_default=False),
    flavor: list[str] | None = typer.Option(None, "--flavor", "-f", metavar="NAME[@RELEASE]",
                                               help="Starts a configuration (give it twice, each followed by its "
                                                    "--set)."),
    set_: list[str] | None = typer.Option(None, "--set", "-s", metavar="KEY=VALUE",
                                             help="A key of the configuration started by the last --flavor."),
    config: list[str] | None = typer.Option(None, "--config", "-c", metavar="PATH",
                                               help="YAML/TOML keys for the configuration."),
    estimators: str | None = typer.Option(None, "--estimators", "-E", metavar="A,B,...",
                                          help="Compare two or more estimators on one dump, every pair side by "
                                               "side: the flavor's own names, registered ones, or your functions "
                                               "(module:function, ./file.py:function), comma-separated. One "
                                               "--flavor (default verl) and its --set apply to all."),
    column: list[str] | None = opt.COLUMN,
    report: str | None = typer.Option(None, "--report", "-r", metavar="PATH",
                                         help="With --estimators: write the comparison to PATH (.json, .md or "
                                              ".html: the pairs side by side)."),
    top: int = typer.Option(10, "--top", metavar="N", help="How many differing groups and flipped rows to list."),
    chunk_rows: int = opt.chunk_rows(),
    device: str = opt.device("auto", "auto, cpu or cuda (for the two configurations)."),
    json_out: bool = opt.json_out("the comparison"),
    from_: str | None = opt.FROM,
    log: list[str] | None = opt.LOG,
    log_project: str | None = opt.LOG_PROJECT,
    log_name: str | None = opt.LOG_NAME,
    log_step_offset: int = opt.LOG_STEP_OFFSET,
):
    """Compare two sets of advantages: correlation, sign agreement, per-group differences."""
    from ..config import parse_column_maps

    columns = parse_column_maps(column)
    if top < 0:  # [:top] would list all but the last |top|
        raise AdvcliError(f"--top {top}: expected 0 or more (how many differing groups and flipped rows to list)",
                          hint="the default is --top 10")
    trackers = opt.log_targets(log, log_project, log_name, log_step_offset)
    raw = ctx.meta.get("advcli_raw_args") or []
    configs = [] if estimators is not None else split_configurations(raw) if raw else [
        {"flavor": f, "set": list(set_ or []), "config": (config or [None])[0]} for f in (flavor or [])]
    from ..formats import name_dumps, open_inputs
    from ..runs.compare import compare_configurations, compare_files

    if report and not estimators:
        raise AdvcliError("compare --report is written for --estimators comparisons",
                          hint="for two outputs or two configurations, use --json > file.json")
    if report:
        from ..report import check_report_path

        check_report_path(report, list(paths) + list(config or []))
    paths = open_inputs(paths, from_)  # trainer dumps (and response-level outputs) -> canonical Parquet
    if estimators is not None:
        if len(paths) != 1:
            raise AdvcliError(f"compare --estimators runs on one dump; got {len(paths)} paths")
        from ..report.sections import estimators_sections
        from ..runs.compare import compare_runs
        from ._sections import emit

        runs = run_estimators(paths, estimators, flavor, set_, config, columns)
        rep = name_dumps(compare_runs(paths[0], runs, columns=columns, top=top, chunk_rows=chunk_rows, device=device,
                                      announce=None if json_out else
                                      lambda i, label: typer.echo(f"E{i + 1}: {label} ...", err=True)))
        rep = emit(rep, "compare", report, json_out, False, estimators_sections, print_many)
        opt.send_to_trackers(rep, trackers)
        return
    if len(paths) == 2:
        if configs:
            raise AdvcliError("compare: give either two outputs, or one dump with two configurations "
                              "(--flavor ... --set ... twice), not both")
        res = compare_files(paths[0], paths[1], top=top, column_overrides=columns)
    elif len(paths) == 1:
        if len(configs) != 2:
            raise AdvcliError(f"compare: one input needs exactly two configurations; got {len(configs)}",
                              hint="advcli compare DUMP --flavor verl --set algorithm.adv_estimator=grpo "
                                   "--flavor verl --set algorithm.adv_estimator=rloo")
        res = compare_configurations(paths[0], configs, columns=columns, top=top, chunk_rows=chunk_rows,
                                     device=device, announce=None if json_out else
                                     lambda i, label: typer.echo(f"{'AB'[i]}: {label} ...", err=True))
    else:
        raise AdvcliError(f"compare: expected two outputs or one dump, got {len(paths)} paths")
    from ..version import stamp

    res = stamp(name_dumps(res), "compare")  # the dumps the user gave; the header every report starts with
    if json_out:
        from ..report.primitives import to_json

        typer.echo(to_json(res))
    else:
        print_comparison(res)
    opt.send_to_trackers(res, trackers)
