"""`advcli --help` and every command's --help render options as click users know them (issue 14,
part 4): a flag shows no placeholder (`--force`, not `--force <bool>`), an option that takes a value
shows a metavar that says what the value is (`--chunk-rows N`, `--set KEY=VALUE`), an argument
shows as `INPUT...` — never typer 0.2x's `<bool>`, `<str>`, `<int>`, `<float>`, `<list[str]>`.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import typer
from conftest import ROOT

PLACEHOLDER = re.compile(r"<(bool|str|int|float|path|list\[[a-z]+\])>")


def _group():
    from advcli.cli import app

    return typer.main.get_command(app)


def _commands():
    return sorted(_group().commands)


def _help(*argv: str) -> str:
    """The --help text as a terminal 200 columns wide shows it, box drawing removed."""
    from typer.testing import CliRunner

    from advcli.cli import app

    res = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"},
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return re.sub(r"[│╭╮╰╯─]", " ", res.stdout)


def _option_line(text: str, opt: str) -> str:
    """The help line that starts with option ``opt`` (its first line: the metavar is on it)."""
    lines = [ln for ln in text.splitlines() if re.search(rf"(^|\s){re.escape(opt)}(\s|$)", ln)]
    assert lines, f"{opt} is not in the help:\n{text}"
    return lines[0]


def test_the_commands_are_all_here():
    assert set(_commands()) >= {"run", "explain", "sample", "inspect", "validate", "stats", "compare"}


@pytest.mark.parametrize("cmd", [None, *_commands()])
def test_no_type_placeholder(cmd):
    text = _help(*([cmd] if cmd else []))
    found = PLACEHOLDER.findall(text)
    assert not found, f"`advcli {cmd or ''} --help` shows {found}:\n{text}"
    usage = next(ln for ln in text.splitlines() if "Usage:" in ln)
    assert "{" not in usage, usage  # typer 0.2x writes a required argument as {INPUT}


@pytest.mark.parametrize("cmd", _commands())
def test_flags_show_nothing_and_values_show_their_metavar(cmd):
    text = _help(cmd)
    command = _group().commands[cmd]
    for p in command.params:
        if p.param_type_name == "argument":
            assert p.metavar and p.metavar.isupper(), f"{cmd}: argument {p.name} has no upper-case metavar"
            shown = p.metavar + ("..." if p.nargs != 1 else "")
            usage = next(ln for ln in text.splitlines() if "Usage:" in ln)
            # click's usage: `[OPTIONS] INPUT...`, an optional one in brackets (`advcli sample [OUTPUT]`);
            # the arguments panel stars a required one
            assert usage.rstrip().endswith(shown if p.required else f"[{shown}]"), usage
            star = r"\*\s+" if p.required else r"^[^*\w]*"
            assert re.search(rf"{star}{re.escape(shown)}\s", text, re.M), f"{cmd}: {shown} missing:\n{text}"
            continue
        long = next(o for o in p.opts if o.startswith("--"))
        line = _option_line(text, long)
        after = line.split(long, 1)[1]
        if p.is_flag:
            # e.g. "--force      Replace an existing output." / "--padded  --ragged  Token lists ..."
            words = after.split()
            if p.secondary_opts:
                assert words[0] == p.secondary_opts[0], line
                words = words[1:]
            short = [o for o in p.opts if not o.startswith("--")]
            if short:
                assert words[0] == short[0], line
                words = words[1:]
            assert not re.fullmatch(r"[A-Z][A-Z0-9_=,|.]*", words[0]), f"{cmd}: flag {long} shows a metavar: {line}"
        else:
            assert p.metavar, f"`advcli {cmd}` {long} takes a value but declares no metavar"
            assert re.search(rf"\s{re.escape(p.metavar)}\s", line + " "), f"{cmd}: {long} hides {p.metavar}: {line}"


def test_flags_the_user_knows():
    run = _help("run")
    assert re.search(r"--force\s+Replace an existing output", run)
    assert re.search(r"--chunk-rows\s+N\s", run)
    assert re.search(r"--set\s+-s\s+KEY=VALUE\s", run)
    assert re.search(r"--column\s+ROLE=NAME\s", run)
    assert re.search(r"--help\s+-h\s+Show this message", run)
    assert "Usage: " in run and "[OPTIONS] INPUT..." in run
    assert "[acc,fmt]" in run  # the epilog's YAML example is text, not rich markup
    root = _help()
    assert re.search(r"--version\s+Print the version", root)


def test_help_through_the_real_entry_point():
    """`python -m advcli run --help` (the installed command's path, terminal of 120 columns)."""
    import os

    env = dict(os.environ, COLUMNS="120", PYTHONPATH=ROOT)
    for argv in ([], ["run"], ["validate"]):
        r = subprocess.run([sys.executable, "-m", "advcli", *argv, "--help"], capture_output=True, text=True,
                           cwd=ROOT, env=env, check=False)
        assert r.returncode == 0, r.stderr
        assert not PLACEHOLDER.findall(r.stdout), r.stdout


def test_value_options_are_declared_once():
    """run and validate take the same --flavor/--set/--config/--column/--padded/--chunk-rows: one declaration."""
    group = _group()
    by_cmd = {c: {p.name: p for p in group.commands[c].params} for c in ("run", "validate")}
    for name in ("inputs", "flavor", "set_", "config", "column", "padded", "chunk_rows"):
        a, b = by_cmd["run"][name], by_cmd["validate"][name]
        assert (a.opts, a.secondary_opts, a.metavar, a.help, a.default) == \
            (b.opts, b.secondary_opts, b.metavar, b.help, b.default), name


VALUES = ["0", "7", "-3", "+12", "007", " 7", "7 ", "1_000", "1.5", "1e3", "-2.5E-2", ".5", "5.", "inf", "nan",
          "-inf", "abc", "", "0x10", "١٢", "99999999999999999999999", "1e400", "true", "yes", "0.95"]


@pytest.mark.parametrize("annotation", [str, int, float, list[str], list[int]])
def test_values_converted_as_typer_converts_them(annotation):
    """advcli.commands.values converts plain values without pydantic: each value gets what typer's own
    (pydantic) converter gives, or the same error message."""
    from typer._coercion import resolve_type_descriptor
    from typer.core import TyperOption
    from typer.models import OptionInfo

    from advcli.commands import helpstyle

    ctx = typer.Context(typer.main.get_command(_tiny_app()))
    multiple = annotation in (list[str], list[int])
    for value in VALUES:
        given = (value, value) if multiple else value
        results = []
        for styled in (False, True):
            p = TyperOption(param_decls=["--x"], type_descriptor=resolve_type_descriptor(annotation, OptionInfo()),
                            multiple=multiple)
            if styled:
                helpstyle.click_style([p])
            try:
                results.append(("ok", p.process_value(ctx, given)))
            except typer.BadParameter as e:
                results.append(("error", e.format_message()))
        assert repr(results[0]) == repr(results[1]), (annotation, value, results)  # repr: nan == nan
        assert type(results[0][1]) is type(results[1][1]), (annotation, value, results)


def _tiny_app():
    app = typer.Typer()

    @app.command()
    def one(x: int = 0):
        pass

    return app


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["filter", "--help"]])
def test_help_imports_no_heavy_helpers(argv):
    """`advcli --help` stays fast with typer 0.29 (benchmarks/startup.py measures it): its page imports neither
    pydantic (typer's value adapters) nor rich's Markdown, Syntax or Traceback (typer's own help page)."""
    import os

    code = ("import sys\nfrom advcli.cli import main\nsys.argv = ['advcli'] + sys.argv[1:]\ntry:\n    main()\n"
            "except SystemExit:\n    pass\nheavy = ('pydantic', 'rich.markdown', 'rich.syntax', 'rich.traceback', "
            "'markdown_it', 'pygments', 'torch')\nprint(sorted(m for m in sys.modules if m.split('.')[0] in heavy "
            "or m in heavy), file=sys.stderr)\n")
    env = dict(os.environ, PYTHONPATH=ROOT, ADVCLI_SERVER="off")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                       check=False)
    assert "Usage:" in r.stdout, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr


@pytest.mark.parametrize("name", _commands())
def test_no_option_help_loses_words_to_markup(name):
    """Rich reads [word ...] in a help text as markup and drops it (audit's --rtol showed 'Relative
    tolerance .' for 'Relative tolerance [default: 1e-4].'): every option's help is shown whole."""
    cmd = _group().commands[name]
    shown = " ".join(_help(name).split())
    for param in cmd.params:
        text = getattr(param, "help", None)
        if text and not param.hidden:
            assert not re.search(r"(?<!\\)\[[a-z]", text), (name, param.name, text)
            words = " ".join(re.sub(r"\s+", " ", text).split()[:3])
            assert words in shown, (name, param.name, words)
