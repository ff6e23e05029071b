"""advcli.audit and advcli.compare take what ``advcli audit`` and ``advcli compare`` take (flavor@release,
settings, --estimator, --config, columns, tolerances, search, top, chunk rows, device; for compare its three
forms and a configuration's --set/--config) and give the same report: each option set runs through the command
(its --json) and the library, and the two reports must be the same, number for number. The audited and compared
numbers themselves are checked independently in tests/reports/test_audit.py and tests/test_compare*.py; here the point
is that both routes reach them with the same options."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError

GRPO = {"algorithm.adv_estimator": "grpo"}
STAMP = ("created", "seconds")  # when a report was made and how long it took: what two runs cannot share


def _same(cli: dict, lib: dict, drop=()) -> None:
    """The two reports, key for key, the creation time (and ``drop``) aside."""
    gone = set(STAMP) | set(drop)
    a = {k: v for k, v in cli.items() if k not in gone}
    b = {k: v for k, v in lib.items() if k not in gone}
    assert set(a) == set(b), set(a) ^ set(b)
    for k in a:
        assert a[k] == b[k], k


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The sample run with GRPO (its advantages agree with the audit), a copy with one token's advantage
    moved by 0.25 under other column names (reward -> score, advantages -> logged), and an RLOO run."""
    d = tmp_path_factory.mktemp("api")
    good, rloo = d / "grpo.parquet", d / "rloo.parquet"
    advcli.run(SAMPLE, str(good), flavor="verl", settings=GRPO, device="cpu")
    advcli.run(SAMPLE, str(rloo), flavor="verl", settings={"algorithm.adv_estimator": "rloo"}, device="cpu")
    t = pq.read_table(good)
    adv = t.column("advantages").to_pylist()
    mask = t.column("response_mask").to_pylist()
    first = next(i for i, m in enumerate(mask[5]) if m)
    adv[5][first] += 0.25
    bad = t.set_column(t.column_names.index("advantages"), "logged", pa.array(adv, t.schema.field("advantages").type))
    bad = bad.rename_columns(["score" if c == "reward" else c for c in bad.column_names])
    pq.write_table(bad, d / "bad.parquet")
    cfg = d / "run.yaml"
    cfg.write_text("flavor: verl@0.8.0\nalgorithm.adv_estimator: grpo\n")
    return {"good": str(good), "rloo": str(rloo), "bad": str(d / "bad.parquet"), "config": str(cfg)}


AUDITS = {  # name: (command options, library keywords)
    "release-tolerances": (["--flavor", "verl@0.8.0", "--set", "algorithm.adv_estimator=grpo", "--rtol", "1e-3",
                            "--atol", "1e-4", "--top", "3", "--chunk-rows", "97", "--device", "cpu"],
                           dict(flavor="verl@0.8.0", settings=GRPO, rtol=1e-3, atol=1e-4, top=3, chunk_rows=97,
                                device="cpu")),
    "estimator": (["--flavor", "verl", "--estimator", "rloo", "--no-search", "--device", "cpu"],
                  dict(flavor="verl", estimator="rloo", search=False, device="cpu")),
    "config": (["--config", "{config}", "--no-search", "--top", "2"], dict(config="{config}", search=False, top=2)),
}


@pytest.mark.parametrize("case", sorted(AUDITS))
def test_audit_command_and_library_give_the_same_report(case, outputs, capsys):
    argv, kw = AUDITS[case]
    argv = [a.format(**outputs) for a in argv]
    kw = {k: v.format(**outputs) if isinstance(v, str) else v for k, v in kw.items()}
    code, out, err = run_main(["audit", outputs["good"], "--json", *argv], capsys)
    lib = advcli.audit(outputs["good"], **kw)
    cli = json.loads(out)
    assert code == (0 if cli["agree"] else 1), err
    _same(cli, lib.report)
    if case == "estimator":  # RLOO's numbers are not GRPO's: the option reached the audit by both routes
        assert not lib.agree and lib["tokens_disagreeing"] > 0
    else:
        assert lib.agree and lib["tokens_disagreeing"] == 0


@pytest.mark.parametrize("option, says", [
    (["--rtol", "nan"], "--rtol nan: a tolerance is a finite number >= 0"),  # every value disagreed: exit 1
    (["--atol", "nan"], "--atol nan: a tolerance is a finite number >= 0"),
    (["--rtol", "inf"], "--rtol inf: a tolerance is a finite number >= 0"),  # every value agreed: exit 0
    (["--rtol", "1e400"], "--rtol inf: a tolerance is a finite number >= 0"),
    (["--atol", "-1"], "--atol -1.0: a tolerance is a finite number >= 0"),
    (["--top", "-1"], "--top -1: the number of worst rows to list is 0 or more"),  # all but the last were listed
])
def test_a_tolerance_or_top_that_means_nothing_is_refused(outputs, capsys, option, says):
    for follow in ([], ["--follow", "--until-idle", "0.1"]):
        code, out, err = run_main(["audit", outputs["bad"], "--column", "reward=score", "--against", "logged",
                                   *option, *follow], capsys)
        assert code == 2, (out, err)
        assert f"advcli: error: {says}" in err and "hint:" in err


def test_audit_columns_and_against_reach_the_same_rows(outputs, capsys):
    """--column reward=score and --against logged: the one moved token found by both, with the same search."""
    code, out, err = run_main(["audit", outputs["bad"], "--json", "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=grpo", "--column", "reward=score", "--against", "logged",
                               "--top", "4", "--device", "cpu"], capsys)
    lib = advcli.audit(outputs["bad"], flavor="verl", settings=GRPO, columns={"reward": "score"}, against="logged",
                       top=4, device="cpu")
    assert code == 1, err
    _same(json.loads(out), lib.report)
    assert lib["tokens_disagreeing"] == 1
    assert lib.to_pandas().loc[0, "row"] == 5 and lib.to_pandas().loc[0, "abs_diff"] == pytest.approx(0.25, abs=1e-6)


def test_compare_two_outputs(outputs, capsys):
    code, out, err = run_main(["compare", outputs["good"], outputs["rloo"], "--json", "--top", "3"], capsys)
    lib = advcli.compare(outputs["good"], outputs["rloo"], top=3)
    assert code == 0, err
    # the same report, its header included (the command's --json had none in this form)
    _same(json.loads(out), lib.report)
    assert lib["tokens"]["pearson"] < 1


def test_compare_two_configurations(outputs, capsys):
    """Settings before the first --flavor apply to both (settings= beside configs=); each --flavor (at a
    release) starts one configuration with its --set / --config."""
    code, out, err = run_main(["compare", SAMPLE, "--set", "algorithm.norm_adv_by_std_in_grpo=false",
                               "--flavor", "verl@0.8.0", "--set", "algorithm.adv_estimator=grpo",
                               "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo",
                               "--json", "--top", "4", "--chunk-rows", "97", "--device", "cpu"], capsys)
    lib = advcli.compare(SAMPLE, configs=[{"flavor": "verl@0.8.0", "settings": GRPO},
                                          {"flavor": "verl", "settings": {"algorithm.adv_estimator": "rloo"}}],
                         settings={"algorithm.norm_adv_by_std_in_grpo": False}, top=4, chunk_rows=97, device="cpu")
    assert code == 0, err
    cli = json.loads(out)
    for side in ("a", "b"):  # each says its configuration in its own words (--set strings, settings dict)
        cli[side].pop("configuration"), lib.report[side].pop("configuration")
    _same(cli, lib.report)
    assert cli["a"]["label"].startswith("verl@0.8.0") and "norm_adv_by_std_in_grpo=false" in cli["b"]["label"]


def test_a_configurations_estimator_runs_and_an_unknown_key_is_refused(outputs):
    """{"flavor": "verl", "estimator": "grpo"} ran verl's default gae (the key was dropped) and the report echoed
    estimator: grpo: it now runs grpo, the same report as the settings route; a key compare does not take is
    refused rather than ignored."""
    by_key = advcli.compare(SAMPLE, configs=[{"flavor": "verl", "settings": GRPO},
                                             {"flavor": "verl", "settings": {"algorithm.adv_estimator": "rloo"}}])
    by_name = advcli.compare(SAMPLE, configs=[{"flavor": "verl", "estimator": "grpo"},
                                              {"flavor": "verl", "estimator": "rloo"}])
    for side in ("a", "b"):
        by_key.report[side].pop("configuration"), by_name.report[side].pop("configuration")
        by_key.report[side].pop("label"), by_name.report[side].pop("label")
    _same(by_key.report, by_name.report)
    with pytest.raises(AdvcliError, match="configuration B has 'estimater', which is not one of its keys"):
        advcli.compare(SAMPLE, configs=[{"flavor": "verl", "settings": GRPO}, {"flavor": "verl", "estimater": "rloo"}])


def test_compare_estimators(outputs, capsys, tmp_path):
    """--estimators with one flavor, its --set and a --config file for all; every pair."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algorithm.norm_adv_by_std_in_grpo: false\n")
    code, out, err = run_main(["compare", SAMPLE, "--estimators", "grpo,rloo,reinforce_plus_plus", "--flavor",
                               "verl@0.9.0", "--set", "algorithm.gamma=0.9", "--config", cfg, "--json", "--top", "2",
                               "--device", "cpu"], capsys)
    lib = advcli.compare(SAMPLE, estimators=["grpo", "rloo", "reinforce_plus_plus"], flavor="verl@0.9.0",
                         settings={"algorithm.gamma": 0.9}, config=str(cfg), top=2, device="cpu")
    assert code == 0, err
    _same(json.loads(out), lib.report)
    assert [r["label"] for r in lib["runs"]] == ["grpo", "rloo", "reinforce_plus_plus"] and len(lib.pairs) == 3
    # the report names what ran: the flavor at its release, the settings given (it gave the labels alone)
    assert {(r["flavor"], r["release"]["name"]) for r in lib["runs"]} == {("verl@0.9.0", "0.9.0")}
    assert all(r["settings"]["algorithm.gamma"] == 0.9 for r in lib["runs"])
    assert lib.table.num_rows == 3 and "row correlation (Pearson)" in lib.table.column_names
    assert "Pairs side by side" in lib.html() and "algorithm.gamma=0.9" in lib.html()
    comma = advcli.compare(SAMPLE, estimators="grpo,rloo", flavor="verl@0.9.0", settings={"algorithm.gamma": 0.9},
                           config=str(cfg), top=2, device="cpu")
    assert comma.pairs[0] == lib.pairs[0]  # a comma-separated string, as the command takes it


def test_compare_refusals(outputs):
    with pytest.raises(AdvcliError, match="name at least two different estimators"):
        advcli.compare(SAMPLE, estimators=["grpo"])
    with pytest.raises(AdvcliError, match="give two outputs"):
        advcli.compare(SAMPLE, outputs["good"], estimators=["grpo", "rloo"])
    with pytest.raises(AdvcliError, match="two outputs are compared as they are"):
        advcli.compare(outputs["good"], outputs["rloo"], settings=GRPO)


def test_a_directory_of_shards_is_one_dump_for_audit_and_compare(outputs, tmp_path, capsys):
    """A directory (or glob) of Parquet files is one dump for run, and so for audit and compare: the same
    verdict and the same figures as the single file (the internal runs write one output per shard)."""
    t = pq.read_table(SAMPLE)
    shards = tmp_path / "shards"
    shards.mkdir()
    bounds = [0, 100, 250, t.num_rows]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        pq.write_table(t.slice(lo, hi - lo), shards / f"part{i}.parquet")
    outs = tmp_path / "outs"
    code, _, err = run_main(["run", shards, "-o", f"{outs}/", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err
    for spec in (outs, f"{outs}/*.parquet"):
        code, out, err = run_main(["audit", spec, "--no-search", "--json"], capsys)
        assert code == 0 and json.loads(out)["agree"], err
    whole = advcli.compare(SAMPLE, estimators="grpo,rloo", device="cpu")
    split = advcli.compare(str(shards), estimators="grpo,rloo", device="cpu")
    assert split.pairs[0]["tokens"] == whole.pairs[0]["tokens"] and split["pairs"][0]["rows"] == t.num_rows
    # two outputs given as a directory and a file: read as one each
    code, out, err = run_main(["compare", outs, outputs["good"], "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["tokens"]["pearson"] == pytest.approx(1.0)


def test_compare_counts_the_tokens_both_outputs_train_on_in_either_order(outputs, tmp_path, capsys):
    """A sidecar has no response_mask: the other output's mask decides, whichever comes first; where both have
    one, a token counts when it is 1 in both."""
    side = tmp_path / "side.parquet"
    advcli.run(SAMPLE, str(side), flavor="verl", settings=GRPO, device="cpu", output_mode="sidecar")
    t = pq.read_table(outputs["good"])
    valid = sum(sum(m) for m in t.column("response_mask").to_pylist())
    ab = advcli.compare(str(side), outputs["rloo"])
    ba = advcli.compare(outputs["rloo"], str(side))
    assert ab["valid_tokens"] == ba["valid_tokens"] == valid
    assert ab["tokens"]["pearson"] == pytest.approx(ba["tokens"]["pearson"], rel=1e-12)


@pytest.mark.parametrize("chunk", ["4", "4096"])
def test_a_logged_list_of_the_wrong_length_is_named_by_file_and_row(outputs, tmp_path, capsys, chunk):
    """Row 9's logged advantages one value short of its mask: the refusal names the file, the row (counted in
    the file, not in a chunk of --chunk-rows) and the column, with both lengths."""
    t = pq.read_table(outputs["good"])
    adv = t.column("advantages").to_pylist()
    n = len(adv[9])
    adv[9] = adv[9][:-1]
    col = pa.array(adv, t.schema.field("advantages").type)
    bad = t.set_column(t.column_names.index("advantages"), "advantages", col)
    path = tmp_path / "short.parquet"
    pq.write_table(bad, path)
    code, _, err = run_main(["audit", path, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--no-search",
                             "--chunk-rows", chunk], capsys)
    assert code == 2 and "Traceback" not in err
    said = " ".join(err.split())
    assert f"{path}: row 9: column 'advantages' has length {n - 1}, its response mask length {n}" in said


def test_compare_refuses_rows_in_another_order(outputs, tmp_path, capsys):
    """compare pairs rows by position: the same output with its rows permuted read as a token Pearson of −0.3
    and dozens of sign flips (exit 0). Both hold prompt_id and step, so the first row where they differ is named."""
    t = pq.read_table(outputs["good"])
    perm = list(range(1, t.num_rows)) + [0]
    shuffled = tmp_path / "shuffled.parquet"
    pq.write_table(t.take(perm), shuffled)
    code, _, err = run_main(["compare", outputs["good"], shuffled], capsys)
    assert code == 2 and "row 0: prompt_id" in err and "same rows in the same order" in err, err


def test_compare_leaves_nan_out_and_counts_it(tmp_path, capsys):
    """A NaN advantage made max |A−B| read 0 (max(0, nan)) and the row sign agreement disagree with the flip count.
    Tokens where A or B is not finite are left out of every figure and counted; a response-level output (one
    number a row) compares as such; a column of strings is refused (it was an internal error); --top -1 is
    refused (it listed all but the last)."""
    a, b, s = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "s.parquet"
    pq.write_table(pa.table({"prompt_id": ["x", "x", "y", "y"], "advantages": [0.5, -0.5, 1.0, -1.0]}), a)
    pq.write_table(pa.table({"prompt_id": ["x", "x", "y", "y"], "advantages": [0.4, -0.4, float("nan"), -1.0]}), b)
    pq.write_table(pa.table({"prompt_id": ["x", "x", "y", "y"], "advantages": ["p", "q", "r", "s"]}), s)
    code, out, err = run_main(["compare", a, b, "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    tk, rw = d["tokens"], d["row_level"]
    assert tk["nonfinite"] == 1 and tk["nonfinite_in_one"] == 1 and rw["rows_with_valid_tokens"] == 3
    assert "valid_tokens" not in d and "response-level table" in d["no_token_data"]  # one number a row: no tokens
    assert tk["max_abs_diff"] == pytest.approx(0.1) and tk["mean_abs_diff"] == pytest.approx(0.2 / 3)
    assert rw["sign_flips"] == 0 and rw["sign_agreement"] == 1.0 and rw["rows_with_valid_tokens"] == 3
    code, _, err = run_main(["compare", a, s], capsys)
    assert code == 2 and "column 'advantages' holds string, not numbers" in err, err
    code, _, err = run_main(["compare", a, b, "--top", "-1"], capsys)
    assert code == 2 and "--top -1: expected 0 or more" in err, err


def test_compare_names_the_step_of_a_group_that_differs(tmp_path, capsys):
    """A prompt_id drawn in two steps is two groups: 'groups that differ most' listed both as the bare id."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    ids, steps = ["p", "p", "p", "p"], [1, 1, 2, 2]
    pq.write_table(pa.table({"prompt_id": ids, "step": steps, "advantages": [1.0, -1.0, 0.5, -0.5]}), a)
    pq.write_table(pa.table({"prompt_id": ids, "step": steps, "advantages": [0.9, -0.9, 0.5, -0.5]}), b)
    code, out, err = run_main(["compare", a, b, "--json"], capsys)
    assert code == 0, err
    worst = json.loads(out)["groups"]["most_different"]
    assert [(e["prompt_id"], e["step"]) for e in worst] == [("p", 1), ("p", 2)]
    code, out, _ = run_main(["compare", a, b], capsys)
    assert "p (step 1)  n=2" in out and "p (step 2)  n=2" in out, out


def test_a_configuration_of_the_wrong_kind_is_refused_naming_it():
    """A configuration's settings that are not a mapping stopped with Python's AttributeError; one 'set' text is
    one --set."""
    with pytest.raises(AdvcliError, match="configuration A's 'settings' is a str; expected a mapping"):
        advcli.compare(SAMPLE, configs=[{"flavor": "verl", "settings": "x"}, {"flavor": "verl"}])
    one = advcli.compare(SAMPLE, configs=[{"flavor": "verl", "set": "algorithm.adv_estimator=rloo"},
                                          {"flavor": "verl", "settings": {"algorithm": {"adv_estimator": "rloo"}}}])
    assert one.report["tokens"]["max_abs_diff"] == 0 and one.report["tokens"]["mean_a"] != 0
    assert one.report["a"]["label"] == one.report["b"]["label"] == 'verl adv_estimator="rloo"'
