"""The commands that do no tensor math start without torch (``import torch`` costs seconds): each runs in
a fresh process through the real entry point, once as a user runs it and once with torch imported first,
and the second gives the same output (what it prints and the files it writes, byte for byte) while the
first ends with ``torch`` never imported.

``advcli stats`` is among them, on a dump and on an advcli output: it feeds the run's own figure collector
(advcli.figures), which is numpy only. ``advcli validate`` is not: it runs the estimators (a check only the
math makes must not be skipped, and its verdict carries the math's diagnostics)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLE
from test_format_nemo import SAMPLES, write_step

# runs `advcli ARGV` in this process through the `advcli` entry point, then says whether torch was imported
WRAPPER = ("import sys\n"
           "if sys.argv[1] == 'torch-first':\n"
           "    import torch  # noqa: F401\n"
           "from advcli._entry import main\n"
           "sys.argv = ['advcli', *sys.argv[2:]]\n"
           "try:\n"
           "    main()\n"
           "except SystemExit as e:\n"
           "    assert not e.code, e.code\n"
           "print('\\nTORCH', 'torch' in sys.modules)\n")


def _advcli(mode: str, args: list[str], cwd) -> tuple[str, bool]:
    r = subprocess.run([sys.executable, "-c", WRAPPER, mode, *args], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, "ADVCLI_SERVER": "off", "PYTHONPATH": ROOT})
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    out, _, flag = r.stdout.rpartition("\nTORCH ")
    return out, flag.strip() == "True"


def _nemo_dump(tmp_path) -> str:
    d = tmp_path / "logs"
    d.mkdir()
    write_step(d / "train_data_step1.jsonl", SAMPLES)
    return str(d)


COMMANDS = {
    "inspect": (["inspect", SAMPLE, "--json"], None),
    "inspect a trainer dump": (["inspect", "{nemo}"], None),
    "filter": (["filter", SAMPLE, "--output", "{out}", "--drop-uniform", "--json"], "{out}"),
    "convert": (["convert", "{nemo}", "--output", "{out}"], "{out}"),
    "explain": (["explain", "--flavor", "verl", "--set", "algorithm.use_kl_in_reward=true",
                 "--set", "algorithm.rollout_correction.rollout_is=token"], None),
    "explain --keys": (["explain", "--flavor", "nemo", "--keys"], None),
    "stats": (["stats", SAMPLE, "--json"], None),
    # the page is written too (advcli.report, torch-free) but not compared: it shows its time and date
    "stats of an advcli output": (["stats", "{advout}", "--json", "--report", "{out}.html"], None),
}


def _advcli_output(tmp_path) -> str:
    """An advcli output of the sample data (GRPO, verl): advantages, returns and provenance to describe."""
    import advcli

    path = tmp_path / "advcli_out.parquet"
    advcli.run(SAMPLE, str(path), flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    return str(path)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_light_command_runs_without_torch_and_says_the_same(name, tmp_path):
    argv, written = COMMANDS[name]
    nemo = _nemo_dump(tmp_path)
    advout = _advcli_output(tmp_path) if "{advout}" in argv else None
    results = []
    for mode in ("as-run", "torch-first"):
        out_path = tmp_path / f"{mode}.parquet"
        args = [a.format(nemo=nemo, out=out_path, advout=advout) for a in argv]
        printed, torch_loaded = _advcli(mode, args, tmp_path)
        data = open(written.format(out=out_path), "rb").read() if written else b""
        printed = re.sub(r'"created": "[^"]*"', '"created": ""', printed.replace(str(out_path), "OUT"))
        printed = re.sub(r'"(seconds|\w+_per_s)": [0-9.e+-]+', r'"\1": 0', printed)  # stats: its own run time
        results.append((printed, data, torch_loaded))
    (printed, data, torch_loaded), (printed_t, data_t, torch_loaded_t) = results
    assert torch_loaded_t  # the wrapper's own check works
    assert not torch_loaded, f"advcli {name} imported torch"
    assert printed == printed_t and data == data_t
    assert printed.strip() or data  # it did something
    if name == "inspect":  # asked of the estimator registry, loaded without torch
        est = json.loads(printed)["estimators"]
        assert est["grpo"]["ok"] and est["optimal_token_baseline"]["missing"] == ["sum_pi_squared"]


def _read_at_import(tree) -> list:
    """The nodes of a module that run when it is imported: not function bodies, lambdas or annotations
    (``from __future__ import annotations``), but decorators and default argument values."""
    import ast

    out = []

    def walk(node) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for expr in child.decorator_list + child.args.defaults + [d for d in child.args.kw_defaults if d]:
                    out.extend(ast.walk(expr))
            elif isinstance(child, ast.AnnAssign):
                out.extend(ast.walk(child.value) if child.value else ())
            elif not isinstance(child, (ast.Lambda, ast.arg)):
                out.append(child)
                walk(child)

    walk(tree)
    return out


def test_no_module_that_takes_torch_lazily_touches_it_when_imported():
    """A module that takes torch from advcli.lazy_torch and reads ``torch.X`` at import time (a constant, a
    default argument value, a decorator) imports torch there, and with it every light command that loads it
    (the estimator registry loads every estimator module and what they import)."""
    import ast

    found, lazy = [], 0
    for d, _, files in os.walk(os.path.join(ROOT, "advcli")):
        for f in files:
            path = os.path.join(d, f)
            if not f.endswith(".py") or f == "lazy_torch.py":
                continue
            src = open(path, encoding="utf-8").read()
            if "lazy_torch import torch" not in src:
                continue
            lazy += 1
            found += [f"{os.path.relpath(path, ROOT)}:{n.lineno}" for n in _read_at_import(ast.parse(src))
                      if isinstance(n, ast.Name) and n.id == "torch"]
    assert lazy > 20
    assert not found, f"torch read at import time (move it into the function): {found}"


def test_the_figures_and_the_report_do_not_import_torch():
    """advcli.figures (the run statistics), advcli.report and advcli.result are numpy only: a module there
    that imports torch, directly or lazily, would bring torch into advcli stats."""
    import ast

    paths = [os.path.join(ROOT, "advcli", "result.py")]
    for sub in ("figures", "report"):
        d = os.path.join(ROOT, "advcli", sub)
        paths += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "torch" or n.startswith("torch.") or n.endswith("lazy_torch") for n in names):
                found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert len(paths) > 15 and not found, found
