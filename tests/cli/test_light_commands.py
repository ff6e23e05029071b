"""The commands that do no tensor math start without torch (``import torch`` costs seconds): each runs in
a fresh process through the real entry point, once as a user runs it and once with torch imported first,
and the second gives the same output (what it prints and the files it writes, byte for byte) while the
first ends with ``torch`` never imported.

``advcli stats`` is among them, on a dump and on an advcli output: it feeds the run's own figure collector
(advcli.figures), which is numpy only. So is ``advcli validate`` (its ``--deep`` runs the math): without
torch it must still refuse what ``advcli run`` refuses, with the same message: each bad input below is
given to both."""
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


# ---- advcli validate without torch -------------------------------------------------------------------------

RUN_STATUS = ("import sys\n"
              "from advcli._entry import main\n"
              "sys.argv = ['advcli', *sys.argv[1:]]\n"
              "code = 0\n"
              "try:\n"
              "    main()\n"
              "except SystemExit as e:\n"
              "    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)\n"
              "print('\\nTORCH', 'torch' in sys.modules)\n"
              "sys.exit(code)\n")


def _advcli_status(args: list[str], cwd) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr, whether torch was imported) of ``advcli ARGS`` in a fresh process."""
    r = subprocess.run([sys.executable, "-c", RUN_STATUS, *args], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, "ADVCLI_SERVER": "off", "PYTHONPATH": ROOT})
    out, _, flag = r.stdout.rpartition("\nTORCH ")
    return r.returncode, out, r.stderr, flag.strip() == "True"


def _counts(path: str) -> tuple[int, int, int]:
    """(rows, tokens, mask=1 tokens) of a canonical dump, read with pyarrow."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    mask = pq.read_table(path, columns=["response_mask"]).column("response_mask")
    return len(mask), int(pc.sum(pc.list_value_length(mask)).as_py()), int(pc.sum(pc.list_flatten(mask)).as_py())


# flavor -> settings the sample data needs under it (slime's group size; TRL and open-instruct group by
# position, and the sample's rows are not in rollout order: group by the ids instead)
FLAVOR_SETTINGS = {"advcli": [], "areal": [], "nemo": [], "open-instruct": ["--set", "advcli.group_by=id"],
                   "openrlhf": [], "prime-rl": [], "roll": [], "skyrl": [],
                   "slime": ["--set", "n_samples_per_prompt=8"], "trl": ["--set", "advcli.group_by=id"], "verl": []}


def test_every_flavor_is_listed_here():
    from advcli import flavors

    assert sorted(flavors.names()) == sorted(FLAVOR_SETTINGS)


@pytest.mark.parametrize("flavor", sorted(FLAVOR_SETTINGS))
def test_validate_every_flavor_default_estimator_without_torch(flavor, tmp_path):
    """Each flavor's default estimator on the sample data: valid, torch never imported, the counts those of the
    file (read here with pyarrow), and the same verdict as --deep, which runs the math (and imports torch)."""
    args = ["validate", SAMPLE, "--flavor", flavor, *FLAVOR_SETTINGS[flavor], "--json"]
    code, out, err, torch_loaded = _advcli_status(args, tmp_path)
    assert code == 0, err[-2000:]
    assert not torch_loaded, f"advcli validate --flavor {flavor} imported torch"
    verdict = json.loads(out)
    rows, tokens, valid = _counts(SAMPLE)
    counts = (verdict["valid"], verdict["rows"], verdict["tokens"], verdict["valid_tokens"])
    assert counts == (True, rows, tokens, valid)
    assert verdict["not_computed"] == ["diagnostics"]
    code, out_deep, err, torch_loaded = _advcli_status(args + ["--deep"], tmp_path)
    assert code == 0 and torch_loaded, err[-2000:]
    deep = json.loads(out_deep)
    assert "not_computed" not in deep
    for key in ("ran", "estimator", "rows", "tokens", "valid_tokens", "warnings"):
        assert verdict[key] == deep[key], key


def test_validate_a_trainer_dump_without_torch(tmp_path):
    """A NeMo RL dump (jsonl steps), read in its own format: valid without torch, its 4 samples' tokens counted."""
    nemo = _nemo_dump(tmp_path)
    code, out, err, torch_loaded = _advcli_status(["validate", nemo, "--flavor", "nemo", "--json"], tmp_path)
    assert code == 0, err[-2000:]
    assert not torch_loaded
    verdict = json.loads(out)
    assert verdict["ran"].startswith("nemo") and verdict["rows"] == len(SAMPLES)


def test_validate_runs_a_user_estimator_deep_by_itself(tmp_path):
    """Only running a user function checks what it returns: validate runs it (torch) and says so."""
    (tmp_path / "est.py").write_text("def half(rewards):\n    return rewards[:-1] * 0.5\n")  # one row short
    code, out, err, torch_loaded = _advcli_status(["validate", SAMPLE, "--estimator", "./est.py:half"], tmp_path)
    assert code == 2 and torch_loaded
    assert "returned shape" in err and "one advantage per row" in err, err


def _bad(tmp_path, change) -> str:
    """The sample data with ``change(table) -> table`` applied, written to tmp_path."""
    import pyarrow.parquet as pq

    path = str(tmp_path / "bad.parquet")
    pq.write_table(change(pq.read_table(SAMPLE)), path)
    return path


def _set(name, values):
    import pyarrow as pa

    def change(t):
        i = t.schema.get_field_index(name)
        return t.set_column(i, t.schema.field(i), pa.array(values(t.column(name).to_pylist()), t.schema.field(i).type))
    return change


def _drop(name):
    return lambda t: t.drop_columns([name])


def _row5(v):
    return lambda xs: xs[:5] + [v] + xs[6:]


def _longer(xs):
    return xs[:3] + [xs[3] + [0.0]] + xs[4:]


def _mask_two(xs):
    return xs[:7] + [[2] + xs[7][1:]] + xs[8:]


def _inf_token(xs):
    return xs[:9] + [xs[9][:2] + [float("inf")] + xs[9][3:]] + xs[10:]


def _same(t):
    return t


# (change to the sample data, advcli options, words the message must have): one per check moved out of the
# math (estimator spec checks, torch-free data checks)
BAD = {
    "groups missing": (_drop("prompt_id"), ["--estimator", "grpo"], "needs groups"),
    "remax without reward_baseline": (_drop("reward_baseline"), ["--estimator", "remax"], "reward_baseline"),
    "pkpo k = 0": (_same, ["--estimator", "pkpo", "--set", "estimator.k=0"], "estimator.k"),
    "pkpo loo_minus_one k = 1": (_same, ["--estimator", "pkpo", "--set", "estimator.k=1",
                                         "--set", "estimator.baseline=loo_minus_one"], "k >= 2"),
    "qae level outside [0, 1]": (_same, ["--estimator", "qae", "--set", "estimator.k=1.5"], "[0, 1]"),
    "maxrl over_eps with eps 0": (_same, ["--estimator", "maxrl", "--set", "estimator.singleton=over_eps",
                                          "--set", "estimator.eps=0"], "estimator.eps"),
    "mgpo target rate 1": (_same, ["--estimator", "mgpo", "--set", "estimator.target_success_rate=1"],
                           "strictly between 0 and 1"),
    "entropic target_kl 0": (_same, ["--estimator", "entropic_adaptive_beta", "--set", "estimator.target_kl=0"],
                             "target_kl"),
    "gdpo_loo with one component": (_same, ["--estimator", "gdpo_loo", "--set", "reward.components=[acc]"],
                                    "at least 2 reward components"),
    "gdpo with more weights than components": (_same, ["--estimator", "gdpo", "--set", "reward.components=[acc]",
                                                       "--set", "estimator.weights=[1,2]"],
                                               "2 weights for 1 reward components"),
    "ema_baseline decay 1": (_same, ["--estimator", "ema_baseline", "--set", "estimator.decay=1"],
                             "key estimator.decay must be in [0, 1)"),
    "hierarchical_grpo without episode agents": (_same, ["--estimator", "grpo_peers",
                                                         "--set", "estimator.episode_agents=[]"], "episode_agents"),
    "length penalty without the turns column": (_same, ["--estimator", "grpo_cohort",
                                                        "--set", "estimator.length_penalty=[0,0,1]"], "'num_turns'"),
    "areal turn timesteps without turn_ids": (_same, ["--estimator", "areal_gae", "--set", "estimator.timestep=turn"],
                                              "'turn_ids'"),
    "codapo without accuracy column": (_drop("acc"), ["--estimator", "codapo"], "'acc'"),
    "NaN reward": (_set("reward", _row5(float("nan"))), [], "row 5: reward nan is not finite"),
    "null reward": (_set("reward", _row5(None)), [], "row 5: null value"),
    "ragged log-probs": (_set("old_log_probs", _longer), [], "row 3"),
    "mask value 2": (_set("response_mask", _mask_two), [], "mask value 2"),
    "infinite value": (_set("values", _inf_token), ["--estimator", "gae"], "position 2: value inf"),
    "positional groups that disagree with the ids": (_same, ["--flavor", "trl"], "positional group of 8"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_validate_refuses_what_run_refuses_without_torch(case, tmp_path):
    change, options, words = BAD[case]
    src = _bad(tmp_path, change)
    options = options if "--flavor" in options else ["--flavor", "advcli", *options]
    code, _, err_validate, torch_loaded = _advcli_status(["validate", src, *options], tmp_path)
    assert code == 2 and not torch_loaded, (case, err_validate[-2000:])
    out = tmp_path / "out.parquet"
    code, _, err_run, _ = _advcli_status(["run", src, *options, "--output", str(out)], tmp_path)
    assert code == 2 and not out.exists(), (case, err_run[-2000:])
    first = err_validate.strip().splitlines()[0]
    assert first == err_run.strip().splitlines()[0], (first, err_run)
    assert words in first, first
    assert "Traceback" not in err_validate + err_run


def test_the_figures_and_the_report_do_not_import_torch():
    """advcli.figures (the run statistics), advcli.report and advcli.results are numpy only: a module there
    that imports torch, directly or lazily, would bring torch into advcli stats."""
    import ast

    paths = []
    for sub in ("figures", "report", "results"):
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


def test_explain_given_a_dump_says_what_explain_does_and_names_inspect(capsys):
    """`advcli explain DUMP` was a bare usage error ('Got unexpected extra argument')."""
    from conftest import SAMPLE, run_main

    code, _, err = run_main(["explain", SAMPLE], capsys)
    assert code == 2 and "explain takes no input" in err and f"advcli inspect {SAMPLE}" in " ".join(err.split())
