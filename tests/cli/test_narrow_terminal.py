"""Terminals of 80 and 120 columns (issue 45, part 8): every command's --help, the run summary, filter's tables
and audit's summary fit the terminal's width, and nothing the user reads is cut with "…": each option's help
and the epilog are there word for word, paths, group ids and column names whole."""
from __future__ import annotations

import re
import shutil

import pytest
import typer
from conftest import SAMPLE, run_main

WIDTHS = [80, 120]
BOX = re.compile(r"[│╭╮╰╯─┃━╇┡┩]")


def _commands():
    from advcli.cli import app

    group = typer.main.get_command(app)
    out = [[]]
    for name, cmd in group.commands.items():
        out.append([name])
        out.extend([name, sub] for sub in getattr(cmd, "commands", {}))
    return out


def _plain(markup: str) -> str:
    """Help text as it reads: rich markup removed, whitespace collapsed."""
    from rich.text import Text

    return " ".join(Text.from_markup(markup, emoji=False).plain.split())


def _words(text: str) -> str:
    """The page's words in order: box drawing and the epilog's added line continuations removed."""
    text = BOX.sub(" ", text)
    text = re.sub(r" \\ *$", "", text, flags=re.M)
    text = re.sub(r"^( *#.*?) *\n *# ", r"\1 ", text, flags=re.M)  # a comment continued on a line of its own
    return " ".join(text.split())


def _check_fits(text: str, width: int, what: str) -> None:
    assert "…" not in text, f"{what} cuts text at {width} columns:\n{text}"
    wide = [ln for ln in text.splitlines() if len(ln.rstrip()) > width]
    assert not wide, f"{what}: lines wider than {width} columns:\n" + "\n".join(wide)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(a) or "advcli")
def test_help_fits_and_says_everything(argv, width):
    from typer.testing import CliRunner

    from advcli.cli import app

    res = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": str(width)}, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    page = res.stdout
    _check_fits(page, width, f"advcli {' '.join(argv)} --help")
    words = _words(page)
    cmd = typer.main.get_command(app)
    ctx = typer.Context(cmd)
    for name in argv:
        cmd = cmd.commands[name]
    for p in cmd.get_params(ctx):
        for opt in p.opts if p.param_type_name == "option" else [p.metavar or p.name.upper()]:
            assert re.search(rf"(^|\s){re.escape(opt)}(\s|\.\.\.|$)", words), f"{opt} missing at {width}:\n{page}"
        if p.help:
            assert _plain(p.help) in words, f"{p.opts}: help not whole at {width} columns:\n{page}"
    if cmd.epilog:
        for line in cmd.epilog.splitlines():
            if line.strip():
                assert _plain(line).removesuffix(" \\") in words, f"epilog {line!r} not whole at {width}:\n{page}"


@pytest.fixture(scope="module")
def long_named_dump(tmp_path_factory):
    """The sample dump under a long path (the run summary's input line)."""
    d = tmp_path_factory.mktemp("narrow") / "experiments" / "grpo-baseline"
    d.mkdir(parents=True)
    path = d / "rollouts_of_step_000123.parquet"
    shutil.copy(SAMPLE, path)
    return path


@pytest.mark.parametrize("width", WIDTHS)
def test_run_summary_fits(width, long_named_dump, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.chdir(long_named_dump.parent)
    out = tmp_path / "out.parquet"
    code, _, err = run_main(["run", long_named_dump.name, "-o", str(out), "--drop-uniform"], capsys)
    assert code == 0, err
    _check_fits(err.replace("…,", "").replace("… ", " "), width, "the run summary")  # ids in examples: abridged
    assert re.search(rf"^input\s+{re.escape(long_named_dump.name)}\s*$", err, re.M), err
    value_at = {ln.split()[0]: ln.index(ln.split()[1]) for ln in err.splitlines() if ln[:1].isalpha() and
                len(ln.split()) > 1}
    assert value_at["input"] <= width // 3 + 1, err  # the label column leaves the values room


@pytest.mark.parametrize("width", WIDTHS)
def test_metric_names_stay_whole(width, tmp_path, capsys, monkeypatch):
    """A metric's name has no space to wrap at: its label column widens (to half the terminal at most) rather
    than fold it mid-word (`actor/reward_kl_penalty_co` / `eff` at 80 columns), so it reads and greps whole."""
    monkeypatch.setenv("COLUMNS", str(width))
    code, _, err = run_main(["run", SAMPLE, "-o", str(tmp_path / "o.parquet"), "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "--set", "algorithm.use_kl_in_reward=true"], capsys)
    assert code == 0, err
    _check_fits(err, width, "the run summary")
    assert re.search(r"^actor/reward_kl_penalty_coeff\s+\S", err, re.M), err


@pytest.mark.parametrize("width", WIDTHS)
def test_filter_tables_fit(width, tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", str(width))
    out = tmp_path / "f.parquet"
    code, _, err = run_main(["filter", SAMPLE, "-o", str(out), "--variance-top-k", "3"], capsys)
    assert code == 0, err
    _check_fits(err, width, "filter's summary")
    code, js, _ = run_main(["filter", SAMPLE, "-o", str(out), "--variance-top-k", "3", "--json", "--force"], capsys)
    rep = json.loads(js)
    assert re.search(rf"^input\s+{re.escape(SAMPLE)}\s*$", err, re.M) or SAMPLE in err.replace("\n", ""), err
    words = _words(err)
    for header in ("dropped_min_group_size", "dropped_solve_rate", "dropped_variance", "uniform_groups"):
        assert header in words, f"{header} is cut at {width} columns:\n{err}"
    ids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", err)
    assert len(ids) >= 10, err  # the dropped groups listed, each id whole
    assert set(ids) <= set(json.dumps(rep).split('"')), ids


@pytest.mark.parametrize("width", WIDTHS)
def test_audit_summary_fits(width, long_named_dump, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.chdir(tmp_path)
    out = "audited_output_of_a_long_named_run.parquet"
    code, _, err = run_main(["run", str(long_named_dump), "-o", out, "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["audit", out], capsys)
    assert code == 0, err
    _check_fits(err, width, "audit's summary")
    assert re.search(rf"^input\s+{re.escape(out)}\s*$", err, re.M), err
