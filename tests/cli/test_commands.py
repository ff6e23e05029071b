"""inspect, validate, stats, compare — and every command's --help leading to a working call.

Expected figures are computed here from the Parquet files with pyarrow/numpy, or from the
estimators' formulas (verl core_algos.py @1dda039b: GRPO (s − mean)/(std + 1e-6), RLOO
n/(n−1)·(s − mean)).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, SAMPLE, run_main


def invoke(*args):
    from typer.testing import CliRunner

    from advcli.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    res.returncode = res.exit_code
    return res


def main_rc(capsys, *args):
    """``advcli ARGS`` through main() in-process: (exit code, stdout, stderr) — errors included."""
    from advcli.cli import main

    capsys.readouterr()
    saved = sys.argv
    sys.argv = ["advcli", *map(str, args)]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code or 0
    finally:
        sys.argv = saved
    out = capsys.readouterr()
    return code, out.out, out.err


COMMANDS = ["run", "explain", "sample", "inspect", "validate", "stats", "compare"]


def _help_text(cmd: str) -> str:
    r = invoke(cmd, "--help")
    assert r.returncode == 0
    return re.sub(r"[│╭╮╰╯─]", " ", r.stdout)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_help_has_examples(cmd):
    text = _help_text(cmd)
    assert "Examples" in text
    assert "advcli " + cmd in text


def _example_lines(cmd: str) -> list[str]:
    """The example command lines of a --help on the sample data (continuations joined)."""
    text = _help_text(cmd)
    lines, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if cur:
            cur += " " + s.rstrip("\\").strip()
            if not s.endswith("\\"):
                lines.append(cur)
                cur = ""
            continue
        if s.startswith("advcli " + cmd) and "sample_data/rollouts.parquet" in s:
            if s.endswith("\\"):
                cur = s.rstrip("\\").strip()
            else:
                lines.append(s)
    return lines


@pytest.mark.parametrize("cmd", ["run", "inspect", "validate", "stats", "compare"])
def test_help_leads_to_a_working_call_on_the_sample(cmd, tmp_path):
    """Copy the first sample-data example out of --help and run it as a new user would."""
    lines = _example_lines(cmd)
    assert lines, f"`advcli {cmd} --help` has no example on sample_data/rollouts.parquet"
    line = lines[0].split("&&")[0].split("|")[0].strip()
    args = shlex.split(line)[1:]
    args = [os.path.join(ROOT, a) if a.startswith("sample_data/") else a for a in args]
    args = [str(tmp_path / a) if a.endswith((".parquet", ".html", ".md", ".json")) and not os.path.isabs(a) else a
            for a in args]
    r = invoke(*args)
    assert r.returncode == 0, (line, r.stdout, r.stderr)


def test_help_and_inspect_do_not_import_torch():
    code = ("import sys\n"
            "from advcli.cli import main\n"
            "for argv in (['advcli', '--help'], ['advcli', 'compare', '--help'], ['advcli', 'stats', '--help'],\n"
            "             ['advcli', 'inspect', sys.argv[1], '--json']):\n"
            "    sys.argv = argv\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, SAMPLE], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("TORCH False"), r.stdout[-500:]


# ----------------------------------------------------------------------------------------- inspect
def test_inspect_figures_match_the_file():
    r = invoke("inspect", SAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    t = pq.read_table(SAMPLE)
    masks = t.column("response_mask").to_pylist()
    lens = np.array([len(m) for m in masks])
    assert d["rows"] == t.num_rows == 384
    assert d["tokens"] == int(lens.sum())
    assert d["valid_tokens"] == sum(sum(m) for m in masks)
    assert d["length"]["min"] == lens.min() and d["length"]["max"] == lens.max()
    assert d["mask"]["rows_ending_masked"] == sum(1 for m in masks if m and m[-1] == 0)
    interior = sum(1 for m in masks if "10" in "".join(map(str, m)).strip("0") and
                   re.search("10+1", "".join(map(str, m))))
    assert d["mask"]["rows_with_interior_masked_spans"] == interior
    df = t.select(["prompt_id", "step", "reward"]).to_pandas()
    g = df.groupby(["step", "prompt_id"])
    assert d["groups"]["count"] == g.ngroups
    assert d["groups"]["size_counts"] == {str(k): int(v) for k, v in g.size().value_counts().items()}
    assert d["groups"]["all_equal_reward"] == int((g["reward"].nunique() == 1).sum())
    assert d["steps"]["count"] == df["step"].nunique()
    assert d["reward"]["mean"] == pytest.approx(df["reward"].astype(float).mean())
    est = d["estimators"]
    assert est["grpo"]["ok"] and est["gae"]["ok"] and est["remax"]["ok"]
    assert not est["optimal_token_baseline"]["ok"] and est["optimal_token_baseline"]["missing"] == ["sum_pi_squared"]
    assert d["kl_in_reward"] is True
    assert sum(d["length_histogram"]["counts"]) == 384


def test_inspect_mask_figures_on_every_mask_shape(tmp_path, monkeypatch, capsys):
    """Empty rows, all-masked rows, rows starting or ending with 0, interior spans, a one-token row, across
    batches of 3 rows (a row's figures never depend on its neighbours): each count by hand, row by row."""
    import pyarrow as pa

    import advcli.commands.inspect as insp

    rng = np.random.default_rng(7)
    masks = [[], [0], [1], [0, 0, 0], [1, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0, 1, 0], [], [0, 1, 0, 1]]
    masks += [rng.integers(0, 2, int(rng.integers(0, 9))).tolist() for _ in range(40)]
    src = tmp_path / "m.parquet"
    pq.write_table(pa.table({"prompt_id": list(range(len(masks))), "reward": [1.0] * len(masks),
                             "response_mask": pa.array(masks, pa.list_(pa.int8()))}), src)
    monkeypatch.setattr(insp, "BATCH_ROWS", 3)
    code, out, err = run_main(["inspect", src, "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)

    def spans(m):  # a 0 -> 1 rise after the first token
        return any(m[i] == 1 and m[i - 1] == 0 for i in range(1, len(m)))

    assert d["tokens"] == sum(map(len, masks)) and d["valid_tokens"] == sum(map(sum, masks))
    assert d["mask"] == {"rows_with_interior_masked_spans": sum(spans(m) for m in masks),
                         "rows_ending_masked": sum(1 for m in masks if m and m[-1] == 0),
                         "rows_starting_masked": sum(1 for m in masks if m and m[0] == 0),
                         "rows_all_masked": sum(1 for m in masks if m and not any(m)),
                         "empty_rows": sum(1 for m in masks if not m)}
    assert d["valid_length"]["max"] == max(map(sum, masks)) and d["length"]["max"] == max(map(len, masks))


def test_the_estimator_registry_loads_without_torch():
    """inspect, explain and the response-level checks ask the registry itself: every estimator module loads
    (its registration, parameters and declarations) without importing torch, which its functions import
    when they first run."""
    code = ("import sys, json\n"
            "from advcli.estimators import all_specs\n"
            "specs = all_specs()\n"
            "print(json.dumps({'torch': 'torch' in sys.modules, 'names': sorted(specs),\n"
            "    'components': [n for n, s in sorted(specs.items()) if s.reward_from_components],\n"
            "    'gdpo_loo': specs['gdpo_loo'].min_components, 'remax': specs['remax'].drops_masked_rewards,\n"
            "    'lengths': [n for n, s in sorted(specs.items()) if s.needs_lengths]}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["torch"] is False
    from advcli.estimators import all_specs
    assert got["names"] == sorted(all_specs()) and len(got["names"]) > 20
    # what the estimators declare (instead of the code checking their names)
    assert got["components"] == ["gdpo"] and got["gdpo_loo"] == 2 and got["remax"] is True
    assert got["lengths"] == ["opo"]


def test_inspect_positional_blocks_and_an_advcli_output(tmp_path):
    n = 4
    rows = 12
    tbl = pa.table({"prompt_id": [f"p{i // n}" for i in range(rows)], "reward": [float(i % 2) for i in range(rows)],
                    "response_mask": pa.array([[1] * (i + 1) for i in range(rows)], pa.list_(pa.int8()))})
    src = tmp_path / "blocks.parquet"
    pq.write_table(tbl, src)
    d = json.loads(invoke("inspect", src, "--json").stdout)
    assert d["groups"]["contiguous_blocks_of"] == n
    assert not d["estimators"]["gae"]["ok"] and d["estimators"]["gae"]["missing"] == ["values"]
    out = tmp_path / "out.parquet"
    assert invoke("run", src, "-o", out, "-q").returncode == 0
    d = json.loads(invoke("inspect", out, "--json").stdout)
    assert d["advcli_output"] and d["produced_by"]["flavor"] == "verl"
    roles = {c["column"]: c["meaning"] for c in d["schema"]}
    assert roles["advantages"] == "advcli output"


# ---------------------------------------------------------------------------------------- validate
def test_validate_ok_and_writes_nothing(tmp_path):
    out = tmp_path / "out.parquet"
    r = invoke("validate", SAMPLE, "--flavor", "verl", "--set", "algorithm.adv_estimator=gae", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["valid"] and d["rows"] == 384 and d["estimator"] == "gae"
    assert not out.exists() and os.listdir(tmp_path) == []


def test_validate_rejects_what_run_rejects(tmp_path, capsys):
    t = pq.read_table(SAMPLE)
    rewards = t.column("reward").to_numpy().copy()
    rewards[17] = np.nan
    bad = tmp_path / "nan.parquet"
    pq.write_table(t.set_column(t.column_names.index("reward"), "reward", pa.array(rewards, pa.float32())), bad)
    v = main_rc(capsys, "validate", bad)
    r = main_rc(capsys, "run", bad, "-o", tmp_path / "o.parquet")
    assert v[0] == 2 and r[0] == 2
    assert "row 17" in v[2] and "'reward'" in v[2]
    assert v[2].strip() == r[2].strip()  # the same message as run
    assert not (tmp_path / "o.parquet").exists()
    code, out, err = main_rc(capsys, "validate", SAMPLE, "--set", "algorithm.adv_estimater=gae", "--json")
    assert code == 2
    assert json.loads(out)["valid"] is False
    assert "Did you mean 'algorithm.adv_estimator'" in err
    assert "Traceback" not in err


def test_validate_rejects_a_null_prompt_id_as_run_does(tmp_path, capsys):
    """validate read the group-key columns without their null check (and numpy warned of a NaN cast), so it said
    "ok" where run refuses the row: the same refusal now, from both."""
    t = pq.read_table(SAMPLE)
    ids = t.column("prompt_id").to_pylist()
    ids[7] = None
    bad = tmp_path / "null.parquet"
    pq.write_table(t.set_column(t.column_names.index("prompt_id"), "prompt_id", pa.array(ids, pa.string())), bad)
    v = main_rc(capsys, "validate", bad, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo")
    r = main_rc(capsys, "run", bad, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                "algorithm.adv_estimator=grpo")
    assert v[0] == 2 and r[0] == 2
    assert "column 'prompt_id', row 7: null value" in v[2] and v[2].strip() == r[2].strip()
    assert "RuntimeWarning" not in v[2]


def _with_token_value(tmp_path, column: str, row: int, value: float, dtype=pa.float32()):
    t = pq.read_table(SAMPLE)
    lists = t.column(column).to_pylist()
    lists[row][2] = value
    path = tmp_path / f"{column}_{row}.parquet"
    pq.write_table(t.set_column(t.column_names.index(column), column, pa.array(lists, pa.list_(dtype))), path)
    return path


GRPO_ = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
GAE_ = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]


@pytest.mark.parametrize("column, value, dtype, flags, code, said", [
    # a NaN in a log-prob column GRPO does not read: run writes the advantages; validate refused it (exit 2)
    ("old_log_probs", float("nan"), pa.float32(), GRPO_, 0, "this run does not read column 'old_log_probs'"),
    ("old_log_probs", float("nan"), pa.float32(), GRPO_ + ["--deep"], 0, "does not read column 'old_log_probs'"),
    # read by the KL: both refuse
    ("old_log_probs", float("nan"), pa.float32(), GRPO_ + ["--set", "algorithm.use_kl_in_reward=true"], 2,
     "column 'old_log_probs', row 4, position 2: value nan is not finite"),
    # −inf where only a clamping KL reads it (verl's low_var_kl): run runs it; validate refused it
    ("old_log_probs", float("-inf"), pa.float32(), GRPO_ + ["--set", "algorithm.use_kl_in_reward=true", "--set",
                                                             "algorithm.kl_penalty=low_var_kl"], 0, None),
    # a float64 value beyond float32: validate passed it, run refused it as 'inf is not finite'
    ("values", 1e300, pa.float64(), GAE_, 2, "value 1e+300 is beyond float32 (up to 3.4e+38), the run's precision"),
])
def test_validate_says_what_run_does_of_a_token_value(tmp_path, capsys, column, value, dtype, flags, code, said):
    """validate exits 0 exactly when run with the same options succeeds, with run's message: token values are
    checked as run checks them (at the run's precision; −inf where only a clamping KL reads it; a column the run
    does not read gives a warning, not a refusal)."""
    bad = _with_token_value(tmp_path, column, 4, value, dtype)
    deep = "--deep" in flags
    opts = [f for f in flags if f != "--deep"]
    v = main_rc(capsys, "validate", bad, *flags, "--json")
    r = main_rc(capsys, "run", bad, "-o", tmp_path / "o.parquet", *opts, "-q")
    assert v[0] == code and r[0] == code, (v, r)
    if code == 2:
        assert said in r[2] and said in v[2], (v[2], r[2])
        assert json.loads(v[1])["error"] in r[2]
    elif said:
        assert any(said in w for w in json.loads(v[1])["warnings"]), v[1]
        assert pq.read_table(tmp_path / "o.parquet").num_rows == pq.read_metadata(bad).num_rows
    if column == "values" and not deep:  # at float64 both take it
        v = main_rc(capsys, "validate", bad, *flags, "--precision", "float64")
        assert v[0] == 0, v


def test_validate_checks_the_output_path(tmp_path, capsys):
    out = tmp_path / "exists.parquet"
    out.write_bytes(b"x")
    code, _, err = main_rc(capsys, "validate", SAMPLE, "-o", out)
    assert code == 2 and "--force" in err
    assert out.read_bytes() == b"x"


# ------------------------------------------------------------------------------------------- stats
def test_stats_of_a_raw_dump():
    r = invoke("stats", SAMPLE, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    t = pq.read_table(SAMPLE, columns=["reward", "response_mask", "step"])
    reward = t.column("reward").to_numpy().astype(np.float64)
    lens = np.array([len(m) for m in t.column("response_mask").to_pylist()])
    m = d["metrics"]
    assert m["critic/score/mean"] == pytest.approx(reward.mean())
    assert m["critic/score/p50"] == pytest.approx(np.quantile(reward, 0.5))
    assert m["response_length/mean"] == pytest.approx(lens.mean())
    assert not any(k.startswith("critic/advantages") for k in m)  # a raw dump has none
    assert "by_position" not in d
    assert [s["step"] for s in d["per_step"]] == [0, 1]
    assert d["histograms"]["group_size"]["counts"][-1] == 48


def test_stats_says_the_rows_whose_nan_reward_it_left_out(tmp_path, capsys):
    """stats reads a NaN reward as a missing one and leaves it out of the reward figures; it did so silently
    (run refuses the same file). The report's warnings say how many rows and the first; the mean is over the rest."""
    t = pq.read_table(SAMPLE)
    rewards = t.column("reward").to_numpy().astype(np.float64)
    rewards[[5, 40]] = np.nan
    bad = tmp_path / "nan.parquet"
    pq.write_table(t.set_column(t.column_names.index("reward"), "reward", pa.array(rewards, pa.float32())), bad)
    code, out, err = main_rc(capsys, "stats", bad, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert any(w.startswith(f"2 row(s) with a NaN 'reward' (the first: {bad}: row 5) are left out")
               for w in rep["warnings"]), rep["warnings"]
    assert rep["metrics"]["critic/score/mean"] == pytest.approx(np.nanmean(rewards.astype(np.float32)), rel=1e-6)


def test_stats_says_which_rows_make_the_rollout_correction_figures_nan(tmp_path, capsys):
    """A NaN log-prob on a mask=1 token makes verl's rollout_corr/* figures NaN; stats printed `rollout_corr/kl nan`
    with no word of why. The warning names how many rows hold one, the first row and its column; a NaN on a mask=0
    token is not counted (the figures do not read it)."""
    t = pq.read_table(SAMPLE)
    old = t.column("old_log_probs").to_pylist()
    mask = t.column("response_mask").to_pylist()
    rollout = [[x - 0.01 for x in row] for row in old]
    on = [i for i, m in enumerate(mask[7]) if m][3]
    old[7][on] = float("nan")  # the first, in old_log_probs
    on = [i for i, m in enumerate(mask[20]) if m][0]
    rollout[20][on] = float("inf")  # a second row, in rollout_log_probs
    off = [(r, i) for r, m in enumerate(mask) for i, v in enumerate(m) if not v][0]
    rollout[off[0]][off[1]] = float("nan")  # on a mask=0 token: not read, not counted
    assert off[0] not in (7, 20)
    t = t.set_column(t.column_names.index("old_log_probs"), "old_log_probs", pa.array(old, pa.list_(pa.float32())))
    bad = tmp_path / "nan_lp.parquet"
    pq.write_table(t.append_column("rollout_log_probs", pa.array(rollout, pa.list_(pa.float32()))), bad)
    code, out, err = main_rc(capsys, "stats", bad, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["metrics"]["rollout_corr/kl"] == "nan"  # JSON has no NaN: the report writes it as a string
    assert [w for w in rep["warnings"] if "log-prob" in w] == [
        "2 row(s) hold a NaN or infinite log-prob on a mask=1 token (the first: row 7, column 'old_log_probs'), so "
        "the rollout_corr/* figures are NaN, as verl's would be; `advcli validate` names the first token"]


def test_what_inspect_says_an_estimator_needs_is_what_validate_asks(capsys):
    """inspect lists the estimators the sample can feed: each runs as it is under the canonical defaults
    (`validate --flavor advcli --set estimator.name=NAME`, what docs/formats.md says inspect asks); one that needs a
    setting is under 'cannot feed', naming it, and runs with it. grpo_peers (estimator.episode_agents), gdpo
    (reward.components) and mix were listed as fed, and refused."""
    code, out, err = main_rc(capsys, "inspect", SAMPLE, "--json")
    assert code == 0, err
    feeds = json.loads(out)["estimators"]
    settings = {"gdpo": ["--set", "reward.components=[acc,fmt]"], "gdpo_loo": ["--set", "reward.components=[acc,fmt]"],
                "grpo_peers": ["--set", "estimator.episode_agents=[solver]"],
                "mix": ["--set", "advcli.mix=0.7*grpo+0.3*rloo"]}
    for name, said in sorted(feeds.items()):
        base = ["validate", SAMPLE, "--flavor", "advcli", "--set", f"estimator.name={name}"]
        if name in settings:
            assert not said["ok"] and settings[name][1].split("=")[0] in " ".join(said["missing"]), (name, said)
            code, _, err = main_rc(capsys, *base)
            assert code == 2, name  # refused without it ...
            code, _, err = main_rc(capsys, *base, *settings[name])
            assert code == 0, (name, err)  # ... and runs with it
        elif said["ok"]:
            code, _, err = main_rc(capsys, *base)
            assert code == 0, (name, said, err)


def test_stats_report_formats(tmp_path):
    for ext in ("json", "md", "html"):
        p = tmp_path / f"s.{ext}"
        r = invoke("stats", SAMPLE, "--report", p, "-q")
        assert r.returncode == 0 and p.stat().st_size > 500
    assert "critic/score/mean" in (tmp_path / "s.md").read_text()


# ----------------------------------------------------------------------------------------- compare
def test_split_configurations():
    from advcli.commands.compare import split_configurations

    raw = ["d.parquet", "--set", "x=1", "--flavor", "verl", "-s", "a=grpo", "--top", "3", "--flavor=advcli",
           "--set=a=rloo", "--config", "c.yaml"]
    assert split_configurations(raw) == [{"flavor": "verl", "set": ["x=1", "a=grpo"], "config": None},
                                         {"flavor": "advcli", "set": ["x=1", "a=rloo"], "config": "c.yaml"}]


def test_compare_grpo_with_rloo_on_one_dump(tmp_path):
    """RLOO = n/(n−1)·(s − mean) and GRPO = (s − mean)/(std + ε): the row advantages of a group are
    proportional with a positive factor, so every sign agrees wherever both are non-zero."""
    r = invoke("compare", SAMPLE, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
               "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo", "--json", "--top", "3")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["a"]["label"].endswith('"grpo"') and d["b"]["label"].endswith('"rloo"')
    # expected, from the formulas on the reward column (float64; per step and prompt)
    df = pq.read_table(SAMPLE, columns=["prompt_id", "step", "reward", "response_mask"]).to_pandas()
    s = df["reward"].astype(np.float64)
    g = df.groupby(["step", "prompt_id"])["reward"]
    n = g.transform("size")
    mean = g.transform("mean").astype(np.float64)
    std = g.transform(lambda x: x.astype(np.float64).std(ddof=1))
    grpo = (s - mean) / (std + 1e-6)
    rloo = (s - mean) * n / (n - 1)
    valid = df["response_mask"].map(lambda m: int(np.sum(m, dtype=np.int64))).to_numpy()
    w = valid.astype(np.float64)
    a, b = grpo.to_numpy(), rloo.to_numpy()
    cov = np.sum(w * (a - np.average(a, weights=w)) * (b - np.average(b, weights=w)))
    var_a = np.sum(w * (a - np.average(a, weights=w)) ** 2)
    var_b = np.sum(w * (b - np.average(b, weights=w)) ** 2)
    assert d["tokens"]["pearson"] == pytest.approx(cov / np.sqrt(var_a * var_b), abs=2e-4)
    assert d["row_level"]["pearson"] == pytest.approx(np.corrcoef(a, b)[0, 1], abs=2e-4)
    assert d["valid_tokens"] == int(valid.sum())
    assert d["groups"]["count"] == g.ngroups
    # the most different group: mean |A − B| over its rows, from the formulas
    top = d["groups"]["most_different"][0]
    key = df.assign(diff=np.abs(a - b)).groupby(["step", "prompt_id"])["diff"].mean()
    assert top["mean_abs_diff"] == pytest.approx(key.max(), rel=1e-4)
    assert top["mean_abs_diff"] >= d["groups"]["most_different"][1]["mean_abs_diff"]
    assert len(d["groups"]["most_different"]) == 3


def test_compare_two_outputs(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert invoke("run", SAMPLE, "-o", a, "-q").returncode == 0
    assert invoke("run", SAMPLE, "-o", b, "-q", "--set", "algorithm.adv_estimator=gae").returncode == 0
    same = json.loads(invoke("compare", a, a, "--json").stdout)
    assert same["tokens"]["pearson"] == pytest.approx(1.0)
    assert same["tokens"]["sign_agreement"] == 1.0 and same["tokens"]["max_abs_diff"] == 0.0
    assert same["row_level"]["sign_flips"] == 0
    d = json.loads(invoke("compare", a, b, "--json").stdout)
    ta = pq.read_table(a, columns=["advantages", "response_mask"])
    tb = pq.read_table(b, columns=["advantages"])
    m = np.array([x for r in ta.column("response_mask").to_pylist() for x in r]) > 0
    xa = np.array([x for r in ta.column("advantages").to_pylist() for x in r], dtype=np.float64)[m]
    xb = np.array([x for r in tb.column("advantages").to_pylist() for x in r], dtype=np.float64)[m]
    assert d["tokens"]["pearson"] == pytest.approx(np.corrcoef(xa, xb)[0, 1], abs=1e-9)
    assert d["tokens"]["sign_agreement"] == pytest.approx(np.mean(np.sign(xa) == np.sign(xb)))
    assert d["tokens"]["max_abs_diff"] == pytest.approx(np.abs(xa - xb).max(), rel=1e-9)
    # the terminal form
    r = invoke("compare", a, b, "--top", "2")
    assert r.returncode == 0 and "groups that differ most" in r.stdout and "sign agreement" in r.stdout


def test_compare_refuses_mismatched_inputs(tmp_path, capsys):
    a = tmp_path / "a.parquet"
    assert invoke("run", SAMPLE, "-o", a, "-q").returncode == 0
    code, _, err = main_rc(capsys, "compare", a, SAMPLE)
    assert code == 2 and "no 'advantages' column" in err
    code, _, err = main_rc(capsys, "compare", SAMPLE, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo")
    assert code == 2 and "exactly two configurations" in err
    short = tmp_path / "short.parquet"
    pq.write_table(pq.read_table(a).slice(0, 10), short)
    code, _, err = main_rc(capsys, "compare", a, short)
    assert code == 2 and "same rows" in err


def test_help_does_not_import_numpy():
    """--help answers before numpy (~80 ms) is loaded: the commands import it where they compute."""
    code = ("import sys\n"
            "from advcli.cli import main\n"
            "for argv in (['advcli', '--help'], ['advcli', 'run', '--help'], ['advcli', 'compare', '--help'],\n"
            "             ['advcli', 'stats', '--help'], ['advcli', 'inspect', '--help']):\n"
            "    sys.argv = argv\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('NUMPY', 'numpy' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("NUMPY False"), r.stdout[-500:]


def test_run_does_not_import_pandas(tmp_path):
    """pandas costs ~0.2-0.3 s to import; `advcli run` never needs it (pyarrow's ``pa.array`` and
    ``to_numpy`` import it lazily, so the run path builds and reads Arrow buffers itself). Nor
    pyarrow.compute (~0.06 s: its docstrings import pydoc), which ``dictionary_encode`` and ``take``
    import: the run calls those kernels through pyarrow._compute (the sample data's ids are
    factorised, and its all-equal groups looked up by the diagnostics)."""
    out = tmp_path / "o.parquet"
    code = ("import sys\n"
            "from advcli.cli import main\n"
            "src, out = sys.argv[1:3]\n"
            "for extra in ([], ['--output-mode', 'sidecar'], ['--set', 'algorithm.adv_estimator=gae',\n"
            "              '--set', 'algorithm.use_kl_in_reward=true']):\n"
            "    sys.argv = ['advcli', 'run', src, '-o', out, '--force', *extra]\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit as e:\n"
            "        assert not e.code, e.code\n"
            "print('PANDAS', 'pandas' in sys.modules)\n"
            "print('COMPUTE', 'pyarrow.compute' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, SAMPLE, str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "PANDAS False" in r.stdout, r.stdout[-500:]
    assert r.stdout.strip().endswith("COMPUTE False"), r.stdout[-500:]
    assert pq.read_table(out).num_rows == pq.ParquetFile(SAMPLE).metadata.num_rows


def test_a_usage_error_is_a_usage_error_even_without_click():
    """typer >= 0.2x vendors click: its usage errors are not click's, and click may not be installed
    at all. A mistyped option is a one-line usage error with exit status 2 — not an 'internal error'
    (what it printed when the CLI caught click's exception class), nor a ModuleNotFoundError."""
    code = ("import sys\n"
            "sys.modules['click'] = None  # as on a machine where nothing else installed click\n"
            "from advcli.cli import main\n"
            "sys.argv = ['advcli', 'run', 'x.parquet', '-o', 'y.parquet', '--bogus']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "--bogus" in r.stderr and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
