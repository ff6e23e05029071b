"""A new user's first hour (issue 45): what the commands a user types show, on dumps in the trainers' own
formats (built with the builders of tests/formats/test_format_*.py) and on the sample data.

1. A figure the dump cannot give is absent: a dump without token data (verl's rollout JSONL, TRL's
   completions Parquet) has no response length, token count or token share in the summary, ``--json``,
   the reports or the trackers; a response-level dump that records each response's length (AReaL) keeps
   them, equal to the lengths in the dump."""
from __future__ import annotations

import json

import pytest
from conftest import run_main
from test_format_areal import build as areal_build
from test_format_trl import G, write_step
from test_format_verl import v1_records, write

import advcli

TOKEN_WORDS = ("response_length", "tokens_per_s", "zero_adv_token_share", "length_by_outcome", "M tokens/s")


def _verl(tmp_path):
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    write(d / "2.jsonl", v1_records(2, 2))
    return d, ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


def _trl(tmp_path):
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    write_step(d / "completions_00010.parquet", 10, 1)
    write_step(d / "completions_00020.parquet", 20, 2)
    return d, ["--flavor", "trl", "--set", f"num_generations={G}"]


@pytest.mark.parametrize("make", [_verl, _trl], ids=["verl-jsonl", "trl-completions"])
def test_no_token_figure_from_a_dump_without_token_data(tmp_path, capsys, make):
    dump, how = make(tmp_path)
    # the summary a user reads
    code, out, err = run_main(["run", dump, "-o", tmp_path / "a.parquet", *how], capsys)
    assert code == 0, err
    out += err
    assert "token data" in out and "no token data" in out
    assert "tokens," not in out and "with mask=1" not in out
    for word in TOKEN_WORDS:
        assert word not in out, word
    # --json and the three reports
    reports = [tmp_path / f"r.{ext}" for ext in ("json", "md", "html")]
    for i, rep in enumerate(reports):
        code, out, err = run_main(["run", dump, "-o", tmp_path / f"b{i}.parquet", *how, "--json",
                                   "--report", rep], capsys)
        assert code == 0, err
        got = json.loads(out)
        assert "tokens" not in got and "valid_tokens" not in got and "no token data" in got["no_token_data"]
        assert not [k for k in got["metrics"] if k.startswith("response_length") or k.startswith("response/")]
        assert not [k for e in got["per_step"] for k in e if k.startswith("response_length")]
        assert got["metrics"]["critic/score/mean"] > 0  # the figures the dump gives are there
        text = rep.read_text()
        for word in TOKEN_WORDS:
            assert word not in text, (rep.name, word)
    # stats: summary and --json
    code, out, err = run_main(["stats", dump], capsys)
    assert code == 0, err
    out += err
    assert "token data" in out and "tokens," not in out
    for word in TOKEN_WORDS:
        assert word not in out, word
    code, out, err = run_main(["stats", dump, "--json"], capsys)
    got = json.loads(out)
    assert "tokens" not in got and not [k for k in got["metrics"] if "length" in k]
    # a dump's statistics without advantages do not speak of advantage figures; an output's do
    held = [name for name, key in (("advantage", "critic/advantages/"), ("return", "critic/returns/"))
            if any(k.startswith(key) for k in got["metrics"])]
    assert ("figures are over responses" in got["no_token_data"]) == bool(held)
    if held:  # (TRL's dump logs advantages, no returns)
        assert f"; {' and '.join(held)} figures are over responses" in got["no_token_data"]
    code, out, err = run_main(["stats", tmp_path / "a.parquet", "--json"], capsys)
    assert code == 0, err
    assert "advantage and return figures are over responses" in json.loads(out)["no_token_data"]
    # the library's stats give the command's figures (they gave the one-token rows' lengths and token counts)
    lib = advcli.stats(str(dump))
    assert lib.metrics == got["metrics"] and lib.report["no_token_data"] == got["no_token_data"]
    # validate's verdict
    code, out, err = run_main(["validate", dump, *how], capsys)
    assert code == 0, err
    assert "24 rows, no token data" in out and "tokens (" not in out
    # compare of two outputs: its count is of responses
    code, out, err = run_main(["compare", tmp_path / "a.parquet", tmp_path / "b0.parquet"], capsys)
    assert code == 0, err
    assert "token data: none" in out and "responses (no token data)" in out and "mask=1" not in out
    code, out, err = run_main(["compare", tmp_path / "a.parquet", tmp_path / "b0.parquet", "--json"], capsys)
    got = json.loads(out)
    assert "valid_tokens" not in got and got["rows"] == 24 and "no token data" in got["no_token_data"]


def test_no_token_figure_in_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from test_tracker import _tensorboard

    dump, how = _verl(tmp_path)
    tb = tmp_path / "tb"
    code, _, err = run_main(["run", dump, "-o", tmp_path / "o.parquet", *how, "-q", "--log", f"tensorboard:{tb}"],
                            capsys)
    assert code == 0, err
    tags = _tensorboard(tb)
    assert "critic/score/mean" in tags
    assert not [t for t in tags if "length" in t or "token" in t], sorted(tags)


def test_audit_of_a_dump_without_token_data_counts_rows(tmp_path, capsys):
    dump, how = _trl(tmp_path)
    code, out, err = run_main(["audit", dump, "--flavor", "trl"], capsys)
    assert code == 0, err
    out += err
    assert "agree: 0 of 24 rows disagree" in out and "mask=1 tokens" not in out


def test_a_dump_with_its_response_lengths_keeps_them(tmp_path, capsys):
    groups = areal_build(tmp_path / "trial")
    code, out, err = run_main(["run", tmp_path / "trial", "-o", tmp_path / "o.parquet", "--flavor", "verl",
                               "--set", "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    got = json.loads(out)
    lengths = [r["seqlen"] - r["prompt_len"] for g in groups for r in g]
    assert got["metrics"]["response_length/mean"] == pytest.approx(sum(lengths) / len(lengths))
    assert got["tokens"] == sum(lengths) and "no_token_data" not in got


# ---------------------------------------------------------------- 2. user text is text, never markup
MARKUP_DIR = "w:100:[bold]x:smile:"  # a file name holds no "/": no closing tag here
MARKUP_COLUMN = ":smile:[red]c[/red]"
OUT_DIR = "o:100:[red]y"


def _flat(text: str) -> str:
    """The output without whitespace: a table folds a long path over lines."""
    return "".join(text.split())


@pytest.fixture
def markup_dump(tmp_path):
    """The sample data in a directory and file whose names hold rich markup and emoji codes, with prompt ids
    and an extra column (name and values) that do too."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import SAMPLE

    t = pq.read_table(SAMPLE)
    t = t.set_column(0, "prompt_id", pa.array([f"[bold]{p}[/bold]:100:" for p in t.column("prompt_id").to_pylist()]))
    t = t.append_column(MARKUP_COLUMN, pa.array([f":100:[i]{i}" for i in range(t.num_rows)]))
    d = tmp_path / MARKUP_DIR
    d.mkdir()
    pq.write_table(t, d / "r:100:[i].parquet")
    return d


def test_user_text_is_never_markup_nor_emoji(markup_dump, capsys):
    d = markup_dump
    src = d / "r:100:[i].parquet"
    o = d.parent / OUT_DIR
    o.mkdir()
    grpo = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
    rloo = ["--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"]
    commands = {  # (argv, exit code, what the output shows as it is written)
        "run": (["run", src, "-o", o / "a.parquet", *grpo], 0, [MARKUP_DIR, "r:100:[i].parquet", "[bold]"]),
        "run (a directory)": (["run", d, "-o", o / "b.parquet", *rloo], 0, [MARKUP_DIR, OUT_DIR]),
        "stats": (["stats", src], 0, [MARKUP_DIR, "r:100:[i].parquet"]),
        "audit": (["audit", o / "a.parquet", *rloo], 1, [OUT_DIR, "a.parquet,row", "group[bold]", "]:100:,token"]),
        "compare": (["compare", o / "a.parquet", o / "b.parquet"], 0, [OUT_DIR, "[bold]"]),
        "compare --estimators": (["compare", src, "--estimators", "grpo,rloo", "--flavor", "verl"], 0,
                                 ["[bold]"]),
        "inspect": (["inspect", src], 0, [MARKUP_DIR, MARKUP_COLUMN[:12], "r:100:[i].parquet"]),
        "validate": (["validate", src, *grpo], 0, [MARKUP_DIR, "r:100:[i].parquet"]),
        "filter": (["filter", src, "-o", o / "f.parquet", "--drop-uniform"], 0, [MARKUP_DIR, OUT_DIR, "[bold]"]),
    }
    for name, (argv, want_code, shown) in commands.items():
        code, out, err = run_main(argv, capsys)
        assert code == want_code, (name, err)
        text = _flat(out + err)
        for s in shown:
            assert _flat(s) in text, (name, s)
        for emoji in ("\N{HUNDRED POINTS SYMBOL}", "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}"):
            assert emoji not in out + err, name


# --------------------------------------------------- 3. every destination checked before any work
RO = "/proc"  # exists and takes no new file, even for root


@pytest.fixture
def nan_reward(tmp_path):
    """The sample data with a NaN reward in row 5: a run refuses it once it reads the rewards, so a
    destination refused instead was checked before the data was read."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import SAMPLE

    t = pq.read_table(SAMPLE)
    r = t.column("reward").to_pylist()
    r[5] = float("nan")
    t = t.set_column(t.schema.get_field_index("reward"), "reward", pa.array(r, pa.float32()))
    pq.write_table(t, tmp_path / "nan.parquet")
    return tmp_path / "nan.parquet"


@pytest.mark.parametrize("argv, named", [
    (["run", "{nan}", "-o", "{tmp}/o.parquet", "--report", f"{RO}/r.html"], f"--report {RO}/r.html"),
    (["run", "{nan}", "-o", "{tmp}/o.parquet", "--log", f"tensorboard:{RO}/tb"], f"--log tensorboard:{RO}/tb"),
    (["run", "{nan}", "-o", "{tmp}/o.parquet", "--log", f"wandb:{RO}/wb"], f"--log wandb:{RO}/wb"),
    (["run", "{nan}", "-o", f"{RO}/o.parquet"], f"{RO}/o.parquet"),
    (["run", "{nan}", "-o", "{tmp}/o.parquet", "--report", "s3://bucket/r.html"], "a report is written to a local"),
    (["run", "{nan}", "-o", "{tmp}/o.parquet", "--log", "tensorboard:s3://bucket/tb"], "writes to a local directory"),
    (["stats", "{nan}", "--report", f"{RO}/r.md"], f"--report {RO}/r.md"),
    (["stats", "{nan}", "--log", f"tensorboard:{RO}/x/tb"], f"--log tensorboard:{RO}/x/tb"),
    (["filter", "{nan}", "-o", "{tmp}/o.parquet", "--drop-uniform", "--report", f"{RO}/r.json"], f"{RO}/r.json"),
    (["filter", "{nan}", "-o", f"{RO}/o.parquet", "--drop-uniform"], f"{RO}/o.parquet"),
    (["audit", "{nan}", "--report", f"{RO}/r.json"], f"--report {RO}/r.json"),
    (["compare", "{nan}", "--estimators", "grpo,rloo", "--report", f"{RO}/r.json"], f"--report {RO}/r.json"),
    (["convert", "{dump}", "-o", f"{RO}/c.parquet"], f"{RO}/c.parquet"),
    (["convert", "{dump}", "-o", "s3://bucket/c.parquet"], "convert writes a local Parquet file"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_every_destination_is_checked_before_any_work(tmp_path, capsys, nan_reward, argv, named):
    dump, _ = _verl(tmp_path)
    argv = [a.format(nan=nan_reward, tmp=tmp_path, dump=dump) for a in argv]
    code, out, err = run_main(argv, capsys)
    assert code == 2, (out, err)
    first = err.strip().splitlines()[0]
    assert first.startswith("advcli: error:") and named in first, err
    assert "NaN" not in err and "nan" not in first.replace(str(nan_reward), "")  # the data was never read
    assert not (tmp_path / "o.parquet").exists()


# ----------------------------------------------------------------------- 4. a filter that keeps nothing
def _group_means(path) -> list[float]:
    """Each (step, prompt_id) group's mean reward, computed here with pandas."""
    import pandas as pd

    df = pd.read_parquet(path, columns=["step", "prompt_id", "reward"])
    return df.groupby(["step", "prompt_id"])["reward"].mean().tolist()


def test_a_solve_rate_outside_the_metric_range_is_refused(tmp_path, capsys, sample_path):
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["filter", sample_path, "-o", out, "--solve-rate", "2:3"], capsys)
    assert code == 2 and not out.exists()
    assert "--solve-rate 2:3: LO 2 and HI 3 outside the range of the groups' mean reward (0 to 1)" in err
    # a reward that goes below 0 widens the range: -0.5:0.5 is a bound of its own range
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(sample_path)
    t = t.set_column(t.schema.get_field_index("reward"), "reward",
                     pa.array([2 * r - 1 for r in t.column("reward").to_pylist()], pa.float32()))
    pq.write_table(t, tmp_path / "pm.parquet")
    code, _, err = run_main(["filter", tmp_path / "pm.parquet", "-o", out, "--solve-rate", "-0.5:0.5", "-q"], capsys)
    assert code == 0, err
    kept = [m for m in _group_means(tmp_path / "pm.parquet") if -0.5 <= m <= 0.5]
    assert pq.read_metadata(out).num_rows == 8 * len(kept) > 0  # the sample's groups hold 8 rows each


def test_a_filter_that_keeps_nothing_stops_with_the_counts(tmp_path, capsys, sample_path):
    means = _group_means(sample_path)
    assert not [m for m in means if 0.95 <= m <= 0.99]  # no group's mean reward lies there
    out = tmp_path / "o.parquet"
    for argv in (["filter", sample_path, "-o", out], ["run", sample_path, "-o", out]):
        code, _, err = run_main([*argv, "--solve-rate", "0.95:0.99"], capsys)
        assert code == 2 and not out.exists(), err
        assert (f"--solve-rate 0.95:0.99 keeps no row: all {len(means)} group(s) ({8 * len(means)} rows) are "
                f"dropped ({len(means)} outside the solve rate") in err
        assert "--allow-empty" in err
    # asked for: an empty result, exit 0
    code, _, err = run_main(["filter", sample_path, "-o", out, "--solve-rate", "0.95:0.99", "--allow-empty", "-q"],
                            capsys)
    assert code == 0, err
    import pyarrow.parquet as pq

    assert pq.read_metadata(out).num_rows == 0


# ----------------------------------------------------------------- 5. filter reads the trainers' dumps
def test_filter_reads_a_trainer_dump_like_run(tmp_path, capsys):
    import pyarrow.parquet as pq
    from test_format_nemo import SAMPLES
    from test_format_nemo import write_step as nemo_step

    d = tmp_path / "logs" / "exp_001"
    d.mkdir(parents=True)
    nemo_step(d / "train_data_step1.jsonl", SAMPLES, 1)
    nemo_step(d / "train_data_step2.jsonl", SAMPLES[::-1], 2)
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["filter", d, "-o", out, "--drop-uniform", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    # the groups (by prompt) of a step: 4 rows, 2 rows, and 1 row (one reward: uniform) -> 6 of 7 rows kept
    assert (rep["groups"], rep["groups_dropped"], rep["rows"], rep["rows_kept"]) == (6, 2, 14, 12)
    assert rep["inputs"] == [str(d)]
    kept = pq.read_table(out).column("reward").to_pylist()
    assert sorted(kept) == sorted(2 * [s[3] for s in SAMPLES if s[0] != [30, 31, 32, 33]])
    # a response-level dump too (verl's rollout JSONL): the kept rows are those of non-uniform groups
    vd, _ = _verl(tmp_path)
    code, stdout, err = run_main(["filter", vd, "-o", tmp_path / "v.parquet", "--drop-uniform", "--json"], capsys)
    assert code == 0, err
    recs = v1_records(1, 1) + v1_records(2, 2)
    groups: dict = {}
    for r in recs:
        groups.setdefault((r["step"], r["uid"].rsplit("_", 2)[0]), []).append(r["score"])
    expect = sum(len(s) for s in groups.values() if len(set(s)) > 1)
    assert json.loads(stdout)["rows_kept"] == expect == pq.read_metadata(tmp_path / "v.parquet").num_rows


# ------------------------------------------------------------------- 6. hints that point the right way
def test_a_truncated_parquet_file_is_said_to_be_cut_short(tmp_path, capsys, sample_path):
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(open(sample_path, "rb").read()[:50_000])
    code, _, err = run_main(["stats", cut], capsys)
    assert code == 2 and "the file was cut short" in err and "convert JSONL" not in err
    js = tmp_path / "j.parquet"
    write(js, v1_records(1, 1))
    code, _, err = run_main(["stats", js], capsys)
    assert code == 2 and "it holds JSON: advcli reads the trainers' own JSONL dumps" in err


def _renamed_reward(tmp_path, sample_path):
    import pyarrow.parquet as pq

    t = pq.read_table(sample_path)
    t = t.rename_columns(["score" if n == "reward" else n for n in t.column_names])
    pq.write_table(t, tmp_path / "score.parquet")
    return tmp_path / "score.parquet"


def test_a_renamed_reward_column_is_found(tmp_path, capsys, sample_path):
    src = _renamed_reward(tmp_path, sample_path)
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2
    assert "Did you mean 'score'?" in err and "reward_baseline'?" not in err
    assert "--column reward=score" in err
    # the hint works
    code, _, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "--column", "reward=score", "-q"], capsys)
    assert code == 0, err


def test_library_hints_use_the_call_keywords(tmp_path, sample_path):
    import advcli
    from advcli.errors import AdvcliError

    src = _renamed_reward(tmp_path, sample_path)
    with pytest.raises(AdvcliError) as e:
        advcli.run(str(src), flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    assert "columns={'reward': 'score'}" in e.value.hint and "--column" not in str(e.value)
    advcli.run(str(src), flavor="verl", settings={"algorithm.adv_estimator": "grpo"}, columns={"reward": "score"})
    with pytest.raises(AdvcliError) as e:
        advcli.run(sample_path, tmp_path / "x.parquet", flavor="VERL")
    assert "Did you mean 'verl'?" in str(e.value)


def test_a_typo_in_a_mix_names_the_mix(tmp_path, capsys, sample_path):
    code, _, err = run_main(["run", sample_path, "-o", tmp_path / "o.parquet", "--set",
                             "advcli.mix=0.7*grpoo+0.3*rloo"], capsys)
    assert code == 2
    assert err.startswith("advcli: error: advcli.mix='0.7*grpoo+0.3*rloo': unknown estimator 'grpoo'. Did you "
                          "mean 'grpo'?") and "estimator.name" not in err


def test_inspect_says_how_gdpo_loo_runs_and_counts_the_dump_files(tmp_path, capsys, sample_path):
    code, out, err = run_main(["inspect", sample_path], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    # not fed under the canonical defaults (what inspect's lists are), and the setting that feeds it is named
    assert "cannot feed gdpo_loo: needs its reward components named: --set 'reward.components=[acc,fmt]'" in flat
    # ... and it does
    code, _, err = run_main(["run", sample_path, "-o", tmp_path / "g.parquet", "--flavor", "advcli", "--set",
                             "estimator.name=gdpo_loo", "--set", "reward.components=[acc,fmt]", "-q"], capsys)
    assert code == 0, err
    dump, _ = _verl(tmp_path)
    code, out, err = run_main(["inspect", dump], capsys)
    assert code == 0, err
    assert "2 file(s)" in out and "1 file(s)" not in out
    code, out, err = run_main(["inspect", dump, "--json"], capsys)
    assert json.loads(out)["files"] == 2


def test_audit_of_your_own_estimator_names_it(tmp_path, capsys, sample_path):
    fn = tmp_path / "my_adv.py"
    fn.write_text("import advcli\n\n\n@advcli.estimator(level='row')\ndef centred(rewards, group):\n"
                  "    return rewards - rewards.mean()\n")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", sample_path, "-o", out, "--estimator", f"{fn}:centred", "-q"], capsys)
    assert code == 0, err
    code, stdout, err = run_main(["audit", out, "--estimator", f"{fn}:centred", "--no-search"], capsys)
    assert code == 0, err
    line = next(x for x in (stdout + err).splitlines() if x.startswith("recomputed with"))
    assert "gae" not in line and f"{fn}:centred"[-20:] in "".join((stdout + err).split())


def test_an_output_named_for_another_format_is_refused(tmp_path, capsys, sample_path):
    for argv in (["run", sample_path, "-o", tmp_path / "o.csv"],
                 ["filter", sample_path, "-o", tmp_path / "o.json", "--drop-uniform"]):
        code, _, err = run_main(argv, capsys)
        assert code == 2 and "advcli writes Parquet, not" in err and "o.parquet" in err
    assert not list(tmp_path.iterdir())
    code, _, err = run_main(["run", sample_path, "-o", tmp_path / "o.parquet", "--flavor", "VERL"], capsys)
    assert code == 2 and "Did you mean 'verl'?" in err


# ------------------------------------------------------------------------------- 9. docs for users
def test_reports_page_runs_after_readme_in_one_directory(tmp_path, monkeypatch, capsys):
    """A newcomer runs README's command, then copies docs/reports.md's examples into the same directory:
    none stops on the output README's command left ("already exists")."""
    import os

    from conftest import ROOT
    from test_docs_examples import examples, skip_reason

    os.symlink(os.path.join(ROOT, "sample_data"), tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["run", "sample_data/rollouts.parquet", "--output", "out.parquet", "--force", "-q"],
                            capsys)
    assert code == 0, err
    import shlex

    runs = [(line, cmd, status) for line, cmd, status, _ in examples("docs/reports.md")
            if cmd.startswith("advcli run sample_data/") and not skip_reason(cmd)]
    assert runs
    for line, cmd, status in runs:
        code, _, err = run_main(shlex.split(cmd)[1:], capsys)
        assert code == status, f"docs/reports.md:{line}: {cmd}\n{err}"
        assert "already exists" not in err
    text = open(os.path.join(ROOT, "docs", "reports.md"), encoding="utf-8").read()
    assert "advcli run sample_data/rollouts.parquet -o out.parquet --force\n" in text  # the summary shown


def test_user_pages_hold_no_test_hook_and_cite_their_benchmarks():
    import os
    import re

    from conftest import ROOT

    def read(p):
        return open(os.path.join(ROOT, p), encoding="utf-8").read()

    assert "ADVCLI_TEST_" not in read("docs/errors.md")
    assert "ADVCLI_TEST_SLOW_WRITE" in read("docs/house.md")
    for page in ("README.md", "docs/server.md", "docs/performance.md"):
        text = read(page)
        assert "~0.1 s" not in text and "1.4–2.2 s" not in text, page
        assert "benchmarks/bench.py" in text, page  # the start-up figure's source
        for script in re.findall(r"benchmarks/(\w+\.py)", text):
            assert os.path.exists(os.path.join(ROOT, "benchmarks", script)), (page, script)
    assert "advcli server start" in read("README.md").split("## Usage")[0]  # where start-up is discussed
    for page in ("docs/distributed.md", "docs/performance.md"):
        text = read(page)
        assert "## What to expect" in text and "## Limits" in text and "internals/" in text, page
        assert len(text.splitlines()) < 200, page


def test_sample_takes_its_file_as_the_other_commands_do(tmp_path, capsys):
    """`advcli sample -o FILE` (as run, filter and convert spell their output) writes the same file as
    `advcli sample FILE`; two different files, or none, stop with exit 2 and write nothing."""
    import pyarrow.parquet as pq

    positional, option = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    assert run_main(["sample", positional, "-n", "24", "--max-len", "20"], capsys)[0] == 0
    assert run_main(["sample", "-o", option, "-n", "24", "--max-len", "20"], capsys)[0] == 0
    assert pq.read_table(option).equals(pq.read_table(positional))
    code, _, err = run_main(["sample", str(tmp_path / "c.parquet"), "--output", str(tmp_path / "d.parquet")],
                            capsys)
    assert code == 2 and "two files to write" in err
    code, _, err = run_main(["sample"], capsys)
    assert code == 2 and "no file to write" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]
