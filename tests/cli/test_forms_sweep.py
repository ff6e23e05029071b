"""What a sweep of the physical forms pipelines write the same data in (Arrow types, nulls, column names) found:
each held to the answer of the plain form, or to the trainer's own number."""
from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SAMPLE, run_main


def _advantages(path) -> list:
    return pq.read_table(path).column("advantages").to_pylist()


@pytest.mark.parametrize("mask_type", [pa.uint16(), pa.uint32(), pa.uint64()])
def test_a_wide_unsigned_mask_runs_as_an_int8_one(tmp_path, capsys, mask_type):
    """torch compares no uint16/32/64 tensor: a run on such a mask stopped with an internal error (exit 1)."""
    table = pq.read_table(SAMPLE)
    i = table.schema.get_field_index("response_mask")
    wide = table.set_column(i, "response_mask", table.column(i).cast(pa.list_(mask_type)))
    pq.write_table(wide, tmp_path / "wide.parquet")
    for name in ("wide", "plain"):
        src = tmp_path / "wide.parquet" if name == "wide" else SAMPLE
        code, _, err = run_main(["run", src, "-o", tmp_path / f"{name}.out.parquet", "--flavor", "nemo", "-q"], capsys)
        assert code == 0, err
    assert _advantages(tmp_path / "wide.out.parquet") == _advantages(tmp_path / "plain.out.parquet")
    assert pq.read_table(tmp_path / "wide.out.parquet").schema.field("response_mask").type == pa.list_(mask_type)


@pytest.mark.parametrize("column", ["response_mask", "rollout_log_probs"])
def test_stats_refuses_a_null_token_list_as_run_does(tmp_path, capsys, column):
    """A null row of a token list misaligned stats' columns: an internal error (exit 1) where run refuses it."""
    table = pq.read_table(SAMPLE)
    n = table.num_rows
    lp = pa.array([[-0.5] * len(m) for m in table.column("response_mask").to_pylist()], pa.list_(pa.float32()))
    table = table.append_column("rollout_log_probs", lp)
    if "old_log_probs" not in table.column_names:
        table = table.append_column("old_log_probs", lp)
    i = table.schema.get_field_index(column)
    values = table.column(i).to_pylist()
    values[8] = None
    table = table.set_column(i, column, pa.array(values, table.schema.field(column).type))
    pq.write_table(table, tmp_path / "n.parquet")
    code, _, err = run_main(["stats", tmp_path / "n.parquet"], capsys)
    assert code == 2 and f"column {column!r}, row 8: null value" in err, err
    assert n > 8


@pytest.mark.parametrize("command", ["stats", "run"])
def test_stats_refuses_a_half_mask_as_run_does(tmp_path, capsys, command):
    """stats counted a mask value 0.5 as a trained token, where run refuses it: the same file gets the same refusal
    from both commands, naming the column, row and position."""
    table = pq.read_table(SAMPLE)
    masks = table.column("response_mask").to_pylist()
    masks[3] = [0.5 if v else v for v in masks[3]]
    i = table.schema.get_field_index("response_mask")
    table = table.set_column(i, "response_mask", pa.array(masks, pa.list_(pa.float32())))
    pq.write_table(table, tmp_path / "f.parquet")
    args = ["-o", tmp_path / "o.parquet"] if command == "run" else []
    code, _, err = run_main([command, tmp_path / "f.parquet", *args], capsys)
    assert code == 2 and "column 'response_mask', row 3, position 0: mask value 0.5" in err, err


def test_a_group_id_named_by_column_chooses_the_estimator_as_its_own_name_does(tmp_path, capsys):
    """With no --flavor, `--column prompt_id=uid` was not seen by the estimator's choice: a dump with values ran
    GAE (one without was refused) where the same dump with a prompt_id column runs GRPO."""
    table = pq.read_table(SAMPLE)
    pq.write_table(table.rename_columns(["uid" if c == "prompt_id" else c for c in table.column_names]),
                   tmp_path / "uid.parquet")
    code, out, err = run_main(["run", tmp_path / "uid.parquet", "-o", tmp_path / "a.parquet", "--column",
                               "prompt_id=uid", "--json"], capsys)
    assert code == 0 and json.loads(out)["estimator"]["name"] == "grpo", err
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "b.parquet", "-q"], capsys)
    assert code == 0, err
    assert _advantages(tmp_path / "a.parquet") == _advantages(tmp_path / "b.parquet")


def test_trl_scores_an_empty_completion_in_its_group(tmp_path, capsys):
    """TRL's advantages come from one reward per completion, whatever its length (grpo_trainer.py L2682-2707
    @f2cd577): a group [1, 0, 1 (no token), 0] is (r − 0.5)/(std(unbiased) + 1e-4); advcli scored the empty one 0."""
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    masks = [[1, 1], [1], [], [1, 1, 1], [1], [], [1, 1], [1]]  # group 2: [0, 1 (empty), 0, 0]
    pq.write_table(pa.table({"reward": rewards, "response_mask": pa.array(masks, pa.list_(pa.int8()))}),
                   tmp_path / "e.parquet")
    code, _, err = run_main(["run", tmp_path / "e.parquet", "-o", tmp_path / "o.parquet", "--flavor", "trl", "--set",
                             "num_generations=4", "-q"], capsys)
    assert code == 0, err
    got = _advantages(tmp_path / "o.parquet")
    for g in (0, 4):
        r = rewards[g:g + 4]
        mu = sum(r) / 4
        sd = math.sqrt(sum((x - mu) ** 2 for x in r) / 3)
        for k in range(4):
            assert got[g + k] == pytest.approx([(r[k] - mu) / (sd + 1e-4)] * len(masks[g + k]), rel=1e-5)
    assert got[0][0] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4), rel=1e-5)


def test_a_column_named_with_a_space_is_mapped_as_the_hint_says(tmp_path, capsys):
    """A reward column named ' reward': the hint said `--column reward= reward`, which the shell splits and advcli
    stripped; it is quoted now, and the name after '=' is taken as given."""
    table = pq.read_table(SAMPLE)
    pq.write_table(table.rename_columns([" reward" if c == "reward" else c for c in table.column_names]),
                   tmp_path / "w.parquet")
    code, _, err = run_main(["run", tmp_path / "w.parquet", "-o", tmp_path / "o.parquet"], capsys)
    assert code == 2 and "--column 'reward= reward'" in err, err
    code, _, err = run_main(["run", tmp_path / "w.parquet", "-o", tmp_path / "o.parquet", "--column", "reward= reward",
                             "-q"], capsys)
    assert code == 0, err
    code, _, err = run_main(["run", SAMPLE, "-o", tmp_path / "p.parquet", "-q"], capsys)
    assert _advantages(tmp_path / "o.parquet") == _advantages(tmp_path / "p.parquet")


@pytest.mark.parametrize("layout, said", [([], True), (["--ragged"], False), (["--padded"], False)])
def test_a_fixed_size_mask_column_says_it_was_read_as_padded(tmp_path, capsys, layout, said):
    """A fixed-size list mask is read as right-padded (a row's length its last mask=1 position + 1): a layout
    inferred from the column's type, which the run now says unless --padded/--ragged chose it. Padded, the rows'
    lengths are 2, 1, 3, 2; read whole, 3 each."""
    masks = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]
    flat = pa.array([v for m in masks for v in m], pa.int8())
    table = pa.table({"prompt_id": ["a", "a", "b", "b"], "reward": pa.array([1.0, 0.0, 1.0, 0.5], pa.float32()),
                      "response_mask": pa.FixedSizeListArray.from_arrays(flat, 3)})
    pq.write_table(table, tmp_path / "fixed.parquet")
    code, out, err = run_main(["run", tmp_path / "fixed.parquet", "-o", tmp_path / "o.parquet", "--flavor", "skyrl",
                               "--json", *layout], capsys)
    assert code == 0, err
    said_padded = "is a fixed-size list, so its rows are read as right-padded"
    warned = [w for w in json.loads(out)["warnings"] if said_padded in w]
    assert bool(warned) == said
    lengths = [2, 1, 3, 2] if layout != ["--ragged"] else [3, 3, 3, 3]
    assert json.loads(out)["metrics"]["response_length/mean"] == pytest.approx(sum(lengths) / 4)
