"""The run's histograms: exact counts over equal bins between the exact min and max
(:func:`histogram`, for row figures and row-constant advantages), and :class:`StreamHistogram`, the
token histogram whose edges are fixed from the run's first tokens and whose counts are exact."""
from __future__ import annotations

import math
from typing import Any

import torch

from .quantile_sketch import RESERVOIR

BINS = 50


def histogram(values: torch.Tensor, weights: torch.Tensor | None = None, bins: int = BINS,
              over: str = "rows", note: str = "") -> dict[str, Any]:
    """Exact counts over ``bins`` equal bins between the min and max of ``values`` (the last bin is
    closed, as numpy's); one bin of width 1 around the value when all are equal."""
    v = values.to(torch.float64).flatten()
    w = torch.ones_like(v, dtype=torch.int64) if weights is None else weights.to(torch.int64).flatten()
    ok = torch.isfinite(v) & (w > 0)
    v, w = v[ok], w[ok]
    if v.numel() == 0:
        return {"edges": [], "counts": [], "underflow": 0, "overflow": 0, "over": over, "exact": True, "note": note}
    lo, hi = float(v.min()), float(v.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    idx = torch.clamp(torch.bucketize(v, edges, right=True) - 1, 0, bins - 1)
    counts = torch.zeros(bins, dtype=torch.int64).index_add_(0, idx, w)
    return {"edges": edges.tolist(), "counts": counts.tolist(), "underflow": 0, "overflow": 0, "over": over,
            "exact": True, "note": note}


class StreamHistogram:
    """Exact token counts over :data:`BINS` equal bins whose edges are fixed from the run's first
    ``seed_tokens`` finite valid tokens (see the module docstring); the tokens before that are held."""

    def __init__(self, bins: int = BINS, seed_tokens: int = RESERVOIR):
        self.bins = bins
        self.seed_tokens = seed_tokens
        self.edges: torch.Tensor | None = None
        self.linear = False  # torch.histogram (linear estimate + local search) gives the same bins
        self.counts = torch.zeros(bins, dtype=torch.int64)
        self.under = 0
        self.over = 0
        self.pending: list[torch.Tensor] = []
        self.npending = 0

    def add(self, x: torch.Tensor) -> None:
        """``x`` float64: the next finite valid tokens' values, in input order."""
        if x.numel() == 0:
            return
        if self.edges is None:
            self.pending.append(x)
            self.npending += x.numel()
            if self.npending >= self.seed_tokens:
                self._fix()
            return
        self._count(x)

    def _fix(self) -> None:
        x = torch.cat(self.pending)
        self.pending, self.npending = [], 0
        self.fix_edges(seed_edges(x[:self.seed_tokens], self.bins))
        self._count(x)

    def fix_edges(self, edges: torch.Tensor) -> None:
        """Count against ``edges`` (:func:`seed_edges`) from now on: set by the Ray engine, which finds
        the run's first tokens before its workers count theirs (:func:`count_bins`)."""
        self.edges = edges
        self.linear = linear_bins(edges)

    def _count(self, x: torch.Tensor) -> None:
        self.add_counts(*count_bins(x, self.edges, self.linear))

    def add_counts(self, counts: torch.Tensor, under: int, over: int) -> None:
        """Counts made elsewhere against this histogram's edges (:func:`count_bins`)."""
        self.counts += counts
        self.under += int(under)
        self.over += int(over)

    def result(self, note: str) -> dict[str, Any]:
        if self.edges is None and self.pending:
            self._fix()
        return {"edges": [] if self.edges is None else self.edges.tolist(), "counts": self.counts.tolist(),
                "underflow": self.under, "overflow": self.over, "over": "tokens", "exact": True, "note": note}


def seed_edges(x: torch.Tensor, bins: int = BINS) -> torch.Tensor:
    """The :data:`BINS` + 1 edges that :class:`StreamHistogram` fixes from its seed tokens ``x`` (finite,
    float64): their [min, max] widened by half the span on each side."""
    lo, hi = (float(t) for t in torch.aminmax(x))
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return torch.linspace(lo - span / 2, hi + span / 2, bins + 1, dtype=torch.float64)


def linear_bins(edges: torch.Tensor) -> bool:
    """Does ``torch.histogram`` over ``edges``' range give exactly these bins? It maps a value to its bin
    by (x − e0)/(e1 − e0)·bins, then corrects by one bin either way against the same linspace edges:
    exact unless a bin spans only a few ulps."""
    bins = edges.numel() - 1
    e0, e1 = float(edges[0]), float(edges[-1])
    width_ok = (e1 - e0) / bins > 1e-9 * max(abs(e0), abs(e1))
    if not (width_ok and math.isfinite(e1 - e0)):
        return False
    _, e = torch.histogram(edges[:1], bins=bins, range=(e0, e1))
    return bool(torch.equal(e, edges))


def count_bins(x: torch.Tensor, edges: torch.Tensor, linear: bool) -> tuple[torch.Tensor, int, int]:
    """(counts [bins] int64, underflow, overflow) of the finite float64 values ``x`` against ``edges``
    (a value in bin k when ``e_k <= x < e_k+1``, the last bin closed); ``linear``: :func:`linear_bins`."""
    bins = edges.numel() - 1
    e0, e1 = float(edges[0]), float(edges[-1])
    under = int((x < e0).sum())
    if linear:
        h, _ = torch.histogram(x, bins=bins, range=(e0, e1))
        h = h.to(torch.int64)
        inside = int(h.sum())
    else:
        xi = x[(x >= e0) & (x <= e1)]
        inside = xi.numel()
        h = torch.bincount(torch.clamp(torch.bucketize(xi, edges, right=True) - 1, 0, bins - 1), minlength=bins)
    return h, under, x.numel() - inside - under
