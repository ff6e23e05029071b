"""Ragged.row_sum: each row summed left to right (so a row's sum never depends on its chunk),
whatever the kernel — checked against a Python loop and against index_add_."""
import numpy as np
import pytest
import torch

from advcli.ops.ragged import Ragged


def _python_row_sums(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    out, pos = [], 0
    for n in lengths:
        acc = torch.zeros((), dtype=values.dtype)
        for x in values[pos:pos + n]:
            acc = acc + x  # one rounding per token, in order
        out.append(acc)
        pos += n
    return torch.stack(out) if out else torch.zeros(0, dtype=values.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_sum_adds_each_row_in_order(dtype):
    g = torch.Generator().manual_seed(5)
    lengths = [0, 3, 1, 0, 40, 7, 0]
    n = sum(lengths)
    values = (torch.randn(n, generator=g) * torch.exp(3 * torch.randn(n, generator=g))).to(dtype)
    layout = Ragged.from_lengths(torch.tensor(lengths))
    got = layout.row_sum(values)
    assert got.dtype == dtype and torch.equal(got, _python_row_sums(values, lengths))
    ref = torch.zeros(len(lengths), dtype=dtype).index_add_(0, layout.row_index, values)
    assert torch.equal(got, ref)


def test_row_sum_of_a_row_does_not_depend_on_its_chunk():
    g = torch.Generator().manual_seed(9)
    lengths = torch.randint(0, 500, (64,), generator=g)
    values = torch.randn(int(lengths.sum()), generator=g) * 1e3
    whole = Ragged.from_lengths(lengths).row_sum(values)
    cut = int(lengths[:23].sum())
    parts = torch.cat([Ragged.from_lengths(lengths[:23]).row_sum(values[:cut]),
                       Ragged.from_lengths(lengths[23:]).row_sum(values[cut:])])
    assert torch.equal(whole, parts)


def test_row_sum_integers_and_empty_chunks():
    layout = Ragged.from_lengths(torch.tensor([2, 0, 3]))
    got = layout.row_sum(torch.tensor([1, 2, 3, 4, 5], dtype=torch.int64))
    assert got.dtype == torch.int64 and got.tolist() == [3, 0, 12]
    empty_rows = Ragged.from_lengths(torch.tensor([0, 0]))
    assert empty_rows.row_sum(torch.zeros(0)).tolist() == [0.0, 0.0]
    assert Ragged.from_lengths(torch.zeros(0, dtype=torch.int64)).row_sum(torch.zeros(0)).numel() == 0
    np.testing.assert_array_equal(layout.row_sum(torch.ones(5, dtype=torch.float64)).numpy(), [2.0, 0.0, 3.0])


def test_row_reduce_min_max_and_empty_rows():
    layout = Ragged.from_lengths(torch.tensor([2, 0, 3]))
    x = torch.tensor([3.0, -1.0, 5.0, float("nan"), 2.0], dtype=torch.float64)
    assert layout.row_reduce(x, "min")[[0, 1]].tolist() == [-1.0, float("inf")]
    assert layout.row_reduce(x, "max")[[0, 1]].tolist() == [3.0, float("-inf")]
    assert torch.isnan(layout.row_reduce(x, "max")[2])  # NaN propagates
    none = Ragged.from_lengths(torch.tensor([0, 0]))
    for reduce, fill in (("sum", 0.0), ("min", float("inf")), ("max", float("-inf"))):
        assert none.row_reduce(torch.zeros(0, dtype=torch.float64), reduce).tolist() == [fill, fill]


def test_first_run_is_the_length_of_each_rows_first_run_of_ones():
    """Rows [1,1,0,1,1], [], [0,1,1,0], [0,0,0], [1], [0,1,1,1]: first runs 2, 0, 2, 0, 1, 3 (to the row's end)."""
    masks = [[1, 1, 0, 1, 1], [], [0, 1, 1, 0], [0, 0, 0], [1], [0, 1, 1, 1]]
    lengths = torch.tensor([len(m) for m in masks])
    r = Ragged.from_lengths(lengths)
    flags = torch.tensor([x for m in masks for x in m], dtype=torch.bool)
    assert r.first_run(flags).tolist() == [2, 0, 2, 0, 1, 3]
