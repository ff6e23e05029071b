"""Running sums of token figures: per-row partial figures of one chunk (:class:`RowPartials`) added
to per-scope totals (:class:`ScopeSums`) row by row in input order, in float64, so that no figure
depends on how rows are cut into chunks. Numpy only."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .arrays import offsets_of, row_reduce, to_numpy
from .json_values import figure


def row_sums64(offsets, x) -> np.ndarray:
    """float64 Σ per row of a flat token array (numpy, or a torch tensor on any device), each row on its own."""
    return row_reduce(to_numpy(x, np.float64), offsets_of(offsets), "sum")


def _rows_constant(x: np.ndarray, voff: np.ndarray) -> bool:
    """Do all the values of each row of ``x`` (cut at ``voff``) compare equal? One comparison of
    neighbours, the pairs that straddle a row boundary excused."""
    n = x.size
    if n < 2:
        return True
    neq = x[1:] != x[:-1]
    b = voff[1:-1] - 1  # neq[b]: last token of a row vs first of the next
    neq[b[(b >= 0) & (b < n - 1)]] = False
    return not bool(neq.any())


class RowPartials:
    """One chunk's per-row partial figures of the values of its valid tokens (float64 / int64 [B]):
    Σ and Σx² of the finite values, their count, the count of non-finite values, min and max of the
    finite values (+inf / −inf where a row has none) and ``raw_sum`` = Σ of all values (NaN
    propagates: a row's mean advantage is NaN when one of its tokens is). ``rows_minmax`` false:
    ``mn``/``mx`` are the chunk's (one element) instead of per row. ``nonconstant``: some row holds
    two different finite values (then ``mn``/``mx`` need not be per row)."""

    __slots__ = ("all_finite", "count", "mn", "mx", "nonconstant", "nonfinite", "raw_sum", "rows_minmax", "sum",
                 "sumsq")

    @staticmethod
    def of_tokens(x: np.ndarray, voff: np.ndarray, rows_minmax: bool, check_const: bool = False) -> RowPartials:
        """``x`` float64 [n]: the valid tokens' values in order; ``voff`` [B+1]: where each row starts.
        ``check_const``: find out whether every row is constant and, if so, give per-row min/max
        (its value) whatever ``rows_minmax`` says."""
        p = RowPartials()
        p.nonconstant = False
        s = row_reduce(x, voff, "sum")
        p.raw_sum = s
        cnt = voff[1:] - voff[:-1]
        with np.errstate(invalid="ignore", over="ignore"):
            finite_all = bool(np.isfinite(s.sum()))
        if finite_all:  # one reduction: every value finite (the common case)
            p.all_finite = True
            p.sum, p.count, p.nonfinite = s, cnt, np.zeros_like(cnt)
            with np.errstate(over="ignore"):  # a value beyond √max: its square is inf, as the figure says
                p.sumsq = row_reduce(x * x, voff, "sum")
            if check_const:
                if _rows_constant(x, voff):
                    has = cnt > 0
                    first = x[np.minimum(voff[:-1], max(x.size - 1, 0))] if x.size else np.zeros(cnt.size)
                    p.mn = np.where(has, first, math.inf)
                    p.mx = np.where(has, first, -math.inf)
                    p.rows_minmax = True
                    return p
                p.nonconstant = True
            p.rows_minmax = rows_minmax
            if rows_minmax:
                p.mn, p.mx = row_reduce(x, voff, "min"), row_reduce(x, voff, "max")
            elif x.size:
                p.mn, p.mx = np.array([x.min()]), np.array([x.max()])
            else:
                p.mn, p.mx = np.array([math.inf]), np.array([-math.inf])
            return p
        p.all_finite = False
        fin = np.isfinite(x)
        xf = np.where(fin, x, 0.0)
        p.sum = row_reduce(xf, voff, "sum")
        p.sumsq = row_reduce(xf * xf, voff, "sum")
        cf = np.concatenate([[0], np.cumsum(fin, dtype=np.int64)])  # exact integer counts per row
        p.count = cf[voff[1:]] - cf[voff[:-1]]
        p.nonfinite = cnt - p.count
        p.mn = row_reduce(np.where(fin, x, math.inf), voff, "min")
        p.mx = row_reduce(np.where(fin, x, -math.inf), voff, "max")
        p.rows_minmax = True
        p.nonconstant = bool(((p.mn != p.mx) & (p.count > 0)).any())
        return p

    @staticmethod
    def of_rows(v, n) -> RowPartials:
        """Rows whose ``n`` [B] valid tokens all hold the value ``v`` [B] (float64): the same figures
        as :meth:`of_tokens` on the expanded tokens (Σ = v·n and Σx² = v²·n in one rounding)."""
        v, n = to_numpy(v, np.float64), to_numpy(n, np.int64)
        p = RowPartials()
        p.rows_minmax = True
        has = n > 0
        fin = np.isfinite(v)
        nf = n.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            p.raw_sum = np.where(has, v * nf, 0.0)
            ok = fin & has
            p.sum = np.where(ok, v * nf, 0.0)
            p.sumsq = np.where(ok, v * v * nf, 0.0)
        p.count = np.where(fin, n, 0)
        p.nonfinite = n - p.count
        p.mn = np.where(ok, v, math.inf)
        p.mx = np.where(ok, v, -math.inf)
        p.all_finite = bool(fin[has].all())
        p.nonconstant = False
        return p


class ScopeSums:
    """count, Σx, Σx², min, max of finite values per scope (float64), plus non-finite counts.

    Fed with per-row partials (:class:`RowPartials`); each scope's sums add the row sums one row at a
    time in input order, so the totals do not depend on how rows are cut into chunks."""

    def __init__(self, num_scopes: int):
        S = max(num_scopes, 1)
        self.count = np.zeros(S, np.int64)
        self.sum = np.zeros(S, np.float64)
        self.sumsq = np.zeros(S, np.float64)
        self.min = np.full(S, math.inf)
        self.max = np.full(S, -math.inf)
        self.nonfinite = np.zeros(S, np.int64)

    def add(self, p: RowPartials, scope: np.ndarray) -> None:
        """``scope`` int64 [B]: each row's scope."""
        np.add.at(self.count, scope, p.count)
        np.add.at(self.nonfinite, scope, p.nonfinite)
        np.add.at(self.sum, scope, p.sum)  # unbuffered: row by row, in input order
        np.add.at(self.sumsq, scope, p.sumsq)
        if p.rows_minmax:
            np.minimum.at(self.min, scope, p.mn)
            np.maximum.at(self.max, scope, p.mx)
        else:  # one scope, the chunk's min and max
            assert self.min.size == 1
            self.min = np.minimum(self.min, p.mn)
            self.max = np.maximum(self.max, p.mx)

    def figures(self, s: int | None = None) -> dict[str, Any]:
        """{mean, max, min, std, count, nonfinite} of scope ``s`` (all scopes when None)."""
        if s is None:
            n, tot, sq = int(self.count.sum()), float(self.sum.sum()), float(self.sumsq.sum())
            mn, mx, nf = float(self.min.min()), float(self.max.max()), int(self.nonfinite.sum())
        else:
            n, tot, sq = int(self.count[s]), float(self.sum[s]), float(self.sumsq[s])
            mn, mx, nf = float(self.min[s]), float(self.max[s]), int(self.nonfinite[s])
        if n == 0:
            return {"mean": None, "max": None, "min": None, "std": None, "count": 0, "nonfinite": nf}
        mean = tot / n
        return {"mean": mean, "max": figure(mx), "min": figure(mn), "std": math.sqrt(max(sq / n - mean * mean, 0.0)),
                "count": n, "nonfinite": nf}

