"""The per-step driver's row pass (advcli.engines.ray_steps.row_pass_pieces) names the input's first bad
row, as the local engine does, whichever shard's task Ray finishes first.

No Ray needed: the function takes the ``ray`` module as an argument, and this file hands it a stand-in
whose tasks finish in an order the test chooses (the order a loaded cluster may give).
"""
from __future__ import annotations

import numpy as np
import pytest

from advcli.engines.ray_shards import Shard
from advcli.engines.ray_steps import row_pass_pieces
from advcli.errors import AdvcliError

ROWS_PER_SHARD = 10


class _Ref:
    def __init__(self, shard: dict):
        self.shard = shard


class _OrderedRay:
    """``remote``/``put``/``wait``/``get`` as row_pass_pieces calls them: shard ``k``'s task finishes
    ``finish_order.index(k)``-th; a shard whose first row is in ``bad_rows`` fails naming that row."""

    def __init__(self, finish_order: list[int], bad_rows: dict[int, int]):
        self.finish_order, self.bad_rows = finish_order, bad_rows
        self.got: list[int] = []  # the shards whose result the driver fetched, in order

    def remote(self, **_):
        return lambda fn: type("Task", (), {"remote": staticmethod(lambda _fn, _p, item, _c: _Ref(item))})

    def put(self, x):
        return x

    def wait(self, refs, num_returns, timeout):
        rank = {r: self.finish_order.index(r.shard["first"] // ROWS_PER_SHARD) for r in refs}
        first = min(refs, key=rank.get)
        return [first], [r for r in refs if r is not first]

    def get(self, ref):
        first = ref.shard["first"]
        self.got.append(first // ROWS_PER_SHARD)
        if first in self.bad_rows:
            raise AdvcliError(f"dump.parquet: row {self.bad_rows[first]}, column reward: NaN")
        return {"first": first, "rows": ROWS_PER_SHARD, "steps": np.array([first // 20]), "counts": [ROWS_PER_SHARD],
                "valid": 3 * ROWS_PER_SHARD, "length": 4 * ROWS_PER_SHARD, "empty": (-1, 0), "zero_length": (-1, 0),
                "refs": [f"piece{first}"]}


def _shards(n: int) -> list[Shard]:
    return [Shard(0, k * ROWS_PER_SHARD, (k + 1) * ROWS_PER_SHARD, k * ROWS_PER_SHARD) for k in range(n)]


@pytest.mark.parametrize("finish_order", [[3, 2, 1, 0], [1, 3, 0, 2], [0, 1, 2, 3]])
def test_the_earliest_bad_shard_is_named_whatever_finishes_first(finish_order):
    """Shards 1 and 3 hold bad rows (12 and 31): the error names row 12 in every finishing order; the
    shards after the earliest failure are not waited for once it is known."""
    ray = _OrderedRay(finish_order, {10: 12, 30: 31})
    with pytest.raises(AdvcliError, match=r"row 12,"):
        row_pass_pieces(ray, _shards(4), None, {}, "step", 4 * ROWS_PER_SHARD)
    assert 0 in ray.got and 1 in ray.got  # shard 0 could still have failed earlier: it was waited for
    if finish_order.index(1) < finish_order.index(2):  # shard 2 had not finished when shard 1 failed
        assert 2 not in ray.got


def test_the_pieces_are_grouped_by_step_in_row_order():
    """Four shards of 10 rows, steps 0 (rows 0-19) and 1 (rows 20-39), finishing backwards: each step's
    pieces in row order, the per-shard and total counts added."""
    ray = _OrderedRay([3, 2, 1, 0], {})
    got = row_pass_pieces(ray, _shards(4), None, {}, "step", 40)
    assert got.step_values == [0, 1]
    assert got.pieces == [["piece0", "piece10"], ["piece20", "piece30"]]
    assert got.step_rows == [20, 20]
    assert (got.valid, got.length, got.shard_valid) == (120, 160, [30, 30, 30, 30])
