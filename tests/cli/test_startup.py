"""Start-up (issue 42): typer converts only what runs (the command named, or parameter-free stand-ins for the
group's own page), and the pages and errors are the same as with every command converted; a run imports none
of the helpers it does not need before torch. Times are measured by benchmarks/startup.py, never asserted."""
import contextlib
import os
import subprocess
import sys

import pytest
import typer.main
from conftest import ROOT, SAMPLE, run_main

from advcli import cli

GROUP = {"_root", "_version"}  # the app's callback and its --version option's
APP_COMMANDS = {"run", "explain", "sample", "inspect_cmd", "validate_cmd", "stats_cmd", "compare_cmd", "audit_cmd",
                "filter_cmd", "convert_cmd"}


@pytest.fixture
def converted(monkeypatch):
    """The functions whose parameters typer reads (each command's, the group's callback) as it converts."""
    seen = []
    real = typer.main.get_params_from_function

    def spy(func):
        params = real(func)
        if params:
            seen.append(func.__name__)
        return params

    monkeypatch.setattr(typer.main, "get_params_from_function", spy)
    return seen


@pytest.mark.parametrize("argv, only", [(["run", "--help"], "run"), (["inspect", SAMPLE], "inspect_cmd"),
                                        (["explain", "--flavor", "verl"], "explain"),
                                        (["server", "--help"], None)])
def test_only_the_command_named_is_converted(argv, only, converted, capsys):
    code, out, _ = run_main(argv, capsys)
    assert code == 0 and out
    commands = set(converted) - GROUP  # the group's own --version
    if only is not None:
        assert commands == {only}
    else:  # a group: its own commands, none of the app's others
        assert not commands & APP_COMMANDS


def test_the_group_page_converts_no_command(converted, capsys):
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "Commands" in out
    assert not set(converted) & APP_COMMANDS


@pytest.mark.parametrize("argv", [["--help"], [], ["-h"], ["run", "--help"], ["audit", "--help"], ["runn", "x"],
                                  ["run"], ["run", "--bogus"], ["--version"], ["compare", "--help"]])
def test_pages_and_errors_are_those_of_every_command_converted(argv, monkeypatch, capsys):
    """The same output and exit code with the shortcut as with the whole app converted (typer's own way)."""
    short = run_main(argv, capsys)
    monkeypatch.setattr(cli, "_only_what_runs", lambda argv: contextlib.nullcontext())
    full = run_main(argv, capsys)
    assert short == full
    if argv in ([], ["--help"], ["-h"]):  # the page lists every command with its first line
        for info in cli.app.registered_commands:
            name = info.name or info.callback.__name__
            assert f" {name} " in short[1] + short[2]


def test_a_run_before_torch_imports_no_helper_it_does_not_need(tmp_path):
    """Up to its first `import torch` a run parses, opens the dump (its Parquet footer read by advcli.io.footer)
    and resolves the configuration: no pyarrow and no numpy (torch imports numpy; pyarrow comes after it), no
    pandas, no rich (no progress bar off a terminal), no pydantic (typer's adapters), no other command's
    module, and no dump conversion (the input is advcli's own Parquet)."""
    code = ("import os, sys\n"
            "class Stop:\n"
            "    @staticmethod\n"
            "    def find_spec(name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            print(sorted(sys.modules), file=sys.stderr); sys.stderr.flush(); os._exit(0)\n"
            "sys.meta_path.insert(0, Stop)\n"
            "sys.argv = ['advcli'] + sys.argv[1:]\n"
            "from advcli._entry import main\n"
            "main()\n"
            "sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=ROOT, ADVCLI_SERVER="off")
    r = subprocess.run([sys.executable, "-c", code, "run", SAMPLE, "-o", str(tmp_path / "o.parquet")],
                       capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    assert r.returncode == 0, r.stderr
    modules = eval(r.stderr.strip().splitlines()[-1])  # noqa: S307 - our own print of a list of names
    tops = {m.split(".")[0] for m in modules}
    assert not tops & {"pyarrow", "numpy", "pandas", "rich", "pydantic", "yaml", "ray", "wandb", "tensorboard"}, \
        sorted(tops)
    # advcli's own Parquet is not a dump: the formats are checked by name, nothing converted or described
    assert not {"advcli.formats.conversion", "advcli.formats.describe"} & set(modules)
    assert "advcli.formats.verl" in modules  # the check that it is not a dump did run
    assert not (tmp_path / "o.parquet").exists()
