"""A Parquet table of one value a row in every column (rewards a CSV or a DataFrame was saved as: no token lists)
runs as a trainer's response-level dump does: a one-token mask a row, scalar advantages, no token figures.

Expected values from the formulas, worked in float64 here: TRL's GRPO (r − group mean) / (unbiased group std +
1e-4) over blocks of num_generations rows (grpo_trainer.py _generate_and_score_completions); verl's RLOO
(r − mean of the others) = (r − mean)·n/(n − 1) (core_algos.compute_rloo_outcome_advantage @1dda039b).
"""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

REWARDS = [1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 1.0, 1.0, 0.75]


def _table(path, **extra):
    cols = {"uid": pa.array(["a"] * 3 + ["b"] * 3 + ["c"] * 3), "reward": pa.array(REWARDS),
            "question": pa.array(["q"] * 9), "tags": pa.array([["x", "y"]] * 9, pa.list_(pa.string()))}
    pq.write_table(pa.table({**cols, **extra}), path)
    return path


def test_trl_grpo_on_a_table_of_rewards_gives_scalar_advantages(tmp_path):
    src = _table(tmp_path / "rewards.parquet")
    before = (tmp_path / "rewards.parquet").read_bytes()
    out = tmp_path / "out.parquet"
    r = run_cli("run", src, "-o", out, "--flavor", "trl", "--set", "num_generations=3")
    assert r.returncode == 0, r.stderr
    assert "response-level table" in r.stderr and "no token data" in r.stderr  # (the summary: stderr)
    got = pq.read_table(out)
    blocks = np.array(REWARDS).reshape(3, 3)
    want = ((blocks - blocks.mean(1, keepdims=True)) / (blocks.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()
    assert got.column_names == ["uid", "reward", "question", "tags", "advantages", "returns"]
    assert got.schema.field("advantages").type == pa.float32()
    assert got.schema.field("tags").type == pa.list_(pa.string())  # a list of text is not token data
    np.testing.assert_allclose(got.column("advantages").to_numpy(), want, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "rewards.parquet").read_bytes() == before  # the input is left as it was

    # the output read back is the same kind of table: run again with verl's RLOO, grouping by the uid column
    again = tmp_path / "again.parquet"
    r = run_cli("run", out, "-o", again, "--flavor", "verl", "--set", "algorithm.adv_estimator=rloo",
                "--column", "prompt_id=uid")
    assert r.returncode == 0, r.stderr
    rloo = ((blocks - blocks.mean(1, keepdims=True)) * 3 / 2).ravel()
    np.testing.assert_allclose(pq.read_table(again).column("advantages").to_numpy(), rloo, rtol=1e-5, atol=1e-6)


def test_a_table_says_how_to_name_its_group_column(tmp_path):
    src = _table(tmp_path / "rewards.parquet")
    r = run_cli("run", src, "-o", tmp_path / "out.parquet")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--column prompt_id=uid" in r.stderr
    shown = run_cli("inspect", src)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("read it with"))
    assert "--column prompt_id=uid" in line
    assert "response-level table" in shown.stdout
    # the command inspect suggests runs as it is written
    words = line.split(None, 3)[3].split()[2:]  # after "advcli run PATH"
    r = run_cli("run", src, *words, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_response_lengths_give_a_tables_token_figures(tmp_path):
    lengths = [3, 5, 1, 2, 2, 2, 7, 1, 4]
    src = _table(tmp_path / "rewards.parquet", response_length=pa.array(lengths, pa.int64()))
    r = run_cli("stats", src, "--column", "prompt_id=uid", "--json")
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)["metrics"]
    assert figures["response_length/mean"] == np.mean(lengths)
    assert figures["critic/score/mean"] == np.mean(REWARDS)


def test_a_table_among_token_level_files_is_refused_by_name(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    r = run_cli("sample", "-o", d / "tokens.parquet", "-n", "8", "--min-len", "2", "--max-len", "6")
    assert r.returncode == 0, r.stderr
    pq.write_table(pa.table({"prompt_id": pa.array(["p0"] * 8), "reward": pa.array([0.5] * 8, pa.float32())}),
                   d / "summary.parquet")
    r = run_cli("validate", d)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "summary.parquet" in r.stderr and "response_mask" in r.stderr


def test_filter_on_a_table_keeps_its_rows_and_columns(tmp_path):
    src = _table(tmp_path / "rewards.parquet")
    out = tmp_path / "kept.parquet"
    # group b's rewards differ, a and c too; make c uniform
    t = pq.read_table(src)
    rewards = REWARDS[:6] + [1.0, 1.0, 1.0]
    pq.write_table(t.set_column(1, "reward", pa.array(rewards)), src)
    r = run_cli("filter", src, "-o", out, "--drop-uniform", "--column", "prompt_id=uid")
    assert r.returncode == 0, r.stderr
    kept = pq.read_table(out)
    assert kept.schema.remove_metadata() == pq.read_table(src).schema.remove_metadata()
    assert kept.column("uid").to_pylist() == ["a"] * 3 + ["b"] * 3
    assert kept.column("reward").to_pylist() == rewards[:6]


@pytest.mark.parametrize("lengths", [[2**31, 5, 3, 2, 1, 1, 4, 4, 4], [-2, 3, 3, 3, 3, 3, 3, 3, 3],
                                     [None, 3, 3, 3, 3, 3, 3, 3, 3]])
def test_a_response_length_that_is_no_token_count_is_not_taken(tmp_path, lengths):
    """A response_length column with a value no response has (over 2^24, below 1, null) is not taken as the token
    counts: one token a row, said in the summary, the figures those of the table without it (a length of 2^31
    overflowed the mask's offsets: an internal error; a negative one weighed the means by the other rows' counts)."""
    src = _table(tmp_path / "odd.parquet", response_length=pa.array(lengths, pa.int64()))
    plain = _table(tmp_path / "plain.parquet")
    got = {}
    for name, path in (("odd", src), ("plain", plain)):
        r = run_cli("run", path, "-o", tmp_path / f"{name}.out.parquet", "--column", "prompt_id=uid", "--json")
        assert r.returncode == 0, r.stderr
        got[name] = json.loads(r.stdout)
    assert "'response_length' not taken as the token counts" in " ".join(run_cli(
        "run", src, "-o", tmp_path / "again.parquet", "--column", "prompt_id=uid").stderr.split())
    assert got["odd"]["metrics"] == got["plain"]["metrics"]
    assert pq.read_table(tmp_path / "odd.out.parquet").column("advantages").equals(
        pq.read_table(tmp_path / "plain.out.parquet").column("advantages"))


def test_opo_weighs_a_tables_rows_by_their_response_length(tmp_path):
    """OPO's baseline Σ L_i·r_i / Σ L_i (each group) needs the token counts: a table's response_length gives them
    (it was refused as lacking them)."""
    lengths = [3, 5, 1, 2, 2, 2, 7, 1, 4]
    src = _table(tmp_path / "rewards.parquet", response_length=pa.array(lengths, pa.int64()))
    r = run_cli("run", src, "-o", tmp_path / "opo.parquet", "--column", "prompt_id=uid", "--flavor", "advcli",
                "--set", "estimator.name=opo")
    assert r.returncode == 0, r.stderr
    rew, ln = np.array(REWARDS).reshape(3, 3), np.array(lengths, float).reshape(3, 3)
    want = (rew - (rew * ln).sum(1, keepdims=True) / ln.sum(1, keepdims=True)).ravel()
    np.testing.assert_allclose(pq.read_table(tmp_path / "opo.parquet").column("advantages").to_numpy(), want,
                               rtol=1e-5, atol=1e-6)


def test_inspect_names_a_tables_reward_column_or_says_which_to_name(tmp_path):
    """A table whose reward is under another name gets it in the printed command (it printed a command that
    failed on the missing reward); one whose group column has no usual name gets no command but what to name."""
    src = tmp_path / "weird.parquet"
    pq.write_table(pa.table({"group": ["a", "a", "b", "b"], "rew": [1.0, 0.0, 1.0, 1.0]}), src)
    shown = run_cli("inspect", src)
    line = next(x for x in shown.stdout.splitlines() if x.startswith("read it with"))
    assert "name it with --column prompt_id=NAME" in line, line
    shown = run_cli("inspect", src, "--column", "prompt_id=group")
    line = next(x for x in shown.stdout.splitlines() if x.startswith("read it with"))
    assert "--column prompt_id=group --column reward=rew" in line, line
    r = run_cli("run", src, *line.split(None, 3)[3].split()[2:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_trl_defaults_refused_where_a_group_like_column_holds_other_groups(tmp_path):
    """TRL's blocks of num_generations rows (default 8) on a table whose `uid` column holds groups of 3: it ran
    blocks of the default across the groups, silently; now refused naming the groups and what to set. A DataFrame
    by the library says the same; with num_generations given it runs."""
    src = _table(tmp_path / "rewards.parquet")
    r = run_cli("run", src, "-o", tmp_path / "out.parquet", "--flavor", "trl")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    said = " ".join(r.stderr.split())
    assert "num_generations is not set and defaults to 8" in said and "column 'uid'" in said
    assert "--set num_generations=3" in said and "--column prompt_id=uid" in said
    assert not (tmp_path / "out.parquet").exists()
    import advcli
    from advcli.errors import AdvcliError

    with pytest.raises(AdvcliError, match="num_generations"):
        advcli.run(pq.read_table(src).to_pandas(), flavor="trl")
    ok = run_cli("run", src, "-o", tmp_path / "out.parquet", "--flavor", "trl", "--set", "num_generations=3", "-q")
    assert ok.returncode == 0, ok.stderr


def test_a_table_with_one_generic_dump_field_gets_no_dump_hint(tmp_path):
    """A table with a `scores` column (ROLL's one required field) or `samples` (slime's) is not named a trainer's
    dump: the hint of a table of JSONL records needs two of a format's fields or more."""
    for name in ("scores", "samples"):
        src = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"uid": ["a", "a", "b", "b"], "reward": [1.0, 0.0, 1.0, 1.0],
                                 name: [1.0, 0.0, 1.0, 1.0]}), src)
        r = run_cli("run", src, "-o", tmp_path / "o.parquet")
        assert r.returncode == 2 and "dump's own files" not in r.stderr and "--column prompt_id=uid" in r.stderr


@pytest.mark.parametrize("uids", [["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 12,  # several sizes
                                  ["a", "b"] * 8])  # groups of exactly 8 whose rows are not consecutive
def test_trl_defaults_refused_where_a_uid_column_holds_groups_blocks_of_8_would_cut(tmp_path, uids):
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"uid": uids, "reward": [float(i % 3) for i in range(len(uids))]}), src)
    r = run_cli("run", src, "-o", tmp_path / "o.parquet", "--flavor", "trl")
    assert r.returncode == 2 and "column 'uid', named like a group id, holds other groups" in " ".join(r.stderr.split())
    ok = run_cli("run", src, "-o", tmp_path / "o.parquet", "--flavor", "trl", "--column", "prompt_id=uid", "--set",
                 "advcli.group_by=id", "-q")
    assert ok.returncode == 0, ok.stderr
