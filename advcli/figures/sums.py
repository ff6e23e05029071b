"""Running sums of token figures: per-row partial figures of one chunk (:class:`RowPartials`) added
to per-scope totals (:class:`ScopeSums`) row by row in input order, in float64, so that no figure
depends on how rows are cut into chunks."""
from __future__ import annotations

import math
from typing import Any

import torch

from ..ragged import Ragged
from .json_values import figure


def row_sums64(offsets: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """float64 Σ per row of a flat token tensor (any device, any float dtype), on the CPU."""
    return Ragged(offsets.to("cpu")).row_sum(x.detach().to("cpu", torch.float64))


def _rows_constant(x: torch.Tensor, voff: torch.Tensor) -> bool:
    """Do all the values of each row of ``x`` (cut at ``voff``) compare equal? One comparison of
    neighbours, the pairs that straddle a row boundary excused."""
    n = x.numel()
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
    def of_tokens(x: torch.Tensor, voff: torch.Tensor, rows_minmax: bool, check_const: bool = False) -> RowPartials:
        """``x`` float64 [n]: the valid tokens' values in order; ``voff`` [B+1]: where each row starts.
        ``check_const``: find out whether every row is constant and, if so, give per-row min/max
        (its value) whatever ``rows_minmax`` says."""
        p = RowPartials()
        p.nonconstant = False
        rows = Ragged(voff)  # the valid tokens, row by row
        s = rows.row_reduce(x, "sum")
        p.raw_sum = s
        cnt = voff[1:] - voff[:-1]
        if bool(torch.isfinite(s.sum())):  # one reduction: every value finite (the common case)
            p.all_finite = True
            p.sum, p.count, p.nonfinite = s, cnt, torch.zeros_like(cnt)
            p.sumsq = rows.row_reduce(x * x, "sum")
            if check_const:
                if _rows_constant(x, voff):
                    has = cnt > 0
                    first = x[torch.clamp(voff[:-1], max=max(x.numel() - 1, 0))] if x.numel() else \
                        torch.zeros(cnt.numel(), dtype=x.dtype)
                    p.mn = torch.where(has, first, torch.full_like(first, math.inf))
                    p.mx = torch.where(has, first, torch.full_like(first, -math.inf))
                    p.rows_minmax = True
                    return p
                p.nonconstant = True
            p.rows_minmax = rows_minmax
            if rows_minmax:
                p.mn, p.mx = rows.row_reduce(x, "min"), rows.row_reduce(x, "max")
            elif x.numel():
                mn, mx = torch.aminmax(x)
                p.mn, p.mx = mn.reshape(1), mx.reshape(1)
            else:
                p.mn = torch.full((1,), math.inf, dtype=torch.float64)
                p.mx = torch.full((1,), -math.inf, dtype=torch.float64)
            return p
        p.all_finite = False
        fin = torch.isfinite(x)
        xf = torch.where(fin, x, torch.zeros_like(x))
        p.sum = rows.row_reduce(xf, "sum")
        p.sumsq = rows.row_reduce(xf * xf, "sum")
        p.count = rows.row_reduce(fin.to(torch.float64), "sum").to(torch.int64)
        p.nonfinite = cnt - p.count
        p.mn = rows.row_reduce(torch.where(fin, x, torch.full_like(x, math.inf)), "min")
        p.mx = rows.row_reduce(torch.where(fin, x, torch.full_like(x, -math.inf)), "max")
        p.rows_minmax = True
        p.nonconstant = bool(((p.mn != p.mx) & (p.count > 0)).any())
        return p

    @staticmethod
    def of_rows(v: torch.Tensor, n: torch.Tensor) -> RowPartials:
        """Rows whose ``n`` [B] valid tokens all hold the value ``v`` [B] (float64): the same figures
        as :meth:`of_tokens` on the expanded tokens (Σ = v·n and Σx² = v²·n in one rounding)."""
        p = RowPartials()
        p.rows_minmax = True
        n = n.to(torch.int64)
        has = n > 0
        fin = torch.isfinite(v)
        nf = n.to(torch.float64)
        zero = torch.zeros_like(v)
        p.raw_sum = torch.where(has, v * nf, zero)
        ok = fin & has
        p.sum = torch.where(ok, v * nf, zero)
        p.sumsq = torch.where(ok, v * v * nf, zero)
        p.count = torch.where(fin, n, torch.zeros_like(n))
        p.nonfinite = n - p.count
        p.mn = torch.where(ok, v, torch.full_like(v, math.inf))
        p.mx = torch.where(ok, v, torch.full_like(v, -math.inf))
        p.all_finite = bool(fin[has].all())
        p.nonconstant = False
        return p


class ScopeSums:
    """count, Σx, Σx², min, max of finite values per scope (float64), plus non-finite counts.

    Fed with per-row partials (:class:`RowPartials`); each scope's sums add the row sums one row at a
    time in input order, so the totals do not depend on how rows are cut into chunks."""

    def __init__(self, num_scopes: int):
        S = max(num_scopes, 1)
        self.count = torch.zeros(S, dtype=torch.int64)
        self.sum = torch.zeros(S, dtype=torch.float64)
        self.sumsq = torch.zeros(S, dtype=torch.float64)
        self.min = torch.full((S,), math.inf, dtype=torch.float64)
        self.max = torch.full((S,), -math.inf, dtype=torch.float64)
        self.nonfinite = torch.zeros(S, dtype=torch.int64)

    def add(self, p: RowPartials, scope: torch.Tensor) -> None:
        """``scope`` int64 [B]: each row's scope."""
        self.count.index_add_(0, scope, p.count)
        self.nonfinite.index_add_(0, scope, p.nonfinite)
        self.sum.index_add_(0, scope, p.sum)
        self.sumsq.index_add_(0, scope, p.sumsq)
        if p.rows_minmax:
            self.min.scatter_reduce_(0, scope, p.mn, reduce="amin")
            self.max.scatter_reduce_(0, scope, p.mx, reduce="amax")
        else:  # one scope, the chunk's min and max
            assert self.min.numel() == 1
            self.min = torch.minimum(self.min, p.mn)
            self.max = torch.maximum(self.max, p.mx)

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
