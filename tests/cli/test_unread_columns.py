"""Token columns the estimator does not read are still checked: a trainer reads them beside the new
columns, so a row whose ``old_log_probs`` is one token shorter than its ``response_mask`` must not
pass `advcli run` or `advcli validate` even under GRPO, which reads neither log-prob column.

`run` checks every recognised token column's nulls and list lengths (offsets only); `validate` also
checks their values (finite floats).
"""
from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import advcli
from advcli.errors import AdvcliError
from tests.conftest import run_cli

MASKS = [[1, 1, 1], [1, 0, 1, 1], [1, 1], [1, 1, 1, 1, 1], [1], [1, 1]]


def _dump(path, old=None, values=None):
    old = old if old is not None else [[-0.5] * len(m) for m in MASKS]
    values = values if values is not None else [[0.1] * len(m) for m in MASKS]
    pq.write_table(pa.table({
        "prompt_id": ["a", "a", "a", "b", "b", "b"],
        "reward": pa.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], pa.float32()),
        "response_mask": pa.array(MASKS, pa.list_(pa.int8())),
        "old_log_probs": pa.array(old, pa.list_(pa.float32())),
        "values": pa.array(values, pa.list_(pa.float32())),
    }), path, row_group_size=4)
    return str(path)


def _short_row(row=4 - 1):
    old = [[-0.5] * len(m) for m in MASKS]
    old[row] = old[row][:-1]  # one token short
    return old


GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


@pytest.mark.parametrize("chunk_rows", ["1", "4096"])
def test_run_refuses_a_short_unread_column(tmp_path, chunk_rows):
    src = _dump(tmp_path / "in.parquet", old=_short_row())
    out = tmp_path / "out.parquet"
    p = run_cli("run", src, "--output", out, *GRPO, "--chunk-rows", chunk_rows)
    assert p.returncode == 2, p.stderr
    assert "row 3" in p.stderr and "'old_log_probs' has 4 tokens" in p.stderr and "has 5" in p.stderr
    assert "in.parquet" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists() and [f.name for f in tmp_path.iterdir()] == ["in.parquet"]


def test_validate_refuses_a_short_unread_column(tmp_path):
    src = _dump(tmp_path / "in.parquet", old=_short_row(row=5))
    p = run_cli("validate", src, *GRPO)
    assert p.returncode == 2 and "row 5" in p.stderr and "old_log_probs" in p.stderr, p.stderr


def test_run_refuses_a_null_list_in_an_unread_column(tmp_path):
    values = [[0.1] * len(m) for m in MASKS]
    values[2] = None
    src = _dump(tmp_path / "in.parquet", values=values)
    with pytest.raises(AdvcliError, match=r"'values'.*row 2|row 2.*'values'"):
        advcli.run(src, str(tmp_path / "o.parquet"), flavor="verl", settings={"algorithm.adv_estimator": "grpo"})


def test_validate_warns_of_values_of_unread_columns_and_run_checks_only_their_lengths(tmp_path):
    """validate exits as run does: a NaN in a column the run does not read is a warning naming it (validate
    refused it, exit 2, where run wrote the advantages)."""
    values = [[0.1] * len(m) for m in MASKS]
    values[4] = [math.nan]
    src = _dump(tmp_path / "in.parquet", values=values)
    p = run_cli("validate", src, *GRPO)
    assert p.returncode == 0 and "'values', row 4, position 0" in p.stderr and "not finite" in p.stderr, p.stderr
    assert "this run does not read column 'values'" in p.stderr
    # run computes GRPO (which never reads values) and keeps the column as it was
    out = tmp_path / "o.parquet"
    p = run_cli("run", src, "--output", out, *GRPO)
    assert p.returncode == 0, p.stderr
    t = pq.read_table(out)
    assert math.isnan(t.column("values").to_pylist()[4][0])
    assert [len(a) for a in t.column("advantages").to_pylist()] == [len(m) for m in MASKS]


def test_an_honest_dump_passes_both(tmp_path):
    src = _dump(tmp_path / "in.parquet")
    assert run_cli("validate", src, *GRPO).returncode == 0
    assert run_cli("run", src, "--output", tmp_path / "o.parquet", *GRPO).returncode == 0
