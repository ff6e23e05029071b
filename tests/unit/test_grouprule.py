"""The one grouping rule (advcli.ops.grouprule), checked on rows small enough to group by hand, and asked the
same way by the run, inspect and the resolution's group-size hint."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.ops.grouprule import (
    by_first_appearance,
    contiguous_block_size,
    id_groups,
    run_groups,
    scope_codes,
    size_counts,
)


def test_groups_are_prompts_within_a_step():
    # rows:     0  1  2  3  4  5  6
    steps = np.array([5, 5, 3, 5, 3, 3, 5])
    pid = np.array([0, 1, 0, 0, 0, 1, 1])  # prompt 0 in step 5 and in step 3: two groups
    sc, values = scope_codes(steps)
    assert values == [3, 5] and sc.tolist() == [1, 1, 0, 1, 0, 0, 1]
    g, first = id_groups(sc, pid)
    # (step 3, p0) = rows 2,4; (3, p1) = row 5; (5, p0) = rows 0,3; (5, p1) = rows 1,6 -> codes in (scope, pid) order
    assert g.tolist() == [2, 3, 0, 2, 0, 1, 3] and first.tolist() == [2, 5, 0, 1]
    assert size_counts(g) == {1: 1, 2: 3}
    renum, order = by_first_appearance(g, first)  # first rows 0, 1, 2, 5
    assert renum.tolist() == [0, 1, 2, 0, 2, 3, 1] and order.tolist() == [0, 1, 2, 5]
    one, _ = id_groups(None, pid)  # no step: a prompt is one group
    assert size_counts(one) == {3: 1, 4: 1}


def test_null_prompt_ids_never_merge_with_the_previous_step():
    g, _ = id_groups(np.array([0, 0, 1, 1]), np.array([-1, 2, -1, 2]))
    assert len(set(g.tolist())) == 4


def test_runs_and_contiguous_blocks():
    scope = np.array([0, 0, 0, 0, 1, 1])
    pid = np.array([7, 7, 8, 7, 7, 7])
    assert run_groups(scope, pid).tolist() == [0, 0, 1, 2, 3, 3]  # a prompt's second run is its own group
    # blocks of 2: prompt 1 recurs in the next step, a block of its own there
    assert contiguous_block_size(np.array([1, 1, 2, 2, 1, 1]), np.array([0, 0, 0, 0, 1, 1])) == 2
    assert contiguous_block_size(np.array([1, 1, 2, 2, 1, 1])) is None  # without steps: id 1 spans two blocks
    assert contiguous_block_size(np.array([1, 1, 2, 2, 2])) is None  # unequal blocks
    assert contiguous_block_size(np.array([], np.int64)) is None


def test_resolution_counts_the_groups_the_run_forms(tmp_path):
    from advcli.runs.resolution import _group_layout

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"prompt_id": ["x", "x", "y", "x"], "step": [1, 1, 1, 2]}), a)
    pq.write_table(pa.table({"prompt_id": ["x", "z", "z"], "step": [2, 2, 2]}), b)
    # (1, x) 2 rows, (1, y) 1, (2, x) 2 (one in each file), (2, z) 2; each group's rows consecutive
    assert _group_layout([str(a), str(b)]) == ({1: 1, 2: 3}, False)
    pq.write_table(pa.table({"prompt_id": ["z", "x", "z"], "step": [2, 2, 2]}), b)
    assert _group_layout([str(a), str(b)]) == ({1: 1, 2: 3}, True)  # (2, z) split by an x: not consecutive
    pq.write_table(pa.table({"step": [1]}), b)
    assert _group_layout([str(a), str(b)]) == (None, False)  # a file without prompt_id: no sizes to tell
