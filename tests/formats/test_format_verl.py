"""verl-jsonl: verl's rollout_data_dir {step}.jsonl, built here from the field lists of spec/dumps.md
§1 (v1 trainer: uid = {prompt_uid}_{session}_{output_index}; legacy trainer: no uid, reward extras).
Expected GRPO advantages computed independently below as verl's compute_grpo_outcome_advantage does:
(s − group mean) / (unbiased group std + 1e-6), a group of one: mean 0, std 1."""
import json
import math
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main


def verl_grpo(scores, groups):
    out = []
    for s, g in zip(scores, groups):
        m = [scores[j] for j, h in enumerate(groups) if h == g]
        if len(m) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(m) / len(m)
            std = math.sqrt(sum((x - mean) ** 2 for x in m) / (len(m) - 1))
        out.append((s - mean) / (std + 1e-6))
    return out


def v1_records(step, seed, n=3):
    rng = np.random.default_rng(seed)
    recs = []
    for p in range(4):
        pu = str(uuid.UUID(int=int(rng.integers(1 << 62)) + p))
        for sess in range(n):
            recs.append({"input": f"user\nq{p}\nassistant\n", "output": f"a{sess}", "gts": str(p),
                         "score": float(rng.choice([0.0, 0.5, 1.0])), "step": step, "uid": f"{pu}_{sess}_0"})
    return recs


def write(path, recs):
    with open(path, "w") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")


@pytest.mark.parametrize("chunk", ["4096", "5"])
def test_v1_grpo(tmp_path, capsys, chunk):
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1) + v1_records(2, 2)
    write(d / "1.jsonl", recs[:12])
    write(d / "2.jsonl", recs[12:])
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                             "--chunk-rows", chunk, "-q"], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert t.schema.field("advantages").type == pa.float32()
    exp = verl_grpo([r["score"] for r in recs], [(r["step"], r["uid"].rsplit("_", 2)[0]) for r in recs])
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    assert t.column("prompt_id").to_pylist()[0] == recs[0]["uid"].rsplit("_", 2)[0]


@pytest.mark.parametrize("left", ["empty", "gzip", "zstd"])
def test_a_step_file_left_out_is_a_warning_of_the_run(left, tmp_path, capsys):
    """A step file the run cannot read (zero bytes: the trainer still writing it; gzip-compressed) was left out with
    no word from `run` (convert and inspect list it): 12 of 24 rows, exit 0. The run still runs on the rest, as
    before, and its summary and --json report say which file was left out and why."""
    import gzip

    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1) + v1_records(2, 2)
    write(d / "1.jsonl", recs[:12])
    if left == "empty":
        (d / "2.jsonl").write_text("")
        name, why = "2.jsonl", "(empty)"
    elif left == "gzip":
        (d / "2.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in recs[12:]).encode()))
        name, why = "2.jsonl.gz", "(compressed with gzip: advcli reads the uncompressed files"
    else:  # zstd: named as compressed, not "not a verl file name" (the gzip message said advcli reads .jsonl.zst)
        import zstandard

        data = "".join(json.dumps(r) + "\n" for r in recs[12:]).encode()
        (d / "2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
        name, why = "2.jsonl.zst", "(compressed with zstd: verl rollout_data_dir {step}.jsonl is read uncompressed"
    out = tmp_path / "o.parquet"
    code, stdout, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                                  "--json"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["rows"] == 12
    said = [w for w in report["warnings"] if w.startswith("left out of the dump, not read: ")]
    assert len(said) == 1 and f"rollout_data/{name} {why}" in said[0], report["warnings"]
    exp = verl_grpo([r["score"] for r in recs[:12]], [(r["step"], r["uid"].rsplit("_", 2)[0]) for r in recs[:12]])
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


def test_a_line_not_in_utf8_is_named_as_such(tmp_path, capsys):
    """A Latin-1 byte in a line: the message was json's "invalid JSON ... at column ?" with a hint about a writer
    stopped mid-write; it now says the line is not UTF-8, where, and how to convert it."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1)
    recs[3]["input"] = "caf\u00e9"
    (d / "1.jsonl").write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode("latin-1") + b"\n" for r in recs))
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and "rollout_data/1.jsonl:4: not UTF-8: byte 0xe9 at byte " in err, err
    assert "column ?" not in err and "iconv -f latin1 -t utf-8" in err


def test_a_glob_of_step_files_is_one_dump(tmp_path, capsys):
    """'DIR/*.jsonl' (quoted, as the README's globs): the files it matches are one dump, as their directory is —
    one output, the same numbers; a pattern matching some of them reads those only."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1) + v1_records(2, 2)
    write(d / "1.jsonl", recs[:12])
    write(d / "2.jsonl", recs[12:])
    (d / "notes.txt").write_text("not a dump")
    args = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "-q"]
    code, _, err = run_main(["run", str(d / "*.jsonl"), "-o", tmp_path / "g.parquet", *args], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", d, "-o", tmp_path / "d.parquet", *args], capsys)
    assert code == 0, err
    assert pq.read_table(tmp_path / "g.parquet").equals(pq.read_table(tmp_path / "d.parquet"))
    code, _, err = run_main(["run", str(d / "2*.jsonl"), "-o", tmp_path / "2.parquet", *args], capsys)
    assert code == 0, err
    t = pq.read_table(tmp_path / "2.parquet")
    assert t.num_rows == 12
    exp = verl_grpo([r["score"] for r in recs[12:]], [(r["step"], r["uid"].rsplit("_", 2)[0]) for r in recs[12:]])
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    code, _, err = run_main(["run", str(d / "9*.jsonl"), "-o", tmp_path / "9.parquet", *args], capsys)
    assert code == 2 and "9*.jsonl: no file matches this pattern" in err


def multi_output_records(step=5):
    """Two prompts of three sessions each; a session has 1 to 3 agent-loop outputs, sorted as verl's v1
    writer sorts them (prompt uid, session, output index). Earlier outputs get rewards that differ from
    their session's last output, so a run that used them would show."""
    recs = []
    outputs = {("p0", 0): 3, ("p0", 1): 1, ("p0", 2): 2, ("p1", 0): 2, ("p1", 1): 2, ("p1", 2): 1}
    final = {("p0", 0): 1.0, ("p0", 1): 0.0, ("p0", 2): 0.5, ("p1", 0): 0.0, ("p1", 1): 1.0, ("p1", 2): 1.0}
    for (p, s), n in outputs.items():
        pu = f"3f2b0c9e-8d1a-4c55-9e2f-0a1b2c3d4e5{p[1]}"
        for k in range(n):
            score = final[(p, s)] if k == n - 1 else 7.0 + k
            recs.append({"input": f"q{p}", "output": f"{p} s{s} turn{k}", "gts": "1", "score": score, "step": step,
                         "uid": f"{pu}_{s}_{k}"})
    return recs


def test_v1_multi_output_keeps_every_output(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    recs = multi_output_records()
    write(d / "5.jsonl", recs)
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert [r["output"] for r in t] == [r["output"] for r in recs] and [r["reward"] for r in t] == [
        r["score"] for r in recs]
    assert [r["is_last_step"] for r in t] == [i + 1 == len(recs) or recs[i + 1]["uid"].rsplit("_", 1)[0]
                                             != r["uid"].rsplit("_", 1)[0] for i, r in enumerate(recs)]
    assert "4 agent-loop session(s) with several outputs" in err


def test_v0_text_grouping_extras_and_nan(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    recs = [{"input": f"q{i % 2}", "output": "x", "gts": "1", "score": [1.0, 0.0, 1.0, 0.0][i], "step": 3,
             "acc": bool(i % 3), "pred": str(i)} for i in range(4)]
    write(d / "3.jsonl", recs)
    (d / "3.jsonl").write_text((d / "3.jsonl").read_text().replace('"score": 0.0', '"score": NaN', 1))
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert t[0]["prompt_id"] == t[2]["prompt_id"] != t[1]["prompt_id"]
    assert math.isnan(t[1]["reward"]) and t[0]["acc"] == 0.0 and t[3]["pred"] == "3"  # booleans as 0/1
    assert "identical input text" in err


def test_bad_uid_and_step(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    write(d / "1.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": 1, "uid": "nounderscore"}])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "1.jsonl:1: field 'uid'" in err
    write(d / "1.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": 1},
                          {"input": "q", "output": "a", "score": "high", "step": 1}])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "1.jsonl:2: field 'score' is 'high'" in err
    assert not (tmp_path / "c.parquet").exists()


def test_inspect(tmp_path, capsys):
    d = tmp_path / "rollout"
    d.mkdir()
    write(d / "7.jsonl", v1_records(7, 3))
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "verl-jsonl" in out and "uid without its last two" in out and "response-level" in out


def test_python_api_reads_dumps(tmp_path):
    import advcli

    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(4, 5)
    write(d / "4.jsonl", recs)
    res = advcli.run(str(d), str(tmp_path / "o.parquet"), flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    assert res.rows == len(recs)
    t = pq.read_table(tmp_path / "o.parquet")
    exp = verl_grpo([r["score"] for r in recs], [r["uid"].rsplit("_", 2)[0] for r in recs])
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


def test_converted_parquet_runs_like_the_dump(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "2.jsonl", v1_records(2, 9))
    conv = tmp_path / "conv.parquet"
    code, _, err = run_main(["convert", d, "-o", conv], capsys)
    assert code == 0, err
    assert "response_mask" not in pq.read_schema(conv).names
    outs = []
    for src in (d, conv):
        out = tmp_path / f"o{len(outs)}.parquet"
        code, _, err = run_main(["run", src, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo",
                                 "-q"], capsys)
        assert code == 0, err
        outs.append(pq.read_table(out))
    assert outs[0].column("advantages").equals(outs[1].column("advantages"))
    assert outs[1].schema.field("advantages").type == pa.float32() and "response_mask" not in outs[1].schema.names
    assert pq.read_schema(conv).names == [n for n in outs[1].schema.names if n not in ("advantages", "returns")]
    # no flavor: verl's GRPO, said to be chosen from the dump's group ids (its uid), not from a prompt_id it lacks
    for src in (d, conv):
        code, _, err = run_main(["run", src, "-o", tmp_path / "n.parquet", "--force"], capsys)
        assert code == 0 and "verl grpo (the dump has group ids)" in " ".join(err.split()), err


def test_pipeline_errors_name_the_dump_line(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    recs = v1_records(2, 2)
    recs[4]["score"] = float("inf")  # json writes the Infinity literal, as verl's writer does
    write(d / "2.jsonl", recs)
    assert "Infinity" in (d / "2.jsonl").read_text()
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl",
                             "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2, err
    said = f"{d / '2.jsonl'}:5: column 'reward', row 16 of the dump"
    assert said in err and "advcli-import" not in err
    # validate --json and the library say it in the same words (they named the deleted temporary Parquet)
    code, out, err = run_main(["validate", d, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--json"],
                              capsys)
    assert code == 2 and json.loads(out)["error"].startswith(said), out
    import advcli
    from advcli.errors import AdvcliError

    with pytest.raises(AdvcliError) as e:
        advcli.run(str(d), None, flavor="verl", settings={"algorithm.adv_estimator": "grpo"})
    assert e.value.message.startswith(said) and "advcli-import" not in str(e.value)


def run_multi_output(tmp_path, capsys, estimator: str):
    """(dump directory, records, output table) of `advcli run DUMP --flavor verl` with ``estimator`` on a
    v1 multi-output dump (multi_output_records)."""
    d = tmp_path / "r"
    d.mkdir()
    recs = multi_output_records()
    write(d / "5.jsonl", recs)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", f"algorithm.adv_estimator={estimator}",
                             "-q"], capsys)
    assert code == 0, err
    return d, recs, pq.read_table(out)


def test_v1_multi_output_grpo_gives_every_output_its_session_advantage(tmp_path, capsys):
    """verl v1 (trainer_base._compute_advantage → v1/utils.py compute_advantage_for_multi_trajectories,
    L148-193 @1dda039b): GRPO runs on the last output of each {prompt_uid}_{session} and every output of
    the session gets that advantage. Here: prompt p0's last outputs [1, 0, 0.5], p1's [0, 1, 1]
    (mean, unbiased std, + 1e-6), broadcast to the 3 + 1 + 2 and 2 + 2 + 1 outputs."""
    d, recs, t = run_multi_output(tmp_path, capsys, "grpo")
    assert t.num_rows == len(recs) and t.column("output").to_pylist() == [r["output"] for r in recs]
    sd0 = math.sqrt(((1 - 0.5) ** 2 + 0.5 ** 2 + 0) / 2)  # p0: mean 0.5
    sd1 = math.sqrt(((0 - 2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # p1: mean 2/3
    session = {"p0 s0": 0.5 / (sd0 + 1e-6), "p0 s1": -0.5 / (sd0 + 1e-6), "p0 s2": 0.0,
               "p1 s0": -(2 / 3) / (sd1 + 1e-6), "p1 s1": (1 / 3) / (sd1 + 1e-6), "p1 s2": (1 / 3) / (sd1 + 1e-6)}
    exp = [session[r["output"].rsplit(" ", 1)[0]] for r in recs]
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    assert np.allclose(t.column("returns").to_pylist(), exp, rtol=1e-5, atol=1e-6)
    conv = tmp_path / "c.parquet"  # `advcli convert` then `advcli run` on its Parquet: the same
    code, _, err = run_main(["convert", d, "-o", conv], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", conv, "-o", tmp_path / "o2.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(tmp_path / "o2.parquet").column("advantages").to_pylist(), exp, rtol=1e-5,
                       atol=1e-6)
    code, out, err = run_main(["run", d, "-o", tmp_path / "o3.parquet", "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=grpo", "--json"], capsys)  # the summary says so
    assert code == 0, err
    assert any(x.startswith("sessions: the dump's agent-loop sessions with several outputs: grpo computes each "
                            "session's advantage from its last output") for x in json.loads(out)["from_dump"])


def test_v1_multi_output_other_estimators_see_every_output(tmp_path, capsys):
    """Any estimator but GRPO: verl gives every output to compute_advantage as a row of its prompt's group
    (uid = the prompt uid, agent_loop_tq.py L154-200 @1dda039b). RLOO: r_i − mean of the group's other rows
    (verl compute_rloo_outcome_advantage: r_i·n/(n−1) − mean·n/(n−1))."""
    _, recs, t = run_multi_output(tmp_path, capsys, "rloo")
    groups = [r["uid"].rsplit("_", 2)[0] for r in recs]
    exp = []
    for r, g in zip(recs, groups):
        others = [q["score"] for q, h in zip(recs, groups) if h == g]
        exp.append(r["score"] - (sum(others) - r["score"]) / (len(others) - 1))
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-5)


def test_v1_sessions_out_of_order_are_refused(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    recs = multi_output_records()
    write(d / "5.jsonl", [recs[1], recs[0]] + recs[2:])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and "5.jsonl:2: uid" in err and "sorted by index" in err, err
    write(d / "5.jsonl", recs[:2] + recs[3:] + [recs[2]])
    code, _, err = run_main(["convert", d, "-o", tmp_path / "c.parquet"], capsys)
    assert code == 2 and f"5.jsonl:{len(recs)}: uid" in err and "already ended" in err, err
    assert not (tmp_path / "c.parquet").exists()


def test_two_files_of_one_step_are_refused(tmp_path, capsys):
    """verl opens {step}.jsonl in "w" mode: one file a step. Two files whose rows carry the same step
    (a renamed copy, a second run) would merge into one batch: refused, naming both."""
    d = tmp_path / "r"
    d.mkdir()
    write(d / "3.jsonl", v1_records(3, 1))
    write(d / "4.jsonl", v1_records(3, 2))
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
                            capsys)
    assert code == 2 and f"{d / '4.jsonl'}:1: step 3 is already in {d / '3.jsonl'}" in err, err
    assert "Traceback" not in err and not out.exists()


def test_v1_reward_extras_are_reward_components(tmp_path, capsys):
    """verl #7588: the v1 dump carries the reward function's extra keys again (acc, pred, ... beside score).
    Built as the v1 trainer writes it with the extras: acc a boolean, fmt a float, pred text. The numeric ones
    are reward components: NeMo's GDPO on them (per component the leave-one-out GRPO, weighted sum, z-score
    over the batch's rows), and acc alone as the reward (verl GRPO)."""
    import shlex

    from test_format_nemo import nemo_grpo

    d = tmp_path / "rollout_data"
    d.mkdir()
    rng = np.random.default_rng(7)
    recs = v1_records(1, 3)
    for r in recs:
        acc = bool(rng.integers(0, 2))
        fmt = float(rng.choice([0.0, 0.5, 1.0]))
        r.update(acc=acc, fmt=fmt, pred=f"\\boxed{{{int(acc)}}}", score=float(acc) + 0.5 * fmt)
    write(d / "1.jsonl", recs)
    code, out, err = run_main(["inspect", d], capsys)
    assert code == 0, err
    assert "acc, fmt numeric" in out and "pred kept" in out and "reward.components=[acc,fmt]" in out
    words = shlex.split(next(ln for ln in out.splitlines() if ln.startswith("read it with")).removeprefix(
        "read it with"))
    groups = [r["uid"].rsplit("_", 2)[0] for r in recs]
    o = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", o, "--flavor", "advcli", "--set", "estimator.name=gdpo_loo", "--set",
                             "reward.components=[acc,fmt]", "--set", "estimator.weights=[1.0,0.5]", "-q"], capsys)
    assert code == 0, err
    total = [x + 0.5 * y for x, y in zip(nemo_grpo([float(r["acc"]) for r in recs], groups),
                                          nemo_grpo([r["fmt"] for r in recs], groups))]
    mean = sum(total) / len(total)
    std = math.sqrt(sum((x - mean) ** 2 for x in total) / (len(total) - 1))
    exp = [(x - mean) / std for x in total]
    t = pq.read_table(o)
    assert np.allclose(t.column("advantages").to_pylist(), exp, rtol=1e-4, atol=1e-5)
    assert t.column("acc").to_pylist() == [float(r["acc"]) for r in recs]
    assert t.column("pred").to_pylist()[0] == recs[0]["pred"]
    # the accuracy column as the reward, through inspect's command: verl GRPO of acc alone
    code, _, err = run_main([*words[1:], "-o", o, "--column", "reward=acc", "--force", "-q"], capsys)
    assert code == 0, err
    exp = verl_grpo([float(r["acc"]) for r in recs], groups)
    assert np.allclose(pq.read_table(o).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


def test_audit_of_a_dump_that_logs_no_advantages(tmp_path, capsys):
    """verl's rollout_data_dir holds scores, never advantages: audit says so first, instead of refusing the
    default estimator and then, after the fix it names, the missing column."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 0))
    code, _, err = run_main(["audit", d], capsys)
    err = " ".join(err.split())
    assert code == 2 and "holds no logged advantages" in err and "nothing to audit" in err and "Traceback" not in err
    code, _, err = run_main(["audit", d, "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and "holds no logged advantages" in " ".join(err.split())


def test_a_field_only_in_later_rows_is_said_and_a_field_never_set_is_not(tmp_path):
    """The converted schema is fixed by the first batch of rows: a field that first holds a value after it is
    left out, and the note says which; a field that is null in every row holds nothing, and no note claims it
    was lost."""
    from advcli.formats.conversion import convert

    recs = v1_records(1, 3)
    for i, r in enumerate(recs):
        r["never"] = None
        r["late"] = 7 if i == len(recs) - 1 else None
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", recs)
    info = convert(str(d), str(tmp_path / "c.parquet"), batch_rows=5)
    said = [n for n in info.notes if "first appear after" in n]
    assert len(said) == 1 and said[0].startswith("field(s) late first appear after the first 5 rows"), info.notes
    names = pq.read_table(tmp_path / "c.parquet").column_names
    assert "late" not in names and "never" not in names and "output" in names


@pytest.mark.parametrize("kind", ["dangling", "fifo"])
def test_a_broken_link_or_fifo_among_the_dumps_is_refused_by_every_command(tmp_path, capsys, kind):
    """A step file that is a symbolic link to a file gone (raised FileNotFoundError: exit 1) or a FIFO (its read
    waited forever): every command refuses it, naming it (and a link's missing target)."""
    import os

    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    bad = d / "2.jsonl"
    if kind == "dangling":
        os.symlink(tmp_path / "gone" / "x", bad)
        said = [f"{bad}: a broken symbolic link", str(tmp_path / "gone" / "x"), "does not exist"]
    else:
        os.mkfifo(bad)
        said = [f"{bad}: not a regular file", "FIFO"]
    out = tmp_path / "o.parquet"
    flavor = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
    for argv in (["run", d, "-o", out, *flavor], ["validate", d, *flavor], ["convert", d, "-o", out],
                 ["inspect", d], ["stats", d], ["filter", d, "-o", out, "--drop-uniform"]):
        code, _, err = run_main(argv, capsys)
        assert code == 2 and all(s in err for s in said), (argv[0], err)
        assert "internal error" not in err and not out.exists()


def test_a_row_without_uid_among_rows_with_uids_is_refused(tmp_path, capsys):
    """A `"uid": null` row among v1 rows became a group of one (grouped by its input text), and convert said
    'no uid (legacy verl trainer)': refused, naming the row's line and the field. A dump where no row has a uid
    is still grouped by input text (test_v0_text_grouping_extras_and_nan)."""
    d = tmp_path / "r"
    d.mkdir()
    out = tmp_path / "c.parquet"
    recs = v1_records(1, 1)
    recs[1]["uid"] = None
    write(d / "1.jsonl", recs)
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 2 and f"{d / '1.jsonl'}:2: field 'uid' is null, but {d / '1.jsonl'}:1 has uid" in err, err
    assert "legacy" not in err.split("hint")[0] and not out.exists()
    # the null row first, the rows with a uid in a later step's file
    recs = v1_records(1, 1)
    recs[0]["uid"] = None
    write(d / "1.jsonl", recs[:1])
    write(d / "2.jsonl", v1_records(2, 2))
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
                            capsys)
    assert code == 2 and f"{d / '1.jsonl'}:1: field 'uid' is null, but {d / '2.jsonl'}:1 has uid" in err, err
    # a row without the field among rows that have it, in one file
    (d / "2.jsonl").unlink()
    recs = v1_records(1, 1)
    del recs[3]["uid"]
    write(d / "1.jsonl", recs)
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 2 and f"{d / '1.jsonl'}:4: field 'uid' is missing, but {d / '1.jsonl'}:1 has uid" in err, err
    assert not out.exists()


def test_a_legacy_step_file_beside_v1_step_files_is_read_each_its_way(tmp_path, capsys):
    """A run resumed across a verl upgrade: steps without uid (grouped by input text) then steps with uids."""
    d = tmp_path / "r"
    d.mkdir()
    write(d / "1.jsonl", [{k: v for k, v in r.items() if k != "uid"} for r in v1_records(1, 1)])
    write(d / "2.jsonl", v1_records(2, 2))
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["convert", d, "-o", out], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pylist()
    assert len({r["prompt_id"] for r in t[:12]}) == 4 and len({r["prompt_id"] for r in t[12:]}) == 4


def test_a_record_of_another_step_than_its_file_is_refused(tmp_path, capsys):
    """verl writes {step}.jsonl with every record's step that step. A row of 1.jsonl carrying "step": 7 was its own
    step: its prompt's group was split and the row got a group-of-one advantage, exit 0. Refused, naming the line
    and both steps."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1)
    recs[1]["step"] = 7
    write(d / "1.jsonl", recs)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
                            capsys)
    assert code == 2 and f"{d / '1.jsonl'}:2: field 'step' is 7, but the file is step 1's" in err, err
    assert "internal error" not in err and not out.exists()


def test_a_step_file_whose_first_line_is_no_record_is_said_damaged(tmp_path, capsys):
    """A file named as verl's step file whose first line is not a JSON object: named, with its line, as not
    what its name says; not the --from advice (the name already chose the format)."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 3))
    (d / "2.jsonl").write_bytes(b"\x00\x13garbage\n" + b"".join(json.dumps(r).encode() + b"\n"
                                                             for r in v1_records(2, 4)))
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    err = " ".join(err.split())
    assert code == 2 and "2.jsonl:1: not a verl" in err and "its first record does not parse" in err
    assert "its content is not: a damaged file" in err and "--from" not in err


def test_a_line_of_nul_bytes_is_named_as_zeros(tmp_path, capsys):
    """A block of NUL bytes where lines should be (a file not fully written): it was said 'not UTF-8 ...
    (truncated data)' with an iconv hint, though NUL is valid UTF-8; it is said zeros, with the line."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    lines = [json.dumps(r).encode() + b"\n" for r in v1_records(1, 1)]
    lines.insert(3, b"\0" * 200 + b"\n")
    (d / "1.jsonl").write_bytes(b"".join(lines))
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and "1.jsonl:4: 200 NUL (zero) byte(s) in the line" in err and "iconv" not in err, err


def test_a_parquet_file_under_a_jsonl_name_is_said_to_hold_parquet(tmp_path, capsys):
    """A Parquet file named 1.jsonl ('not a verl file ... a damaged file, or one written by something else') is
    said to hold Parquet, as a JSON file named .parquet is said to hold JSON."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    (d / "1.jsonl").write_bytes(open(SAMPLE, "rb").read())
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl"], capsys)
    assert code == 2 and "it holds Parquet under a JSON Lines name" in err, err


def test_v1_session_whose_final_output_has_no_valid_token_gets_zero(tmp_path, capsys):
    """compute_advantage_for_multi_trajectories (verl/trainer/ppo/v1/utils.py L207-213 @1dda039b) reads each session's
    value at its final output's response_mask.argmax: column 0 when that mask is all 0, where the masked GRPO
    advantage is 0, so every output of the session gets 0, while the final output's score still counts in its
    group (grouping.trajectory_copy=first_valid). Prompt a: session 0 = outputs [mask 11, reward 0], [mask 00,
    reward 1 (final)]; session 1 = [mask 11, reward 0 (final)]: the finals' GRPO is ±0.5/(√0.5 + 1e-6)."""
    src = tmp_path / "s.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "a"], "reward": pa.array([0.0, 1.0, 0.0], pa.float32()),
                             "response_mask": pa.array([[1, 1], [0, 0], [1, 1]], pa.list_(pa.int8())),
                             "is_last_step": [False, True, True]}), src)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    for copy, first in (("first_valid", 0.0), ("own_mask", a)):
        out = tmp_path / f"{copy}.parquet"
        code, _, err = run_main(["run", src, "-o", out, "--flavor", "advcli", "--set", "estimator.name=grpo", "--set",
                                 "grouping.trajectories=last_step", "--set", f"grouping.trajectory_copy={copy}", "-q"],
                                capsys)
        assert code == 0, err
        got = pq.read_table(out).column("advantages").to_pylist()
        assert np.allclose(got[0], [first, first], atol=1e-6) and got[1] == [0.0, 0.0], (copy, got)
        assert np.allclose(got[2], [-a, -a], rtol=1e-6), (copy, got)


def test_v1_dump_takes_an_explicit_trajectories_setting(tmp_path, capsys):
    """--flavor advcli on a v1 dump: grouping.trajectories=none, given, makes every output a row of its prompt's
    group (the legacy trainer's GRPO); the dump's implied last_step broadcast no longer overrides it."""
    d = tmp_path / "r"
    d.mkdir()
    recs = multi_output_records()
    write(d / "5.jsonl", recs)
    out = tmp_path / "o.parquet"
    code, _, err = run_main(["run", d, "-o", out, "--flavor", "advcli", "--set", "estimator.name=grpo", "--set",
                             "grouping.trajectories=none", "-q"], capsys)
    assert code == 0, err
    exp = verl_grpo([r["score"] for r in recs], [r["uid"].rsplit("_", 2)[0] for r in recs])
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), exp, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("last, warned", [([False, True, True], True), ([True, True, True], False)])
def test_an_unread_is_last_step_column_is_said_only_where_it_would_matter(tmp_path, capsys, last, warned):
    """--flavor verl reads every row as a row of its group; a Parquet file's is_last_step column is said to be unread
    (with the settings that read it) where some row is not its session's last: a session of several outputs. Where
    every row is its session's last (every single-turn v1 dump), reading it would change nothing: no warning."""
    src = tmp_path / "s.parquet"
    pq.write_table(pa.table({"prompt_id": ["a", "a", "a"], "reward": pa.array([0.0, 1.0, 0.0], pa.float32()),
                             "response_mask": pa.array([[1, 1], [1, 0], [1, 1]], pa.list_(pa.int8())),
                             "is_last_step": last}), src)
    code, out, err = run_main(["run", src, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                               "algorithm.adv_estimator=grpo", "--json"], capsys)
    assert code == 0, err
    said = [w for w in json.loads(out)["warnings"] if "(is_last_step) is not read" in w]
    assert bool(said) == warned, said
    if warned:
        assert "--set grouping.trajectories=last_step" in said[0]


@pytest.mark.parametrize("where", ["parent", "dump", None])
def test_the_runs_hydra_config_beside_the_dump_is_read(tmp_path, capsys, where):
    """A run whose trainer.rollout_data_dir sits in its Hydra output directory has .hydra/config.yaml (Hydra's
    resolved configuration of the run) beside the dump or one level up: its keys are the run's settings, as AReaL's
    trial config.yaml is (Dr.GRPO here: norm_adv_by_std_in_grpo false gives r − mean). Elsewhere the summary says
    verl's defaults run and how to give the run's configuration. A --set still wins over the file."""
    import yaml

    run = tmp_path / "outputs"
    d = run / "rollout_data"
    d.mkdir(parents=True)
    recs = v1_records(1, 3)
    write(d / "1.jsonl", recs)
    if where is not None:
        hydra = (run if where == "parent" else d) / ".hydra"
        hydra.mkdir()
        cfg = {"algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False, "gamma": 1.0},
               "actor_rollout_ref": {"rollout": {"n": 3}}, "trainer": {"rollout_data_dir": str(d)}}
        (hydra / "config.yaml").write_text(yaml.safe_dump(cfg))
    groups = [r["uid"].rsplit("_", 2)[0] for r in recs]
    scores = [r["score"] for r in recs]
    means = {g: np.mean([s for s, h in zip(scores, groups) if h == g]) for g in groups}
    dr_grpo = [s - means[g] for s, g in zip(scores, groups)]
    out = tmp_path / "o.parquet"
    flavor = ["--flavor", "verl"] if where else []  # (verl's default gae, not the run's choice, is refused)
    code, stdout, err = run_main(["run", d, "-o", out, *flavor, "--json"], capsys)
    assert code == 0, err
    got = pq.read_table(out).column("advantages").to_pylist()
    said = " ".join(json.loads(stdout)["from_dump"])
    if where is None:
        assert np.allclose(got, verl_grpo(scores, groups), rtol=1e-5, atol=1e-6)
        assert "no configuration of the run beside the dump" in said and ".hydra/config.yaml" in said
        return
    assert np.allclose(got, dr_grpo, rtol=1e-5, atol=1e-6)
    assert "from the run's saved configuration" in said and str(hydra / "config.yaml") in said
    code, _, err = run_main(["run", d, "-o", out, "--force", "--flavor", "verl", "--set",
                             "algorithm.norm_adv_by_std_in_grpo=true", "-q"], capsys)
    assert code == 0, err
    assert np.allclose(pq.read_table(out).column("advantages").to_pylist(), verl_grpo(scores, groups), rtol=1e-5,
                       atol=1e-6)


def test_run_says_a_legacy_dump_is_grouped_by_its_input_text(tmp_path, capsys):
    """A dump without uid (verl's legacy trainer, a validation dump before v1) is grouped by identical input text,
    so two dataset rows with the same prompt make one group: run's summary says so (only inspect and convert
    did), beside the numbers it gives."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = [{k: v for k, v in r.items() if k != "uid"} for r in v1_records(1, 3)]
    write(d / "1.jsonl", recs)
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--flavor", "verl", "--set",
                             "algorithm.adv_estimator=grpo"], capsys)
    assert code == 0 and "grouped by identical input text" in " ".join(err.split()), err


def test_a_from_that_names_another_format_says_so(tmp_path, capsys):
    """--from nemo-jsonl on verl's dump: the hint said 'force the format with --from', which the user had done; it
    names the format forced and how to have it recognised."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    code, _, err = run_main(["run", d, "--from", "nemo-jsonl", "-o", tmp_path / "o.parquet"], capsys)
    said = " ".join(err.split())
    assert code == 2 and "force the format with --from" not in said
    assert "--from nemo-jsonl reads a NeMo RL" in said and "leave --from out" in said


def test_files_a_shell_glob_expanded_to_one_output_file_say_to_quote_it(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    write(d / "2.jsonl", v1_records(2, 2))
    code, _, err = run_main(["run", d / "1.jsonl", d / "2.jsonl", "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "quote a glob ('DIR/*.jsonl')" in " ".join(err.split())
    code, _, err = run_main(["run", str(d / "*.jsonl"), "-o", tmp_path / "o.parquet", "--set",
                             "algorithm.adv_estimator=grpo", "-q"], capsys)
    assert code == 0, err  # the quoted glob: one dump, one output


def test_stats_names_a_nan_reward_by_its_file_and_line_as_run_does(tmp_path, capsys):
    d = tmp_path / "rollout_data"
    d.mkdir()
    write(d / "1.jsonl", v1_records(1, 1))
    recs = v1_records(2, 2)
    recs[3]["score"] = float("nan")
    write(d / "2.jsonl", recs)
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet", "--set", "algorithm.adv_estimator=grpo"], capsys)
    assert code == 2 and "2.jsonl:4:" in err
    n = len(v1_records(1, 1))
    code, out, err = run_main(["stats", d, "--json"], capsys)
    assert code == 0, err
    assert any(f"(the first: {d / '2.jsonl'}:4: row {n + 3} of the dump)" in w for w in json.loads(out)["warnings"])


def test_a_json_line_that_ends_before_its_value_says_so(tmp_path, capsys):
    """`{"broken": ` then a newline: json reports line 2, column 1 (in the newline), which read 'at column 1';
    the error lies at the end of the line."""
    d = tmp_path / "rollout_data"
    d.mkdir()
    recs = v1_records(1, 1)
    (d / "1.jsonl").write_text(json.dumps(recs[0]) + '\n{"broken": \n' + json.dumps(recs[1]) + "\n")
    code, _, err = run_main(["run", d, "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "1.jsonl:2: invalid JSON: Expecting value at the end of the line" in err, err
