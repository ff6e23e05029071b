"""One front door: ``advcli run`` and :func:`advcli.run` are one code path (``advcli.runs.runner.run_dump``), so each
flavor's default on its own trainer dump, and the default flavor on a dump with no flavor named, give the same
output files (advantages and returns byte for byte), the same choice of estimator said the same way, and the
same refusal where the default cannot run. The dumps are the ones tests/formats/test_format_*.py build from the
trainers' field lists."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import test_format_areal as areal
import test_format_nemo as nemo
import test_format_openinstruct as openinstruct
import test_format_primerl as primerl
import test_format_roll as roll
import test_format_skyrl as skyrl
import test_format_slime as slime
import test_format_trl as trl
import test_format_verl as verl
from conftest import SAMPLE, run_main

import advcli
from advcli.errors import AdvcliError, library_words


def _verl(tmp):
    d = tmp / "rollout_data"
    d.mkdir()
    verl.write(d / "1.jsonl", verl.v1_records(1, 1) + verl.v1_records(2, 2))
    return d


def _roll(tmp):
    d = tmp / "rollout_dump"
    d.mkdir()
    for s, o in enumerate([roll.rlvr(0, 1), roll.rlvr(1, 2)]):
        (d / f"rollout_dump_data.step_{s}.jsonl").write_text(json.dumps(o) + "\n")
    return d


def _areal(tmp):
    areal.build(tmp / "trial")
    return tmp / "trial"


def _primerl(tmp):
    primerl.build(tmp / "out")
    return tmp / "out"


def _openinstruct(tmp):
    openinstruct.build(tmp / "rollouts")
    return tmp / "rollouts"


def _nemo_dump(tmp):
    d = tmp / "logs" / "exp_001"
    d.mkdir(parents=True)
    nemo.write_step(d / "train_data_step1.jsonl", nemo.SAMPLES, 1)
    nemo.write_step(d / "train_data_step2.jsonl", nemo.SAMPLES[::-1], 2)
    return d


def _skyrl(tmp):
    root = tmp / "exports" / "dumped_evals"
    for step in (10, 20):
        d = root / f"global_step_{step}_evals"
        d.mkdir(parents=True)
        rng = np.random.default_rng(step)
        recs = [skyrl.rec(f"q{i % 3}", float(rng.integers(0, 2)), "gsm") for i in range(9)]
        (d / "openai_gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root.parent


def _slime(tmp):
    d = tmp / "details" / "rollout_data"
    d.mkdir(parents=True)
    slime.build(d, 0, 0)
    slime.build(d, 1, 1)
    return tmp / "details"


def _trl(tmp):
    d = tmp / "out" / "completions"
    d.mkdir(parents=True)
    trl.write_step(d / "completions_00010.parquet", 10, 1)
    trl.write_step(d / "completions_00020.parquet", 20, 2)
    return d.parent


def _gae_parquet(tmp):
    """The sample without prompt_id: the default flavor picks GAE (it has values)."""
    path = tmp / "novalues_group.parquet"
    t = pq.read_table(SAMPLE)
    pq.write_table(t.drop(["prompt_id"]), path)
    return path


def _sample(tmp):
    return SAMPLE


DUMPS = {"verl": (_verl, "verl"), "roll": (_roll, "roll"), "areal": (_areal, "areal"),
         "primerl": (_primerl, "prime-rl"), "openinstruct": (_openinstruct, "open-instruct"),
         "nemo": (_nemo_dump, "nemo"), "skyrl": (_skyrl, "skyrl"), "slime": (_slime, "slime"), "trl": (_trl, "trl"),
         "sample": (_sample, "verl"), "gae": (_gae_parquet, "verl")}


def _columns(path) -> dict[str, pa.ChunkedArray]:
    t = pq.read_table(str(path))
    return {c: t.column(c) for c in ("advantages", "returns") if c in t.column_names}


@pytest.mark.parametrize("named", [True, False], ids=["flavor", "no-flavor"])
@pytest.mark.parametrize("dump", sorted(DUMPS))
def test_command_and_library_give_the_same_run(dump, named, tmp_path, capsys):
    build, flavor = DUMPS[dump]
    src = build(tmp_path)
    cli_out, lib_out = tmp_path / "cli.parquet", tmp_path / "lib.parquet"
    args = ["run", src, "-o", cli_out, "--device", "cpu", "--json"] + (["--flavor", flavor] if named else [])
    code, stdout, err = run_main(args, capsys)
    try:
        result = advcli.run(str(src), str(lib_out), flavor=flavor if named else None, device="cpu")
    except AdvcliError as e:
        # the same refusal, said the same way: the library's in its keywords (--set k=v -> settings={'k': v})
        assert code == 2 and e.message in library_words(err), (dump, err, e.message)
        assert not cli_out.exists() and not lib_out.exists()
        return
    assert code == 0, err
    rep = json.loads(stdout)
    cli_cols, lib_cols = _columns(cli_out), _columns(lib_out)
    assert cli_cols and set(cli_cols) == set(lib_cols)
    for name, col in cli_cols.items():  # byte for byte: the same float32 values, nulls and list offsets
        assert col.equals(lib_cols[name]), (dump, name)
    assert rep.get("note") == result.chosen  # the estimator the dump chose, said the same way (None: named)
    assert rep["flavor"] == result.flavor and rep["release"] == result.release
    assert rep["from_dump"] == result.from_dump if "from_dump" in rep else not result.from_dump
    assert result.report["estimator"] == rep["estimator"]
    if named:
        assert result.chosen is None
    else:  # a trainer's dump: its trainer's flavor, as audit checks it; verl's and advcli's own Parquet: the
        # default flavor, verl, its estimator picked from the columns
        assert result.flavor == flavor
        assert ("no --flavor: flavor of the dump's trainer" in result.chosen) == (flavor != "verl")


def test_the_default_flavor_says_what_it_chose(tmp_path, capsys):
    """No flavor: the dump's columns choose verl's estimator, and the result says so, as the command does."""
    r = advcli.run(SAMPLE, str(tmp_path / "a.parquet"), device="cpu")
    assert r.chosen == "verl grpo (the dump has prompt_id)" and r.config["estimator"]["name"] == "grpo"
    assert r.report["note"] == r.chosen
    g = advcli.run(str(_gae_parquet(tmp_path)), str(tmp_path / "b.parquet"), device="cpu")
    assert g.chosen == "verl gae (the dump has values and no prompt_id)" and g.config["estimator"]["name"] == "gae"
    named = advcli.run(SAMPLE, str(tmp_path / "c.parquet"), flavor="verl", device="cpu",
                       settings={"algorithm.adv_estimator": "grpo"})
    assert named.chosen is None
    assert _columns(tmp_path / "a.parquet")["advantages"].equals(_columns(tmp_path / "c.parquet")["advantages"])
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "d.parquet", "--device", "cpu"], capsys)
    assert code == 0 and "verl grpo (the dump has prompt_id)" in err


def test_library_takes_the_command_s_options(tmp_path, capsys):
    """Curation, padded, precision, the columns to write, chunk rows and --config reach the same code."""
    opts = dict(drop_uniform=True, min_group_size=2, precision="float64", padded=False,
                write_columns=["advantages"], chunk_rows=97)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("flavor: verl\nalgorithm.adv_estimator: rloo\n")
    lib = advcli.run(SAMPLE, str(tmp_path / "lib.parquet"), config=str(cfg), device="cpu", **opts)
    code, stdout, err = run_main(["run", SAMPLE, "-o", tmp_path / "cli.parquet", "--config", cfg, "--device", "cpu",
                                  "--drop-uniform", "--min-group-size", "2", "--precision", "float64",
                                  "--ragged", "--write-columns", "advantages",
                                  "--chunk-rows", "97", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(stdout)
    assert lib.config["estimator"]["name"] == "rloo" and lib.config["precision"] == "float64"
    assert lib.config["padded"] is False
    a, b = pq.read_table(tmp_path / "cli.parquet"), pq.read_table(tmp_path / "lib.parquet")
    assert a.column_names == b.column_names and "returns" not in a.column_names
    assert a.column("advantages").equals(b.column("advantages"))
    assert lib.curation is not None and rep["filter"]["groups_dropped"] == lib.curation["groups_dropped"]
    assert rep["config_file"]["taken"] == lib.config_file["taken"] == ["algorithm.adv_estimator"]
    for bad in ({"precision": "float16"}, {"engine": "spark"}, {"min_group_size": 0}):
        with pytest.raises(AdvcliError) as e:
            advcli.run(SAMPLE, str(tmp_path / "x.parquet"), device="cpu", **bad)
        flag, value = next(iter(bad.items()))
        code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "x.parquet", f"--{flag.replace('_', '-')}",
                                 value], capsys)
        # the same message, its options named as the library's keywords there (docs/api.md)
        assert code == 2 and e.value.message in library_words(err)
        assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("call", ["run", "stats", "audit", "compare"])
def test_a_misspelt_column_role_is_refused_by_the_library_as_by_the_command(call, tmp_path, capsys):
    """``columns={'rewrd': 'acc'}`` was taken as a column of its own: the run read the default reward column
    and said nothing (the command refuses ``--column rewrd=acc``)."""
    kwargs = {"run": {"output": None}, "compare": {"estimators": ["grpo", "rloo"]}}.get(call, {})
    with pytest.raises(AdvcliError, match=r"columns=\{'rewrd': 'acc'\}: unknown role 'rewrd'. Did you mean 'reward'"):
        getattr(advcli, call)(SAMPLE, columns={"rewrd": "acc"}, **kwargs)
    code, _, err = run_main(["run", SAMPLE, "-o", str(tmp_path / "o.parquet"), "--column", "rewrd=acc"], capsys)
    assert code == 2 and "unknown role 'rewrd'. Did you mean 'reward'" in err
    # a known role reads the column it names
    t = pq.read_table(SAMPLE)
    got = advcli.stats(SAMPLE, columns={"reward": "acc"}).metrics["critic/score/mean"]
    assert got == pytest.approx(float(np.mean(t.column("acc").to_numpy())), rel=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"flavor": 123}, r"flavor=123: expected a flavor's name"),
    ({"settings": [("algorithm.adv_estimator", "grpo")]}, r"settings: expected a mapping"),
    ({"chunk_rows": "4096"}, r"chunk_rows must be a whole number of rows, at least 1 \(got '4096'\)"),
    ({"columns": ["reward"]}, r"columns: expected a mapping of roles to column names"),
])
def test_arguments_of_the_wrong_kind_are_refused_naming_the_keyword(kwargs, match):
    with pytest.raises(AdvcliError, match=match):
        advcli.run(SAMPLE, None, **kwargs)


@pytest.mark.parametrize("text, want", [
    ("x.parquet: --column reward=nope: no column 'nope'", "x.parquet: columns={'reward': 'nope'}: no column 'nope'"),
    ("--device cuda: no CUDA device", "device='cuda': no CUDA device"),
    ("--device cuda:1 is not there", "device='cuda:1' is not there"),
    ("--set algorithm.gamma=2: must be at most 1", "settings={'algorithm.gamma': 2}: must be at most 1"),
    ("--column reward/acc=x: no", "columns={'reward/acc': 'x'}: no"),
    ("add --set num_generations=N", "add settings={'num_generations': N}"),  # a placeholder, not the text 'N'
])
def test_a_colon_after_an_option_stays_outside_the_keyword(text, want):
    """A message's colon after an option's value was taken into the value (``columns={'reward': 'nope:'}``)."""
    assert library_words(text) == want


def test_a_record_batch_is_an_input_and_other_objects_are_named_by_their_type():
    """A RecordBatch runs as its table does; a RecordBatchReader, a number or a frame with a column twice is
    refused naming the type or the column (before: the batch's whole text as a file name, 'no such file', or
    pandas' own ValueError)."""
    import pandas as pd

    t = pq.read_table(SAMPLE)
    settings = {"algorithm.adv_estimator": "grpo"}
    by_table = advcli.run(t, None, settings=settings).table
    by_batch = advcli.run(t.combine_chunks().to_batches()[0], None, settings=settings).table
    assert by_batch.column("advantages").equals(by_table.column("advantages"))
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
    with pytest.raises(AdvcliError, match=r"type pyarrow.lib.RecordBatchReader is not a path") as e:
        advcli.run(reader, None)
    assert "read_all()" in e.value.hint and len(str(e.value)) < 200
    with pytest.raises(AdvcliError, match=r"type builtins.int is not a path"):
        advcli.stats(12)
    df = t.to_pandas()
    with pytest.raises(AdvcliError, match=r"more than one column named 'reward'"):
        advcli.run(pd.concat([df[["reward"]], df], axis=1), None)


@pytest.mark.parametrize("call, kwargs, message", [
    ("run", {"precision": "float16"}, "precision='float16': expected float32 or float64"),
    ("run", {"output_mode": "x"}, "output_mode='x': expected full or sidecar"),
    ("run", {"write_columns": ["foo"]}, "write_columns: unknown column 'foo'"),
    ("run", {"device": "tpu"}, "device='tpu': expected auto, cpu or cuda"),
    ("audit", {"rtol": -1}, "rtol=-1: a tolerance is a finite number >= 0"),
    ("audit", {"rtol": float("nan")}, "rtol=nan: a tolerance is a finite number >= 0"),  # every value disagreed
    ("audit", {"atol": float("inf")}, "atol=inf: a tolerance is a finite number >= 0"),  # every value agreed
    ("audit", {"top": -1}, "top=-1: the number of worst rows to list is 0 or more"),  # all but the last listed
])
def test_what_a_call_checks_first_is_said_in_its_keywords(call, kwargs, message, tmp_path):
    """The checks made before an input is read said --precision, --output-mode, --write-columns, --device,
    --rtol to a library caller."""
    output = {"output": str(tmp_path / "o.parquet")} if call == "run" else {}
    with pytest.raises(AdvcliError) as e:
        getattr(advcli, call)(SAMPLE, **output, **kwargs)
    assert str(e.value).startswith(message) and "--" not in str(e.value)


def test_a_data_frame_filtered_to_no_rows_runs(tmp_path):
    """df[df.reward > 5] has no rows, and pandas' object columns carry no element type (Arrow reads them as
    null): the run of no rows is valid, as for a file of no rows; it was refused for its null mask column."""
    df = pq.read_table(SAMPLE).to_pandas()
    empty = df[df["reward"] > 5]
    result = advcli.run(empty, None, settings={"algorithm.adv_estimator": "grpo"})
    assert result.table.num_rows == 0 and result.table.schema.field("advantages").type == pa.list_(pa.float32())
    assert list(result.to_pandas().columns)[:len(df.columns)] == list(df.columns)
    out = tmp_path / "o.parquet"
    advcli.run(empty, str(out), settings={"algorithm.adv_estimator": "grpo"})
    assert pq.read_metadata(out).num_rows == 0


def test_a_frame_of_pyarrow_dtypes_comes_back_with_them(tmp_path):
    """pd.read_parquet(..., dtype_backend="pyarrow") gives list<...>[pyarrow] columns; result.to_pandas() raised
    pandas' "data type ... not understood" (its own Parquet round trip does too)."""
    import pandas as pd

    df = pd.read_parquet(SAMPLE, dtype_backend="pyarrow")
    result = advcli.run(df, None, settings={"algorithm.adv_estimator": "grpo"})
    back = result.to_pandas()
    assert all(isinstance(back[c].dtype, pd.ArrowDtype) for c in ("response_mask", "advantages"))
    plain = advcli.run(pd.read_parquet(SAMPLE), None, settings={"algorithm.adv_estimator": "grpo"}).to_pandas()
    assert back["advantages"].tolist() == [list(a) for a in plain["advantages"]]
    assert list(back.columns) == list(plain.columns)


@pytest.mark.parametrize("dump", sorted(d for d in DUMPS if DUMPS[d][1] != "verl"))
def test_a_trainers_dump_without_flavor_runs_its_trainers_flavor(dump, tmp_path):
    """`advcli run DUMP` with no --flavor gives what `--flavor TRAINER` gives (as audit checks the dump), or the
    same refusal, and says which flavor ran and why."""
    build, flavor = DUMPS[dump]
    src = build(tmp_path)
    runs = {}
    for key, name in (("named", flavor), ("none", None)):
        try:
            runs[key] = advcli.run(str(src), str(tmp_path / f"{key}.parquet"), flavor=name, device="cpu")
        except AdvcliError as e:
            runs[key] = e.message
    if isinstance(runs["named"], str):
        assert runs["none"] == runs["named"]
        return
    assert runs["none"].flavor == flavor and runs["none"].release == runs["named"].release
    assert runs["none"].chosen.startswith(f"{flavor} ") and "no --flavor: flavor of the dump's trainer" in \
        runs["none"].chosen
    a, b = _columns(tmp_path / "named.parquet"), _columns(tmp_path / "none.parquet")
    assert a and set(a) == set(b) and all(a[c].equals(b[c]) for c in a)


def test_the_default_flavors_keys_on_a_trainers_dump_name_the_default_flavor(tmp_path):
    """No --flavor, but --set keys that are verl's and not the dump's trainer's: the user wrote verl's settings,
    so verl runs them (as before a dump's trainer chose the flavor); the trainer's own keys keep its flavor."""
    src = DUMPS["trl"][0](tmp_path)
    verl_keys = advcli.run(str(src), str(tmp_path / "v.parquet"), settings={"algorithm.adv_estimator": "rloo"},
                           device="cpu")
    assert verl_keys.flavor == "verl" and verl_keys.config["estimator"]["name"] == "rloo"
    own_keys = advcli.run(str(src), str(tmp_path / "t.parquet"), settings={"scale_rewards": "batch"}, device="cpu")
    assert own_keys.flavor == "trl" and own_keys.config["estimator"]["scale"] == "batch"


# (--set pairs, --config file text or None) -> (flavor, estimator) both `run` and `audit` take on a TRL dump
ROUTES = {
    "nothing": ([], None, ("trl", "grpo_nan")),
    "trl's --set key": (["scale_rewards=batch"], None, ("trl", "grpo_nan")),
    "verl's --set key": (["algorithm.adv_estimator=rloo"], None, ("verl", "rloo")),
    "advcli's key in a file": ([], "advcli.id_check: warn\n", ("trl", "grpo_nan")),
    "verl's key in a file": ([], "algorithm:\n  adv_estimator: rloo\n", ("verl", "rloo")),
    "verl's misspelt section": ([], "algoritm:\n  adv_estimator: rloo\n", None),
    "a file naming verl": ([], "flavor: verl\nalgorithm.adv_estimator: grpo\n", ("verl", "grpo")),
    "trl's key in a file": ([], "beta: 0.0\n", ("trl", "grpo_nan")),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_run_and_audit_take_one_flavor_on_a_trainers_dump(route, tmp_path, capsys):
    """No --flavor on TRL's dump: `run` and `audit`, command and library, take the same flavor and estimator by
    every route (the trainer's own keys or advcli's keep TRL; verl's keys, with --set or in a --config file that
    names no flavor, run verl; a file naming a flavor runs it), so a run's numbers are the ones audit checks;
    a --config section that verl refuses as its own misspelt is refused the same way by both."""
    sets, text, want = ROUTES[route]
    src = DUMPS["trl"][0](tmp_path)
    argv = [a for s in sets for a in ("--set", s)]
    config = None
    if text is not None:
        config = tmp_path / "c.yaml"
        config.write_text(text)
        argv += ["--config", str(config)]
    settings = dict(s.split("=", 1) for s in sets)
    got = {}
    calls = {"run": lambda: advcli.run(str(src), str(tmp_path / "lib.parquet"), settings=settings, config=config,
                                       device="cpu"),
             "audit": lambda: advcli.audit(str(src), settings=settings, config=config, device="cpu")}
    for name, call in calls.items():
        try:
            r = call()
            got[f"{name} library"] = ((r.flavor, r.config["estimator"]["name"]) if name == "run"
                                      else (r.report["flavor"], r.report["estimator"]))
        except AdvcliError as e:
            got[f"{name} library"] = e.message
    code, out, _ = run_main(["run", str(src), "-o", str(tmp_path / "cli.parquet"), "--json", *argv], capsys)
    rep = json.loads(out) if code == 0 else None
    got["run command"] = (rep["flavor"], rep["config"]["estimator"]["name"]) if rep else code
    code, out, _ = run_main(["audit", str(src), "--json", *argv], capsys)
    rep = json.loads(out) if code in (0, 1) else None
    got["audit command"] = (rep["flavor"], rep["estimator"]) if rep else code
    if want is None:
        assert got["run command"] == got["audit command"] == 2
        assert got["run library"] == got["audit library"] and "algoritm" in got["run library"]
        return
    assert got["run library"] == got["run command"] == got["audit library"] == got["audit command"] == want


def test_settings_as_the_command_takes_them_nested_text_and_numpy(tmp_path, capsys):
    """settings={'k': 'false'} is read as --set k=false (a float key's '0.9' was taken, a bool key's 'false'
    refused); numpy's bool is a bool; a nested section is its dotted keys, as a config file's; a mapping given as
    config is refused naming settings=. Each gives the command's numbers."""
    import numpy as np

    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "cli.parquet", "--flavor", "verl", "--set",
                             "algorithm.norm_adv_by_std_in_grpo=false", "--set", "algorithm.adv_estimator=grpo"],
                            capsys)
    assert code == 0, err
    want = pq.read_table(tmp_path / "cli.parquet").column("advantages")
    sample = pq.read_table(SAMPLE)
    for settings in ({"algorithm.norm_adv_by_std_in_grpo": "false", "algorithm.adv_estimator": "grpo"},
                     {"algorithm.norm_adv_by_std_in_grpo": np.bool_(False), "algorithm.adv_estimator": "grpo"},
                     {"algorithm": {"norm_adv_by_std_in_grpo": False, "adv_estimator": "grpo"}}):
        got = advcli.run(sample, flavor="verl", settings=settings).table.column("advantages")
        assert got.equals(want), settings
    # without the std the GRPO advantage is the reward minus its group's mean: not the default's numbers
    default = advcli.run(sample, flavor="verl", settings={"algorithm.adv_estimator": "grpo"}).table
    assert not default.column("advantages").equals(want)
    for bad in ("1", "maybe"):  # a number is no bool here either, as --set k=1 is refused
        with pytest.raises(AdvcliError, match="is not a valid bool"):
            advcli.run(sample, flavor="verl", settings={"algorithm.norm_adv_by_std_in_grpo": bad})
    # a key that takes a mapping keeps it (advcli's reward.norm), also under its section; text as --set reads it
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "norm.parquet", "--flavor", "advcli", "--set",
                             "reward.norm={mean_level: group, std_level: group}", "--set",
                             "estimator.name=reinforce_plus_plus"], capsys)
    assert code == 0, err
    want = pq.read_table(tmp_path / "norm.parquet").column("advantages")
    for settings in ({"reward.norm": {"mean_level": "group", "std_level": "group"}},
                     {"reward": {"norm": {"mean_level": "group", "std_level": "group"}}},
                     {"reward.norm": "{mean_level: group, std_level: group}"}):
        got = advcli.run(sample, flavor="advcli", settings={**settings, "estimator.name": "reinforce_plus_plus"})
        assert got.table.column("advantages").equals(want), settings
    plain = advcli.run(sample, flavor="advcli", settings={"estimator.name": "reinforce_plus_plus"}).table
    assert not plain.column("advantages").equals(want)  # the normalisation changed the numbers
    with pytest.raises(AdvcliError, match=r"config: expected the path of a YAML/TOML file.*") as e:
        advcli.run(sample, config={"algorithm": {"adv_estimator": "grpo"}})
    assert "settings=" in e.value.hint


def test_tables_in_memory_name_themselves_and_several_need_one_table(tmp_path):
    """The output's provenance names an in-memory input as the result does (it said the temporary
    'table0.parquet'); several in-memory inputs with output=None are refused in the call's words (the message
    named a temporary path and --output), pointing to one table or an output directory."""
    sample = pq.read_table(SAMPLE)
    res = advcli.run(sample, tmp_path / "o.parquet", device="cpu")
    meta = json.loads(pq.read_schema(tmp_path / "o.parquet").metadata[b"advcli"])
    assert res.inputs == ["<pyarrow.Table>"] and "table0.parquet" not in json.dumps(meta)
    assert "<pyarrow.Table>" in json.dumps(meta)
    assert res.device.startswith("cpu") and "--device" not in res.device
    half = sample.num_rows // 2
    with pytest.raises(AdvcliError, match="2 inputs with output=None") as e:
        advcli.run([sample.slice(0, half), sample.slice(half)], None)
    assert "pa.concat_tables" in e.value.hint and "advcli-frames" not in str(e.value) + e.value.hint
    joined = advcli.run(pa.concat_tables([sample.slice(0, half), sample.slice(half)])).table
    assert joined.column("advantages").equals(advcli.run(sample).table.column("advantages"))
    assert set(advcli.__all__) >= {"run", "stats", "audit", "compare", "estimator", "AdvcliError"}


def test_a_table_of_rewards_runs_as_a_response_level_dump():
    """A table of one reward a response and no token lists (a DataFrame, a CSV saved as Parquet) runs as a trainer's
    response-level dump does: verl's GRPO gives (r - group mean) / (unbiased group std + 1e-6) as a scalar per row,
    the numbers a one-token mask a row gives as one-element lists; the summary says there is no token data."""
    import pandas as pd

    df = pd.DataFrame({"prompt_id": [0, 0, 0, 1, 1], "reward": [1.0, 0.0, 0.5, 1.0, 1.0]})
    res = advcli.run(df, flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    first = np.array([1.0, 0.0, 0.5])
    want = list((first - first.mean()) / (first.std(ddof=1) + 1e-6)) + [0.0, 0.0]
    got = res.table
    assert got.column_names == ["prompt_id", "reward", "advantages", "returns"]
    assert got.schema.field("advantages").type == pa.float32()
    assert np.allclose(got.column("advantages").to_pylist(), want, rtol=1e-6, atol=1e-6)
    assert "response-level table" in res.no_token_data and df.columns.tolist() == ["prompt_id", "reward"]
    masked = df.assign(response_mask=[[1]] * len(df))
    lists = advcli.run(masked, flavor="verl", settings={"algorithm.adv_estimator": "grpo"}).table
    assert [a[0] for a in lists.column("advantages").to_pylist()] == got.column("advantages").to_pylist()


def test_a_dataframe_of_a_verl_jsonl_dump_says_to_give_the_dump_files(tmp_path):
    """pd.read_json of verl's rollout JSONL as a DataFrame: the hint said columns={'prompt_id': 'uid'}, which groups
    every v1 row alone (its uid holds the session); it says to give the dump's own files, read with verl's group
    ids. source='verl-jsonl' on the frame says a table in memory is no JSONL file (it said 'a Parquet file')."""
    import json

    import pandas as pd

    recs = [{"input": f"q{i // 4}", "output": f"a{i}", "score": float(i % 2), "step": 1, "gts": "x",
             "uid": f"{i // 4}-uuid_{i}"} for i in range(8)]
    path = tmp_path / "1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    df = pd.read_json(path, lines=True)
    with pytest.raises(AdvcliError) as e:
        advcli.run(df)
    assert "give advcli the dump's own files" in e.value.hint and "'prompt_id': 'uid'" not in e.value.hint
    with pytest.raises(AdvcliError, match="a table in memory is not a verl"):
        advcli.run(df, source="verl-jsonl")
