"""trl-completions: TRL GRPOTrainer's completions/completions_{step:05d}.parquet, built here from the
column list of spec/dumps.md §3 (step, prompt, completion, one column per reward function, advantage),
with ``advantage`` computed independently below as TRL's GRPO does it: R = nansum_k w_k r_k,
A = (R − group mean) / (group std (Bessel) + 1e-4), groups = num_generations consecutive rows."""
import json
import math
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_main

import advcli

G = 4


def trl_grpo(acc, fmt, weights=(1.0, 1.0)):
    out = []
    R = [np.nansum([weights[0] * a, weights[1] * f]) for a, f in zip(acc, fmt)]
    for g in range(0, len(R), G):
        block = R[g:g + G]
        mean = sum(block) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in block) / (G - 1))
        out += [(x - mean) / (std + 1e-4) for x in block]
    return out


def write_step(path, step, seed, weights=(1.0, 1.0)):
    rng = np.random.default_rng(seed)
    prompts = [f"user\nquestion {seed}-{i}\nassistant\n" for i in range(3) for _ in range(G)]
    acc = [float(x) for x in rng.integers(0, 2, len(prompts))]
    fmt = [float(x) for x in rng.choice([0.0, 0.5, 1.0], len(prompts))]
    adv = trl_grpo(acc, fmt, weights)
    # as TRL writes it (grpo_trainer.py L3311-3325 @f2cd5771): a pandas DataFrame, to_parquet with its index
    pd.DataFrame({"step": [step] * len(prompts), "prompt": prompts,
                  "completion": [f"answer {i}" for i in range(len(prompts))],
                  "accuracy_reward": acc, "format_reward": fmt, "advantage": adv}).to_parquet(path)
    return adv


@pytest.fixture
def dump(tmp_path):
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    adv = write_step(d / "completions_00010.parquet", 10, 1) + write_step(d / "completions_00020.parquet", 20, 2)
    return d, adv


@pytest.mark.parametrize("chunk", ["4096", "5"])
def test_flavor_trl_equals_logged_advantage(dump, tmp_path, capsys, chunk):
    d, expected = dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", str(d.parent), "-o", out, "--flavor", "trl", "--set", f"num_generations={G}",
                             "--set", "reward_funcs=[accuracy_reward,format_reward]", "--chunk-rows", chunk, "-q"],
                            capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert t.schema.field("advantages").type == pa.float32()  # response level: one scalar per response
    assert "response_mask" not in t.schema.names
    got = np.array(t.column("advantages").to_pylist())
    assert np.allclose(got, t.column("advantage").to_numpy(), rtol=1e-5, atol=1e-5)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flavor", [[], ["--flavor", "trl"]])
def test_a_completions_file_without_its_prompt_says_so(tmp_path, capsys, flavor):
    """A completions file whose prompt column was dropped is not TRL's dump (its groups are runs of equal prompt):
    read as advcli's own Parquet, it used to ask for a response_mask; the error now says which column is missing."""
    d = tmp_path / "completions"
    d.mkdir()
    write_step(d / "completions_00010.parquet", 10, 1)
    pq.write_table(pq.read_table(d / "completions_00010.parquet").drop_columns(["prompt"]),
                   d / "completions_00010.parquet")
    code, _, err = run_main(["run", str(d / "completions_00010.parquet"), "-o", tmp_path / "o.parquet", *flavor,
                             "-q"], capsys)
    assert code == 2
    assert "completions_00010.parquet: its name is that of a TRL completions_{step}.parquet dump" in err
    assert "but not 'prompt', which that dump's reader needs (its groups: runs of equal prompt)" in err
    assert not (tmp_path / "o.parquet").exists()


def test_a_reward_function_column_of_strings_is_named(dump, tmp_path, capsys):
    """A later file whose accuracy_reward holds strings: the message said the reward-function columns differ from
    the first file's; it now names the column and its type."""
    d, _ = dump
    p = d / "completions_00020.parquet"
    t = pq.read_table(p)
    i = t.column_names.index("accuracy_reward")
    t = t.set_column(i, "accuracy_reward", pa.array([str(x) for x in t.column(i).to_pylist()]))
    pq.write_table(t, p)
    code, _, err = run_main(["run", str(d.parent), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                             f"num_generations={G}"], capsys)
    assert code == 2
    assert "completions_00020.parquet: column 'accuracy_reward' holds string values here, and floats" in err, err


@pytest.mark.parametrize("first", [True, False])
def test_the_only_reward_column_of_strings_is_named(dump, tmp_path, capsys, first):
    """A run with one reward function whose column holds strings: in a later file the message said "no
    reward-function column"; it names the column and its type, and in the first file lists the columns there."""
    d, _ = dump
    for name in ("completions_00010.parquet", "completions_00020.parquet"):
        t = pq.read_table(d / name).drop_columns(["format_reward"])
        if (name == "completions_00010.parquet") == first:
            i = t.column_names.index("accuracy_reward")
            t = t.set_column(i, "accuracy_reward", pa.array([str(x) for x in t.column(i).to_pylist()]))
        pq.write_table(t, d / name)
    code, _, err = run_main(["run", str(d.parent), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                             f"num_generations={G}"], capsys)
    assert code == 2
    if first:
        assert ("completions_00010.parquet: no reward-function column (TRL writes one column of floats per reward "
                "function); the other columns: 'accuracy_reward' (string)") in err, err
    else:
        assert "completions_00020.parquet: column 'accuracy_reward' holds string values here, and floats" in err, err


def test_a_null_prompt_is_refused_naming_its_row(dump, tmp_path, capsys):
    """A null prompt cut its group's run of equal prompts, and the refusal that followed named the blocks, not the
    row: it is now refused where it is."""
    d, _ = dump
    p = d / "completions_00020.parquet"
    t = pq.read_table(p)
    prompts = t.column("prompt").to_pylist()
    prompts[2] = None
    pq.write_table(t.set_column(t.column_names.index("prompt"), "prompt", pa.array(prompts, pa.string())), p)
    code, _, err = run_main(["run", str(d.parent), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                             f"num_generations={G}"], capsys)
    assert code == 2 and "completions_00020.parquet: column 'prompt', row 2: null value" in err, err


def test_a_glob_of_completion_files_is_the_dump(dump, tmp_path, capsys):
    """'completions/*.parquet' names TRL's files: read as the dump (not as advcli's own Parquet, which has a
    response_mask), one output with TRL's logged advantages."""
    d, expected = dump
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", str(d / "*.parquet"), "-o", out, "--flavor", "trl", "--set", f"num_generations={G}",
                             "--set", "reward_funcs=[accuracy_reward,format_reward]", "-q"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("named", [True, False])
def test_weighted_reward(tmp_path, capsys, named):
    """GRPOConfig.reward_weights with the functions named, or not: reward_funcs is a GRPOTrainer argument, not a
    GRPOConfig field, so a user's config gives the weights alone; the dump's columns name the functions (the
    weights alone were refused as 'one reward function')."""
    d = tmp_path / "completions"
    d.mkdir()
    exp = write_step(d / "completions_00001.parquet", 1, 3, weights=(1.0, 0.5))
    out = tmp_path / "o.parquet"
    funcs = ["--set", "reward_funcs=[accuracy_reward,format_reward]"] if named else []
    code, _, err = run_main(["run", str(d), "-o", out, "--flavor", "trl", "--set", f"num_generations={G}", *funcs,
                             "--set", "reward_weights=[1.0,0.5]", "-q"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-5)
    code, _, err = run_main(["audit", str(d), "--flavor", "trl", "--set", "reward_weights=[1.0,0.5]", "-q"], capsys)
    assert code == 0, err
    # audited without the weights: disagrees, and names the setting the dump does not record
    code, out, err = run_main(["audit", str(d), "--flavor", "trl", "--no-search", "--json"], capsys)
    assert code == 1, err
    settings = [f for f in json.loads(out)["findings"] if f["kind"] == "setting"]
    assert len(settings) == 1 and "GRPOConfig.reward_weights" in settings[0]["explanation"]
    code, _, err = run_main(["run", str(d), "-o", out, "--force", "--flavor", "trl", *funcs,
                             "--set", "reward_weights=[1.0,0.5,2.0]", "-q"], capsys)
    assert code == 2 and "key reward_weights: 3 weights for 2 reward_funcs" in err, err


def test_convert_columns(dump, tmp_path, capsys):
    d, _ = dump
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d / "completions_00010.parquet", "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert len(t) == 12 and t[0]["step"] == 10
    assert t[0]["reward"] == t[0]["accuracy_reward"] + t[0]["format_reward"]
    assert [r["prompt_id"] for r in t[:G]] == [t[0]["prompt_id"]] * G and t[G]["prompt_id"] != t[0]["prompt_id"]
    assert "response_mask" not in t[0]


def test_a_converted_dump_keeps_its_group_size(dump, tmp_path, capsys):
    """advcli convert records the dump's group sizes: a run on the converted file takes num_generations from
    them as a run on the dump does (TRL's default, 8, does not split these groups of 4), with the same numbers."""
    d, expected = dump
    conv = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d, "-o", conv], capsys)
    assert code == 0, err
    reward = ["--set", "reward_funcs=[accuracy_reward,format_reward]"]
    code, _, err = run_main(["run", conv, "-o", tmp_path / "a.parquet", "--flavor", "trl", *reward], capsys)
    assert code == 0, err
    assert f"group size {G} from the dump's" in " ".join(err.split())
    code, _, err = run_main(["run", d, "-o", tmp_path / "b.parquet", "--flavor", "trl", *reward], capsys)
    assert code == 0, err
    got = pq.read_table(tmp_path / "a.parquet").column("advantages").to_pylist()
    assert got == pq.read_table(tmp_path / "b.parquet").column("advantages").to_pylist()
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    # the file read back as a table: pq.read_table keeps the schema's metadata (not the footer's other keys),
    # where convert writes the group sizes too, so the library's table route takes them as the file's does
    table = pq.read_table(conv)
    assert json.loads(table.schema.metadata[b"advcli.group_sizes"]) == {str(G): 6}
    lib = advcli.run(table, flavor="trl", settings={"reward_funcs": ["accuracy_reward", "format_reward"]}).table
    assert lib.column("advantages").to_pylist() == got


def test_wrong_group_size_is_caught(dump, tmp_path, capsys):
    d, _ = dump
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "trl",
                             "--set", "num_generations=8"], capsys)
    assert code == 2 and "positional group" in err
    # said in TRL's words, with the dump's own groups (3 prompts x 4 rows a step, 2 steps): what to set
    assert "grouping.size" not in err and "blocks of num_generations rows" in err
    assert "6 of 4 rows; --set num_generations=4, or leave num_generations out" in " ".join(err.split())
    assert not (tmp_path / "o.parquet").exists()
    for command in (["validate"], ["audit"]):  # said the same way
        code, _, err = run_main([*command, str(d), "--flavor", "trl", "--set", "num_generations=8"], capsys)
        assert code == 2 and "blocks of num_generations rows" in err and "grouping.size" not in err, (command, err)


def test_groups_of_several_sizes_need_num_generations(tmp_path, capsys):
    """Runs of equal prompt of 3 and 2 rows: no group size fits them all, so none is taken from the dump, and
    TRL's default num_generations=8 (which could not have written them) is refused, naming the key and the
    dump's groups, rather than cutting blocks of 8 across them. Given the key, the run groups as TRL does."""
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    prompts = ["user\nq0\nassistant\n"] * 3 + ["user\nq1\nassistant\n"] * 2 + ["user\nq2\nassistant\n"] * 3
    pd.DataFrame({"step": [10] * 8, "prompt": prompts, "completion": [f"a{i}" for i in range(8)],
                  "accuracy_reward": [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], "advantage": [0.0] * 8}) \
        .to_parquet(d / "completions_00010.parquet")
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", str(d), "-o", out, "--flavor", "trl"], capsys)
    err = " ".join(err.split())
    assert code == 2 and "num_generations is not set, and its default 8 does not fit the dump's runs of equal " \
        "prompt (1 of 2 rows, 2 of 3 rows)" in err and "add --set num_generations=N" in err
    assert not out.exists()
    # given, the key is the user's: blocks of 8 are checked against the prompt runs, blocks of 3 against the step
    code, _, err = run_main(["run", str(d), "-o", out, "--flavor", "trl", "--set", "num_generations=8"], capsys)
    assert code == 2 and "positional group of 8 (rows 0-7 in step 10) holds several 'prompt_id' values" in err
    code, _, err = run_main(["run", str(d), "-o", out, "--flavor", "trl", "--set", "num_generations=3"], capsys)
    assert code == 2 and "do not split into groups of 3" in err
    assert not out.exists()


def test_token_estimators_refused(dump, tmp_path, capsys):
    d, _ = dump
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=gae"], capsys)
    assert code == 2 and "no token data" in err and "values" in err
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=opo"], capsys)
    assert code == 2 and "response lengths" in err
    code, _, err = run_main(["validate", str(d), "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--set", "algorithm.use_kl_in_reward=true"], capsys)
    assert code == 2 and "log-probs" in err
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=rloo"], capsys)
    assert code == 0, err


def test_inspect_lists_feedable_estimators(dump, capsys):
    d, _ = dump
    code, out, err = run_main(["inspect", str(d), "--json"], capsys)
    assert code == 0, err
    import json
    data = json.loads(out)
    assert data["dump"]["format"] == "trl-completions" and data["dump"]["level"] == "response"
    assert data["dump"]["group_sizes"] == {"4": 6}
    assert data["estimators"]["grpo"]["ok"] and not data["estimators"]["gae"]["ok"]
    assert "token data" in data["estimators"]["gae"]["missing"][0]


def test_file_of_another_format_among_dumps(dump, tmp_path, capsys):
    d, _ = dump
    (d / "3.jsonl").write_text('{"input": "q", "output": "a", "score": 1.0, "step": 3}\n')
    code, _, err = run_main(["convert", d, "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "3.jsonl" in err and "among the trl-completions dumps" in err


@pytest.mark.parametrize("command", [["run"], ["run", "--drop-uniform"], ["filter", "--drop-uniform"], ["validate"]])
def test_run_never_writes_over_its_input(command, dump, tmp_path, capsys):
    """`-o` naming a step file of the dump given as its directory or a glob, or a converted file given as itself,
    with --force: the output replaced the input (its check compared the output with the temporary file the dump was
    read from). Refused, the file unchanged."""
    d, _ = dump
    f = d / "completions_00010.parquet"
    conv = tmp_path / "c.parquet"
    assert run_main(["convert", d, "-o", conv], capsys)[0] == 0
    before = {p: p.read_bytes() for p in (f, conv)}
    for src, out in ((d, f), (str(d / "*.parquet"), f), (f, f), (conv, conv)):
        code, _, err = run_main([command[0], src, *command[1:], "-o", out, "--force"], capsys)
        assert code == 2 and "the output path is an input file" in err, (src, err)
    assert all(p.read_bytes() == b for p, b in before.items())


def test_an_output_directory_is_never_the_dump_s_own(dump, tmp_path, capsys):
    """`-o` naming the dump's directory (or the folder of it holding the step files) wrote `<name>.parquet` among
    the dump's files, which a later run on the directory then read as one more file. Refused, the directory as it
    was; another existing directory takes the output inside it, as before."""
    d, expected = dump
    before = sorted(p.name for p in d.parent.rglob("*"))
    reward = ["--set", "reward_funcs=[accuracy_reward,format_reward]"]
    f = d / "completions_00010.parquet"
    for src, out in ((d, d), (d, f"{d}/"), (d.parent, d), (d.parent, d.parent), (d.parent, f"{d}/new/"),
                     (f, d), (str(d / "*.parquet"), d)):
        code, _, err = run_main(["run", src, "-o", out, "--flavor", "trl", *reward], capsys)
        assert code == 2 and "the outputs would land among the dump's files" in " ".join(err.split()), err
    assert sorted(p.name for p in d.parent.rglob("*")) == before
    with pytest.raises(advcli.AdvcliError) as e:  # in the call's words
        advcli.run(str(d), output=str(d), flavor="trl", settings={"reward_funcs": ["accuracy_reward", "format_reward"]})
    assert "output='" in e.value.hint and "-o " not in e.value.hint
    elsewhere = tmp_path / "outs"
    elsewhere.mkdir()
    code, _, err = run_main(["run", d, "-o", elsewhere, "--flavor", "trl", *reward], capsys)
    assert code == 0, err
    (written,) = elsewhere.iterdir()
    assert np.allclose(pq.read_table(written).column("advantages").to_pylist(), expected, rtol=1e-5, atol=1e-5)


def test_compare_resolves_each_configuration_as_run_does(dump, tmp_path, capsys):
    """`compare DUMP --flavor trl --flavor trl --set ...` resolved its configurations without the dump: TRL's default
    num_generations=8 on groups of 4 (refused), where `run` takes 4 from the dump. Each is now resolved as run
    resolves it; configuration A gives run's advantages, and the table counts responses (no token data)."""
    d, expected = dump
    reward = ["--set", "reward_funcs=[accuracy_reward,format_reward]"]
    code, out, err = run_main(["compare", d, "--flavor", "trl", *reward, "--flavor", "trl", *reward, "--set",
                               "scale_rewards=none", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert f"num_generations={G}" in res["a"]["label"] and res["rows"] == len(expected), res["a"]
    assert res["tokens"]["mean_a"] == pytest.approx(float(np.mean(expected)), abs=1e-6)
    code, out, err = run_main(["compare", d, "--flavor", "trl", *reward, "--flavor", "trl", *reward], capsys)
    assert code == 0 and "responses (no token data)" in out and "tokens (mask=1)" not in out, out


def test_convert_never_writes_over_its_input(dump, capsys):
    """Neither given as the file nor as its dump directory (which once replaced the step file with its own
    conversion, exit 0)."""
    d, _ = dump
    f = d / "completions_00010.parquet"
    before = f.read_bytes()
    for src in (f, d):
        code, _, err = run_main(["convert", src, "-o", f, "--force"], capsys)
        assert code == 2 and "is a file of the input dump" in err and f.read_bytes() == before, err


def test_convert_writes_a_temporary_file_of_its_own_and_says_a_corrupt_page(dump, tmp_path, capsys, monkeypatch):
    """The converted file is written as .NAME.advcli-tmp-PID beside the output (two conversions to one output
    once shared OUT.advcli-tmp and left a corrupt file behind an exit 0), and a step file whose data page is
    corrupt is a refusal naming the file and the row (exit 2), not an internal error."""
    import advcli.formats.conversion as conversion

    d, _ = dump
    out = tmp_path / "cv.parquet"
    seen = []
    real = conversion.os.replace
    monkeypatch.setattr(conversion.os, "replace", lambda a, b: (seen.append(os.path.basename(a)), real(a, b))[1])
    code, _, err = run_main(["convert", d, "-o", out, "-q"], capsys)
    assert code == 0, err
    # (the last put in place: the rows first written, then rewritten with the footer's keys in the schema)
    assert seen[-1] == f".cv.parquet.advcli-tmp-{os.getpid()}" and all(".cv.parquet.advcli-tmp-" in n for n in seen)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # no temporary file left
    monkeypatch.setattr(conversion.os, "replace", real)
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray((d / "completions_00010.parquet").read_bytes())
    data[8:40] = b"\xff" * 32  # the first data page's bytes (the footer, at the end, still reads)
    (bad / "completions_00010.parquet").write_bytes(bytes(data))
    for cmd in (["convert", bad, "-o", tmp_path / "b.parquet"], ["run", bad, "-o", tmp_path / "b.parquet"]):
        code, _, err = run_main(cmd, capsys)
        assert code == 2 and "completions_00010.parquet: cannot read rows after row 0" in err, err
        assert "internal error" not in err


def test_convert_from_parquet_says_there_is_nothing_to_convert(dump, tmp_path, capsys):
    d, _ = dump
    code, _, err = run_main(["convert", d / "completions_00010.parquet", "--from", "parquet", "-o",
                             tmp_path / "p.parquet"], capsys)
    assert code == 2 and "advcli's own Parquet already; nothing to convert" in err and "unknown format" not in err


def test_convert_to_a_directory_names_a_file_to_give(dump, tmp_path, capsys):
    """convert writes one file: an existing directory as -o is refused with the fix (not 'add --force', which
    would then refuse it too), with or without --force, and the directory is left as it is."""
    d, _ = dump
    out = tmp_path / "outdir"
    out.mkdir()
    for extra in ([], ["--force"]):
        code, _, err = run_main(["convert", d, "-o", out, *extra], capsys)
        assert code == 2 and "is a directory" in err and "converted.parquet" in err and "--force" not in err
    assert list(out.iterdir()) == []


def test_rloo_needs_beta_zero(dump, tmp_path, capsys):
    d, _ = dump
    base = ["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set", "trainer=rloo",
            "--set", f"num_generations={G}", "--set", "reward_funcs=[accuracy_reward,format_reward]", "-q"]
    code, _, err = run_main(base, capsys)
    assert code == 2 and "beta=0.0" in err
    # the hint names the key of the flavor run, not the dump's trainer's (AReaL on a TRL dump: actor.kl_ctl)
    code, _, err = run_main(["run", d, "-o", tmp_path / "k.parquet", "--flavor", "areal", "--set", "actor.kl_ctl=0.1"],
                            capsys)
    assert code == 2 and "--set actor.kl_ctl=0" in err and "beta=" not in err, err
    code, _, err = run_main(base + ["--set", "beta=0.0"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "o.parquet")
    r = (t.column("accuracy_reward").to_numpy() + t.column("format_reward").to_numpy()).reshape(-1, G)
    exp = (r - (r.sum(1, keepdims=True) - r) / (G - 1)).ravel()  # RLOO: r_i − mean of the others
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("report", ["r.json", "r.html"])
def test_report_of_a_response_level_run(dump, tmp_path, capsys, report):
    d, _ = dump
    out, rep = tmp_path / "o.parquet", tmp_path / report
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "trl", "--set", f"num_generations={G}", "-q",
                             "--report", rep], capsys)
    assert code == 0, err
    assert rep.exists() and pq.read_schema(out).field("advantages").type == pa.float32()
    assert "advcli-import" not in rep.read_text()


def test_compare_and_stats_read_response_level_outputs(dump, tmp_path, capsys):
    d, _ = dump
    outs = []
    for scale in ("group", "none"):
        out = tmp_path / f"{scale}.parquet"
        code, _, err = run_main(["run", d, "-o", out, "--flavor", "trl", "--set", f"num_generations={G}",
                                 "--set", f"scale_rewards={scale}", "-q"], capsys)
        assert code == 0, err
        outs.append(out)
    code, out, err = run_main(["compare", *outs, "--json"], capsys)
    assert code == 0, err
    import json
    res = json.loads(out)
    assert res["a"]["path"].endswith("group.parquet") or "group.parquet" in json.dumps(res["a"])
    code, out, err = run_main(["stats", outs[0], "--json"], capsys)
    assert code == 0, err
    assert pq.read_schema(outs[0]).field("advantages").type == pa.float32()  # the outputs are not modified


def test_audit_reads_the_completions_dump_as_run_does(dump, tmp_path, capsys):
    """`advcli audit` on TRL's own completions directory (no response_mask: one logged `advantage` per
    row) recomputes through the same input edge as `run`; a row whose logged advantage was changed
    is named."""
    d, expected = dump
    args = ["--flavor", "trl", "--set", f"num_generations={G}", "--set", "reward_funcs=[accuracy_reward,format_reward]",
            "--no-search", "--json"]
    code, out, err = run_main(["audit", str(d), *args], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["agree"] and rep["logged_column"] == "advantage" and rep["logged_per"] == "row"
    assert not any(f["kind"] == "subclass" for f in rep["findings"])
    assert rep["rows"] == len(expected) and rep["inputs"] == [str(d)]

    bad = tmp_path / "bad" / "completions"
    bad.mkdir(parents=True)
    first = pd.read_parquet(d / "completions_00010.parquet")
    first.loc[5, "advantage"] = first.loc[5, "advantage"] + 0.5
    first.to_parquet(bad / "completions_00010.parquet")
    pd.read_parquet(d / "completions_00020.parquet").to_parquet(bad / "completions_00020.parquet")
    code, out, err = run_main(["audit", str(bad), *args], capsys)
    assert code == 1, err
    rep = json.loads(out)
    assert rep["rows_disagreeing"] == 1 and rep["worst"][0]["row"] == 5
    # named in the dump's own file, by its Parquet row counted from 0 as pandas' .loc[5] above
    assert rep["worst"][0]["where"] == f"{bad / 'completions_00010.parquet'}, row 5"
    assert rep["worst"][0]["abs_diff"] == pytest.approx(0.5, abs=1e-4)
    # what the dump cannot show is named as a possible cause: a subclass transforming advantages after TRL logged
    # them (TRL #7298); an agreeing audit names nothing
    unseen = [f for f in rep["findings"] if f["kind"] == "subclass"]
    assert len(unseen) == 1 and "#7298" in unseen[0]["explanation"]
    assert rep["findings"][0]["kind"] != "subclass"
    code, out, err = run_main(["audit", str(bad), *args[:-1]], capsys)
    assert code == 1 and "#7298" in " ".join((out + err).split())


def test_a_prompt_drawn_for_two_consecutive_groups(tmp_path, capsys):
    """TRL groups num_generations consecutive rows, whatever the prompts say; the importer's ids come from
    the prompt text, so a prompt drawn for two groups in a row makes one id over two blocks. Each block holding
    one prompt and another prompt filling one block, it is a prompt drawn twice, which TRL runs block by block:
    the run gives TRL's per-block advantages and a warning (it stopped before, as if the group size were set too
    small, which splits every prompt: that is still refused)."""
    d = tmp_path / "completions"
    d.mkdir()
    rng = np.random.default_rng(5)
    prompts = ["user\nsame question\nassistant\n"] * (2 * G) + ["user\nother\nassistant\n"] * G
    acc = [float(x) for x in rng.integers(0, 2, len(prompts))]
    fmt = [float(x) for x in rng.choice([0.0, 0.5, 1.0], len(prompts))]
    expected = trl_grpo(acc, fmt)  # blocks of G rows: the two "same question" groups stay apart
    pd.DataFrame({"step": [3] * len(prompts), "prompt": prompts, "completion": ["a"] * len(prompts),
                  "accuracy_reward": acc, "format_reward": fmt, "advantage": expected}).to_parquet(
        d / "completions_00003.parquet")
    args = ["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set", f"num_generations={G}",
            "--set", "reward_funcs=[accuracy_reward,format_reward]", "-q"]
    code, out, err = run_main(args[:-1] + ["--json"], capsys)
    assert code == 0, err
    assert any("spans several positional groups" in w and "drawn for consecutive groups" in w
               for w in json.loads(out)["warnings"])
    got = np.array(pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist())
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    code, out, err = run_main(args[:-1] + ["--set", "advcli.id_check=warn", "--json", "--force"], capsys)
    assert code == 0, err
    assert any("spans several positional groups" in w for w in json.loads(out)["warnings"])
    got = np.array(pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist())
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    # the first command, nothing set: the runs of 8 and 4 rows are whole numbers of groups of 4, so the dump
    # tells num_generations=4 and that the blocks, not the prompt runs, are the groups (said in the summary)
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "p.parquet", "--flavor", "trl",
                             "--set", "reward_funcs=[accuracy_reward,format_reward]", "--force"], capsys)
    assert code == 0, err
    assert "group size 4 from the dump's" in " ".join(err.split()) and "runs of 4, 8 rows" in " ".join(err.split())
    got = np.array(pq.read_table(tmp_path / "p.parquet").column("advantages").to_pylist())
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_conversation_columns(tmp_path, capsys):
    """TRL #5309: the completions table logs the conversations ([{role, content}]) instead of decoded text.
    Groups are the runs of equal conversations (here every prompt shares the system message and differs in
    the user turn), `--flavor trl` reproduces `advantage` through inspect's suggested command, and audit names
    a disagreeing row by its last user message."""
    import shlex

    d = tmp_path / "completions"
    d.mkdir()
    rng = np.random.default_rng(11)
    n_groups = 3
    prompts = [[{"role": "system", "content": "You are a careful solver."},
                {"role": "user", "content": f"What is {k} + {k}?"}] for k in range(n_groups) for _ in range(G)]
    completions = [[{"role": "assistant", "content": f"It is {i}."}] for i in range(len(prompts))]
    acc = [float(x) for x in rng.integers(0, 2, len(prompts))]
    fmt = [float(x) for x in rng.choice([0.0, 0.5, 1.0], len(prompts))]
    expected = trl_grpo(acc, fmt)
    frame = pd.DataFrame({"step": [5] * len(prompts), "prompt": prompts, "completion": completions,
                          "accuracy_reward": acc, "format_reward": fmt, "advantage": expected})
    frame.to_parquet(d / "completions_00005.parquet")
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "conversations" in out and f"{n_groups} (sizes: {n_groups}×{G})" in out
    words = shlex.split(next(ln for ln in out.splitlines() if ln.startswith("read it with")).removeprefix(
        "read it with"))
    assert f"num_generations={G}" in words
    code, _, err = run_main([*words[1:], "-o", tmp_path / "o.parquet"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "o.parquet")
    assert np.allclose(t.column("advantages").to_pylist(), expected, rtol=1e-5, atol=1e-5)
    assert json.loads(t.column("prompt")[0].as_py())[1]["content"] == "What is 0 + 0?"  # the whole conversation

    bad = tmp_path / "bad" / "completions"
    bad.mkdir(parents=True)
    frame.loc[6, "advantage"] += 0.5  # row 6: the second group's user turn
    frame.to_parquet(bad / "completions_00005.parquet")
    code, out, err = run_main(["audit", bad, "--flavor", "trl", "--set", f"num_generations={G}", "--no-search",
                               "--json"], capsys)
    assert code == 1, err
    worst = json.loads(out)["worst"][0]
    assert worst["row"] == 6 and worst["prompt"] == "What is 1 + 1?"


def test_audit_never_names_a_configuration_run_refuses_on_the_dump(tmp_path, capsys):
    """Logged advantages r − group mean (scale_rewards=none): verl's opo gives the same numbers where every
    response has the same length, but it weighs responses by their token counts, which TRL's dump lacks, so
    run refuses it there; the audit's search skips it with run's reason instead of naming it."""
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    write_step(d / "completions_00010.parquet", 10, 1)
    t = pd.read_parquet(d / "completions_00010.parquet")
    r = (t["accuracy_reward"] + t["format_reward"]).to_numpy().reshape(-1, G)
    t["advantage"] = (r - r.mean(axis=1, keepdims=True)).ravel()
    t.to_parquet(d / "completions_00010.parquet")
    code, out, err = run_main(["audit", str(d), "--flavor", "trl", "--set", f"num_generations={G}", "--json"], capsys)
    rep = json.loads(out)
    opo = [c for c in rep["search"] if "opo" in c["label"]]
    assert opo and all("response lengths" in c.get("skipped", "") for c in opo)
    assert rep["matches"] and not any("opo" in m for m in rep["matches"])
    assert any(c.get("tokens_disagreeing") == 0 and "skipped" not in c for c in rep["search"])  # others found it


def test_the_dump_reward_is_trls_float32_sum_and_integer_columns_are_not_rewards(tmp_path, capsys):
    """TRL adds its float32 rewards_per_func across a row in float32 (nansum over dim 1, grpo_trainer.py L2683
    @f2cd5771): for (−1.0, −0.8, 0.1) that is −1.6999999, not float64's −1.7, so a group of three such rows has
    std 0 in TRL and advantages 0. An integer column (log_extra's num_tool_calls) is no reward function: TRL
    writes reward columns from a float32 tensor's tolist()."""
    d = tmp_path / "completions"
    d.mkdir()
    n = 3
    rows = {"step": [1] * 2 * n, "prompt": ["p"] * n + ["q"] * n, "completion": ["c"] * 2 * n,
            "f1": [-1.0] * n + [1.0, 0.0, 1.0], "f2": [-0.8] * n + [0.5, 0.5, 0.0], "f3": [0.1] * n + [0.0, 0.0, 0.0],
            "num_tool_calls": [3, 1, 2, 0, 5, 1]}
    f32 = np.float32(np.float32(np.float32(-1.0) + np.float32(-0.8)) + np.float32(0.1))
    assert float(f32) != float(np.float32(-1.0 - 0.8 + 0.1))  # the two sums differ in float32
    r = [float(np.float32(a + b + c)) for a, b, c in zip(rows["f1"][n:], rows["f2"][n:], rows["f3"][n:])]
    mean = sum(r) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in r) / (n - 1))
    rows["advantage"] = [0.0] * n + [(x - mean) / (std + 1e-4) for x in r]
    pd.DataFrame(rows).to_parquet(d / "completions_00001.parquet")
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "nansum of f1, f2, f3 " in " ".join(out.split())  # num_tool_calls is not among them
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "trl"], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.column("reward").to_pylist()[:n] == [float(f32)] * n
    assert np.allclose(t.column("advantages").to_pylist(), rows["advantage"], rtol=1e-5, atol=1e-6)
    code, _, err = run_main(["audit", d], capsys)
    assert code == 0, err


def gdpo(funcs, weights, steps):
    """TRL's normalize_then_sum (grpo_trainer.py L2710-2720 @f2cd5771), in float64: each function z-scored in its
    group of G (Bessel std + 1e-4), the weighted sum, then z-scored over the step's batch (Bessel std + 1e-4)."""
    out = []
    for rows in steps:
        summed = np.zeros(len(rows))
        for f, w in zip(funcs, weights):
            for g in range(0, len(rows), G):
                block = np.array([f[i] for i in rows[g:g + G]])
                summed[g:g + G] += w * (block - block.mean()) / (block.std(ddof=1) + 1e-4)
        out += list((summed - summed.mean()) / (summed.std(ddof=1) + 1e-4))
    return out


def test_normalize_then_sum_reads_the_dump_functions(dump, tmp_path, capsys):
    """GDPO z-scores each function on its own: on TRL's dump advcli reads the function columns the dump shows
    (its summed reward column is not a function), with or without reward_funcs, and weights them."""
    d, _ = dump
    t = pd.concat([pd.read_parquet(f) for f in sorted(d.glob("*.parquet"))], ignore_index=True)
    steps = [list(range(0, 12)), list(range(12, 24))]
    funcs = [t["accuracy_reward"].tolist(), t["format_reward"].tolist()]
    outs = {}
    for name, extra in (("dump", []), ("named", ["--set", "reward_funcs=[accuracy_reward,format_reward]"]),
                        ("weighted", ["--set", "reward_funcs=[accuracy_reward,format_reward]",
                                      "--set", "reward_weights=[1.0,0.5]"])):
        out = tmp_path / f"{name}.parquet"
        code, _, err = run_main(["run", d, "-o", out, "--flavor", "trl", "--set", f"num_generations={G}",
                                 "--set", "multi_objective_aggregation=normalize_then_sum", *extra], capsys)
        assert code == 0, err
        outs[name] = pq.read_table(out).column("advantages").to_pylist()
        said = "reward_funcs=['accuracy_reward', 'format_reward'] from the dump's records" in " ".join(err.split())
        assert said == (name == "dump"), err  # the summary says where the functions came from
    assert outs["dump"] == outs["named"]
    assert np.allclose(outs["dump"], gdpo(funcs, (1.0, 1.0), steps), rtol=1e-5, atol=1e-5)
    assert np.allclose(outs["weighted"], gdpo(funcs, (1.0, 0.5), steps), rtol=1e-5, atol=1e-5)
    # the summed reward z-scored as one function is another result: what the dump's functions prevent
    assert not np.allclose(outs["dump"], gdpo([list(np.add(*funcs))], (1.0,), steps), atol=1e-3)


def test_normalize_then_sum_on_one_reward_column(tmp_path):
    """advcli's own Parquet with its single reward column: the one reward function TRL would run GDPO over."""
    rng = np.random.default_rng(5)
    r = [float(x) for x in rng.choice([0.0, 0.25, 1.0], 16)]
    path = tmp_path / "in.parquet"
    pd.DataFrame({"prompt_id": [f"p{i // G}" for i in range(16)], "reward": r,
                  "response_mask": [[1, 1]] * 16}).to_parquet(path)
    advcli.run(str(path), tmp_path / "o.parquet", flavor="trl",
               settings={"num_generations": G, "multi_objective_aggregation": "normalize_then_sum"})
    got = [row[0] for row in pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist()]
    assert np.allclose(got, gdpo([r], (1.0,), [list(range(16))]), rtol=1e-5, atol=1e-5)


def test_one_process_sees_the_dump_as_it_is_now(tmp_path):
    """A notebook polling a live run calls advcli.run on the same completions directory again: a step TRL
    wrote since, or a step file rewritten, is read (each is TRL's own group z-score here); the same files
    twice are converted once."""
    from advcli.formats import input_edge

    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    settings = {"num_generations": G, "reward_funcs": ["accuracy_reward", "format_reward"]}
    first = write_step(d / "completions_00010.parquet", 10, 1)
    res = advcli.run(str(d.parent), None, flavor="trl", settings=settings)
    assert res.rows == len(first)
    converted = set(input_edge.IMPORTED)
    advcli.run(str(d.parent), None, flavor="trl", settings=settings)
    assert set(input_edge.IMPORTED) == converted  # nothing changed: the conversion is reused
    second = write_step(d / "completions_00020.parquet", 20, 2)
    out = tmp_path / "o.parquet"
    res = advcli.run(str(d.parent), out, flavor="trl", settings=settings)
    assert res.rows == len(first) + len(second)
    assert np.allclose(pq.read_table(out).column("advantages").to_numpy(), first + second, rtol=1e-5, atol=1e-5)
    rewritten = write_step(d / "completions_00020.parquet", 20, 3)  # the step written again, other rewards
    assert not np.allclose(rewritten, second)
    advcli.run(str(d.parent), out, flavor="trl", settings=settings, force=True)
    assert np.allclose(pq.read_table(out).column("advantages").to_numpy(), first + rewritten, rtol=1e-5, atol=1e-5)


def test_a_string_step_is_named_against_the_formats_own_type(tmp_path, capsys):
    """A completions file whose step column holds strings: the first row is refused by the type the format
    reads step as (an integer), not by 'earlier records' (there are none)."""
    d = tmp_path / "out" / "completions"
    d.mkdir(parents=True)
    pd.DataFrame({"step": ["1"] * G, "prompt": ["p"] * G, "completion": list("abcd"), "acc": [1.0, 0.0, 0.0, 1.0],
                  "advantage": [0.0] * G}).to_parquet(d / "completions_00001.parquet")
    code, _, err = run_main(["run", str(d.parent), "-o", tmp_path / "o.parquet", "--flavor", "trl"], capsys)
    said = " ".join(err.split())
    assert code == 2 and "earlier records" not in said
    assert f"{d / 'completions_00001.parquet'}, row 0: field 'step' is '1', but this dump format reads it as int64" \
        in said


def test_a_config_given_from_the_dumps_folder_is_not_said_left_out(tmp_path, capsys):
    """The run's GRPOConfig saved in the dump's folder and given with --config is read: run and audit no longer list
    it among the dump's files left out (not a completions_{step}.parquet name); without --config it is listed."""
    d = tmp_path / "completions"
    d.mkdir()
    write_step(d / "completions_00001.parquet", 1, 3, weights=(1.0, 0.5))
    cfg = d / "grpo_config.json"
    cfg.write_text(json.dumps({"num_generations": G, "reward_weights": [1.0, 0.5]}))
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", str(d), "-o", out, "--config", str(cfg), "--flavor", "trl", "--json"], capsys)
    assert code == 0, err
    assert not [w for w in json.loads(stdout)["warnings"] if "not read" in w]
    code, stdout, err = run_main(["audit", str(d), "--config", str(cfg), "--flavor", "trl", "--json"], capsys)
    assert code == 0, err
    assert not json.loads(stdout).get("files_not_read")
    code, stdout, err = run_main(["run", str(d), "-o", out, "--force", "--flavor", "trl", "--set",
                                  f"num_generations={G}", "--json"], capsys)
    assert code == 0, err
    assert [w for w in json.loads(stdout)["warnings"] if "not read" in w and "grpo_config.json" in w]


def test_stats_of_the_dump_describes_the_logged_advantages(dump, capsys):
    """stats of a TRL completions dump describes TRL's own logged advantage column, one value per response, and says
    so (it said "no advantages")."""
    d, expected = dump
    code, out, err = run_main(["stats", str(d.parent), "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    m = rep["metrics"]
    assert m["critic/advantages/count"] == len(expected)
    assert m["critic/advantages/mean"] == pytest.approx(np.mean(expected), abs=1e-6)
    assert m["critic/advantages/min"] == pytest.approx(np.min(expected), abs=1e-6)
    assert "(column 'advantage')" in rep["note"]


def test_a_vision_language_dump_whose_prompts_log_as_one_text(tmp_path, capsys):
    """A VLM run's prompts differ by their images, which the completions log leaves out: every row of a step logs
    the same prompt text, so the prompt runs make one group of the whole step, where TRL grouped num_generations
    consecutive rows. The summary says so; audit finds the group size from the logged advantages; the group size
    given runs TRL's blocks (the run of one prompt text holding several of them), matching the log."""
    d = tmp_path / "completions"
    d.mkdir()
    rng = np.random.default_rng(11)
    n = 4 * G
    acc = [float(x) for x in rng.integers(0, 2, n)]
    fmt = [float(x) for x in rng.choice([0.0, 0.5, 1.0], n)]
    expected = trl_grpo(acc, fmt)
    pd.DataFrame({"step": [7] * n, "prompt": ["<image>\nWhat is shown?"] * n, "completion": ["a"] * n,
                  "accuracy_reward": acc, "format_reward": fmt, "advantage": expected}).to_parquet(
        d / "completions_00007.parquet")
    code, _, err = run_main(["run", str(d), "-o", tmp_path / "one.parquet", "--flavor", "trl"], capsys)
    said = " ".join(err.split())
    assert code == 0 and f"group size {n} from the dump's runs of equal prompt: every row of a step logs one " \
        "prompt" in said and "set num_generations; advcli audit finds it from the logged advantages" in said, err
    code, out, err = run_main(["audit", str(d), "--flavor", "trl", "--json"], capsys)
    assert code == 1 and f"num_generations={G}, advcli.id_check=warn" in json.loads(out)["matches"][0], out
    for route in ("cli", "library"):
        if route == "cli":
            code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                                     f"num_generations={G}"], capsys)
            assert code == 0 and f"taken as groups of {G} (num_generations={G})" in " ".join(err.split()), err
            got = pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist()
        else:
            got = advcli.run(str(d), str(tmp_path / "lib.parquet"), flavor="trl",
                             settings={"num_generations": G}).table.column("advantages").to_pylist()
        assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    code, out, err = run_main(["audit", str(d), "--flavor", "trl", "--set", f"num_generations={G}"], capsys)
    assert code == 0 and "agree: 0 of 16 rows disagree" in err, (out, err)


def _one_function_grpo(values):
    """TRL's GRPO over one reward function: (r − group mean) / (Bessel std + 1e-4), G consecutive rows."""
    out = []
    for g in range(0, len(values), G):
        block = values[g:g + G]
        mean = sum(block) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in block) / (G - 1))
        out += [(x - mean) / (std + 1e-4) for x in block]
    return out


def test_a_reward_column_named_by_the_user_is_the_reward(dump, tmp_path, capsys):
    """--column reward=accuracy_reward on a TRL dump with two reward functions: that column is the reward (it was
    silently ignored: the dump's reward_funcs were taken and both functions summed), by the command line and the
    library alike; the summary says the dump's functions were not summed."""
    d, _ = dump
    acc = [x for s in (10, 20) for x in pq.read_table(d / f"completions_000{s}.parquet").column("accuracy_reward")
           .to_pylist()]
    expected = _one_function_grpo(acc)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", str(d.parent), "-o", out, "--flavor", "trl", "--column",
                             "reward=accuracy_reward"], capsys)
    assert code == 0, err
    assert "not the dump's reward functions accuracy_reward, format_reward summed" in " ".join(err.split())
    assert np.allclose(pq.read_table(out).column("advantages").to_numpy(), expected, rtol=1e-5, atol=1e-5)
    lib = tmp_path / "lib.parquet"
    advcli.run(str(d.parent), output=str(lib), flavor="trl", columns={"reward": "accuracy_reward"})
    assert pq.read_table(lib).column("advantages").equals(pq.read_table(out).column("advantages"))
    # the same question by --set: the same numbers
    via_set = tmp_path / "set.parquet"
    code, _, err = run_main(["run", str(d.parent), "-o", via_set, "--flavor", "trl", "--set",
                             "reward_funcs=[accuracy_reward]", "-q"], capsys)
    assert code == 0, err
    assert pq.read_table(via_set).column("advantages").equals(pq.read_table(out).column("advantages"))


def test_audit_names_a_given_setting_a_reproducing_configuration_leaves_out(dump, tmp_path, capsys):
    """The logged advantages sum both reward functions; audited with reward_funcs=[accuracy_reward], the search
    finds TRL's GRPO on the dump's summed reward: its label says it leaves out the reward_funcs given."""
    d, _ = dump
    code, out, err = run_main(["audit", str(d.parent), "--flavor", "trl", "--set", "reward_funcs=[accuracy_reward]",
                               "--json"], capsys)
    assert code == 1, err
    found = [c["label"] for c in json.loads(out)["search"] if c.get("rows_disagreeing") == 0]
    trl = [lab for lab in found if lab.startswith("trl")]
    assert trl and all('without the given reward_funcs=["accuracy_reward"]' in lab for lab in trl), found


@pytest.mark.parametrize("flavor", [[], ["--flavor", "trl"]])
def test_a_renamed_completions_file_says_to_read_it_with_from(dump, tmp_path, capsys, flavor):
    """A completions file saved under another name (mytrl.parquet) is not recognised by its name: the refusal
    (missing reward, or no estimator to pick) named a single reward function's column to map, which would train on
    one function only; it names --from trl-completions first, and that reads it as the dump."""
    d, expected = dump
    renamed = tmp_path / "mytrl.parquet"
    renamed.write_bytes((d / "completions_00010.parquet").read_bytes())
    code, _, err = run_main(["run", renamed, "-o", tmp_path / "o.parquet", *flavor], capsys)
    assert code == 2 and "--from trl-completions" in " ".join(err.split()), err
    code, _, err = run_main(["run", renamed, "-o", tmp_path / "o.parquet", "--from", "trl-completions", "--set",
                             "reward_funcs=[accuracy_reward,format_reward]", "-q"], capsys)
    assert code == 0, err
    got = pq.read_table(tmp_path / "o.parquet").column("advantages").to_pylist()
    assert np.allclose(got, expected[:len(got)], rtol=1e-5, atol=1e-5)


def test_compare_estimators_names_the_estimator_a_refusal_is_about(dump, capsys):
    """compare --estimators grpo,rloo on a completions dump: TRL's RLOO puts its KL (beta 0.05) in the reward,
    which the dump cannot give; the refusal said so without saying it was rloo's."""
    d, _ = dump
    code, _, err = run_main(["compare", str(d), "--estimators", "grpo,rloo", "--set", f"num_generations={G}"], capsys)
    assert code == 2 and "--estimators grpo,rloo: rloo: " in err and "beta=0.0" in err


def test_a_reward_column_and_reward_funcs_given_together_are_refused(dump, tmp_path, capsys):
    """--column reward=NAME with reward_funcs from --set or a --config file: two answers to which column is the
    reward; the file's reward_funcs were summed while the summary said the column was the reward."""
    d, _ = dump
    cfg = tmp_path / "trl.yaml"
    cfg.write_text("reward_funcs: [accuracy_reward, format_reward]\n")
    for given in (["--config", cfg], ["--set", "reward_funcs=[accuracy_reward,format_reward]"]):
        code, _, err = run_main(["run", str(d), "-o", tmp_path / "o.parquet", "--flavor", "trl", *given,
                                 "--column", "reward=accuracy_reward"], capsys)
        assert code == 2 and "both name the reward" in err, err


def test_compare_estimators_reads_the_reward_column_given(dump, capsys):
    """compare --estimators with --column reward=NAME: each estimator ran on the dump's summed reward functions
    (the dump's reward_funcs taken, as run took them before it read the column given)."""
    d, _ = dump
    for columns, summed in (({"reward": "accuracy_reward"}, False), (None, True)):
        res = advcli.compare(str(d), estimators="grpo,rloo", flavor="trl", settings={"beta": 0.0}, columns=columns)
        assert all(("reward_funcs" in r["settings"]) == summed for r in res.report["runs"]), res.report["runs"]
    code, out, err = run_main(["compare", str(d), "--estimators", "grpo,rloo", "--flavor", "trl", "--set", "beta=0.0",
                               "--column", "reward=accuracy_reward", "--json"], capsys)
    assert code == 0, err
    assert all("reward_funcs" not in r["settings"] for r in json.loads(out)["runs"])
