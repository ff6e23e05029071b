"""`advcli inspect` on a trainer's dump suggests what works: the "read it with" command, pasted as
printed (the path the user typed, the dump's own group size), runs and gives the trainer's own
advantages; the estimators it says the dump can feed are exactly those `run` accepts on it."""
import json
import re
import shlex
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
from conftest import run_cli, run_main
from test_format_roll import N as ROLL_N
from test_format_roll import rlvr, roll_grpo
from test_format_trl import G as TRL_G
from test_format_trl import write_step
from test_format_verl import write


def read_it_with(out: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("read it with"))
    return shlex.split(line.removeprefix("read it with"))


def paste(words: list[str], cwd):
    assert words[:2] == ["advcli", "run"], words
    return run_cli(*words[1:], "-q", cwd=cwd)


def test_trl_command_runs_when_pasted(tmp_path):
    d = tmp_path / "exp" / "completions"
    d.mkdir(parents=True)
    # TRL's GRPO advantages of G-row blocks, computed by the builder from the formula
    expected = write_step(d / "completions_00003.parquet", 3, 7) + write_step(d / "completions_00004.parquet", 4, 8)
    r = run_cli("inspect", "exp/completions", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    words = read_it_with(r.stdout)
    assert words[2] == "exp/completions"  # the path as typed, not a template's
    assert f"num_generations={TRL_G}" in words and TRL_G != 8  # the dump's own group size
    p = paste(words, tmp_path)
    assert p.returncode == 0, p.stderr
    got = pq.read_table(tmp_path / "out.parquet").column("advantages").to_pylist()
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_roll_command_uses_the_dumps_group_size(tmp_path):
    d = tmp_path / "my dump"  # a path the shell must quote
    d.mkdir()
    objs = [rlvr(0, 1), rlvr(1, 2)]
    for s, o in enumerate(objs):
        (d / f"rollout_dump_data.step_{s}.jsonl").write_text(json.dumps(o) + "\n")
    r = run_cli("inspect", "my dump", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    words = read_it_with(r.stdout)
    assert words[2] == "my dump"
    assert f"actor_infer.generating_args.num_return_sequences={ROLL_N}" in words and ROLL_N != 8
    p = paste(words, tmp_path)
    assert p.returncode == 0, p.stderr
    exp = roll_grpo(objs[0]["scores"]) + roll_grpo(objs[1]["scores"])
    got = pq.read_table(tmp_path / "out.parquet").column("advantages").to_pylist()
    assert np.allclose(got, exp, rtol=1e-5, atol=1e-5)


def test_can_feed_is_what_run_accepts(tmp_path, capsys):
    """Every estimator inspect lists runs (exit 0), every other one is refused (exit 2), under the canonical
    defaults (--flavor advcli --set estimator.name=NAME); one said to need a setting runs once given the
    setting inspect names (gdpo's and gdpo_loo's components: TRL's two reward-function columns)."""
    d = tmp_path / "completions"
    d.mkdir()
    write_step(d / "completions_00001.parquet", 1, 3)
    code, out, err = run_main(["inspect", d, "--json"], capsys)
    assert code == 0, err
    estimators = json.loads(out)["estimators"]
    assert estimators["grpo"]["ok"] and not estimators["gae"]["ok"]
    named = "needs its reward components named: --set 'reward.components=[accuracy_reward,format_reward]'"
    assert estimators["gdpo"]["missing"] == [named] and estimators["gdpo_loo"]["missing"] == [named]
    for name, e in estimators.items():
        code, _, err = run_main(["run", d, "-o", tmp_path / f"{name}.parquet", "--flavor", "advcli",
                                 "--set", f"estimator.name={name}", "-q"], capsys)
        assert code == (0 if e["ok"] else 2), (name, e, err)
        setting = re.search(r"--set '([^']+)'", " ".join(e["missing"])) if e.get("refused") else None
        if setting and name != "mix":
            code, _, err = run_main(["run", d, "-o", tmp_path / f"{name}.parquet", "--flavor", "advcli",
                                     "--set", f"estimator.name={name}", "--set", setting.group(1), "-q"], capsys)
            assert code == 0, (name, e, err)


def test_verl_multi_output_dump_suggests_grpo_over_sessions(tmp_path, capsys):
    """A verl v1 dump with several outputs per session: every output is a row; GRPO runs on each session's
    last output and gives its advantage to all of the session's outputs, other group estimators see every
    output. inspect lists both as feedable and suggests a GRPO command that runs."""
    d = tmp_path / "r"
    d.mkdir()
    pu = "3f2b0c9e-8d1a-4c55-9e2f-0a1b2c3d4e5f"
    write(d / "5.jsonl", [{"input": "q", "output": f"turn{k}", "gts": "1", "score": float(s == 0), "step": 5,
                           "uid": f"{pu}_{s}_{k}"} for s in range(2) for k in range(1 + s)])
    code, out, err = run_main(["inspect", d, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    ok = [n for n, e in data["estimators"].items() if e["ok"]]
    assert "grpo" in ok and "rloo" in ok and "gae" not in ok
    words = shlex.split(data["dump"]["example"])
    assert words[2] == str(d) and "algorithm.adv_estimator=grpo" in words
    p = paste(words, tmp_path)
    assert p.returncode == 0, p.stderr
    a = 0.5 / (np.sqrt(0.5) + 1e-6)  # GRPO of the sessions' last outputs, rewards [1, 0] (Bessel std)
    assert np.allclose(pq.read_table(tmp_path / "out.parquet").column("advantages").to_pylist(), [a, -a, -a],
                       rtol=1e-5)


def test_inspect_does_not_import_torch(tmp_path):
    d = tmp_path / "completions"
    d.mkdir()
    write_step(d / "completions_00001.parquet", 1, 3)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "advcli", "inspect", str(d)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "read it with" in r.stdout
    assert not any(ln.rstrip().endswith("| torch") for ln in r.stderr.splitlines())
