"""The run's histograms: exact counts over equal bins between the exact min and max
(:func:`histogram`, for row figures and row-constant advantages), and :class:`StreamHistogram`, the
token histogram whose edges are fixed from the run's first tokens and whose counts are exact. Numpy only."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .arrays import to_numpy
from .quantile_sketch import RESERVOIR

BINS = 50


def equal_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """``bins`` + 1 equal-width edges from ``lo`` to ``hi`` (float64, ``np.linspace``: both ends exact)."""
    return np.linspace(lo, hi, bins + 1, dtype=np.float64)


def histogram(values, weights=None, bins: int = BINS, over: str = "rows", note: str = "") -> dict[str, Any]:
    """Exact counts over ``bins`` equal bins between the min and max of ``values`` (the last bin is
    closed, as numpy's); one bin of width 1 around the value when all are equal."""
    v = to_numpy(values, np.float64).ravel()
    w = np.ones(v.size, np.int64) if weights is None else to_numpy(weights, np.int64).ravel()
    ok = np.isfinite(v) & (w > 0)
    v, w = v[ok], w[ok]
    if v.size == 0:
        return {"edges": [], "counts": [], "underflow": 0, "overflow": 0, "over": over, "exact": True, "note": note}
    lo, hi = float(v.min()), float(v.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = equal_edges(lo, hi, bins)
    idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, weights=w.astype(np.float64), minlength=bins)
    return {"edges": edges.tolist(), "counts": np.rint(counts).astype(np.int64).tolist(), "underflow": 0,
            "overflow": 0, "over": over, "exact": True, "note": note}


class StreamHistogram:
    """Exact token counts over :data:`BINS` equal bins whose edges are fixed from the run's first
    ``seed_tokens`` finite valid tokens (see the module docstring); the tokens before that are held."""

    def __init__(self, bins: int = BINS, seed_tokens: int = RESERVOIR):
        self.bins = bins
        self.seed_tokens = seed_tokens
        self.edges: np.ndarray | None = None
        self.linear = False  # np.histogram (linear estimate + local correction) gives the same bins
        self.counts = np.zeros(bins, np.int64)
        self.under = 0
        self.over = 0
        self.pending: list[np.ndarray] = []
        self.npending = 0

    def add(self, x: np.ndarray) -> None:
        """``x`` float64: the next finite valid tokens' values, in input order."""
        if x.size == 0:
            return
        if self.edges is None:
            self.pending.append(x)
            self.npending += x.size
            if self.npending >= self.seed_tokens:
                self._fix()
            return
        self._count(x)

    def _fix(self) -> None:
        x = np.concatenate(self.pending)
        self.pending, self.npending = [], 0
        self.fix_edges(seed_edges(x[:self.seed_tokens], self.bins))
        self._count(x)

    def fix_edges(self, edges) -> None:
        """Count against ``edges`` (:func:`seed_edges`) from now on: set by the Ray engine, which finds
        the run's first tokens before its workers count theirs (:func:`count_bins`)."""
        self.edges = to_numpy(edges, np.float64)
        self.linear = linear_bins(self.edges)

    def _count(self, x: np.ndarray) -> None:
        self.add_counts(*count_bins(x, self.edges, self.linear))

    def add_counts(self, counts: np.ndarray, under: int, over: int) -> None:
        """Counts made elsewhere against this histogram's edges (:func:`count_bins`)."""
        self.counts += counts
        self.under += int(under)
        self.over += int(over)

    def result(self, note: str) -> dict[str, Any]:
        if self.edges is None and self.pending:
            self._fix()
        return {"edges": [] if self.edges is None else self.edges.tolist(), "counts": self.counts.tolist(),
                "underflow": self.under, "overflow": self.over, "over": "tokens", "exact": True, "note": note}


def seed_edges(x, bins: int = BINS) -> np.ndarray:
    """The :data:`BINS` + 1 edges that :class:`StreamHistogram` fixes from its seed tokens ``x`` (finite,
    float64): their [min, max] widened by half the span on each side."""
    x = to_numpy(x, np.float64)
    lo, hi = float(x.min()), float(x.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    return equal_edges(lo - span / 2, hi + span / 2, bins)


def linear_bins(edges: np.ndarray) -> bool:
    """Does ``np.histogram`` over ``edges``' range give exactly these bins? It maps a value to its bin
    by (x − e0)/(e1 − e0)·bins, then corrects by one bin either way against its own linspace edges:
    exact when those edges are these (and no bin spans only a few ulps)."""
    bins = edges.size - 1
    e0, e1 = float(edges[0]), float(edges[-1])
    width_ok = (e1 - e0) / bins > 1e-9 * max(abs(e0), abs(e1))
    if not (width_ok and math.isfinite(e1 - e0)):
        return False
    return bool(np.array_equal(np.histogram_bin_edges(edges[:1], bins=bins, range=(e0, e1)), edges))


def count_bins(x: np.ndarray, edges: np.ndarray, linear: bool) -> tuple[np.ndarray, int, int]:
    """(counts [bins] int64, underflow, overflow) of the finite float64 values ``x`` against ``edges``
    (a value in bin k when ``e_k <= x < e_k+1``, the last bin closed); ``linear``: :func:`linear_bins`."""
    bins = edges.size - 1
    e0, e1 = float(edges[0]), float(edges[-1])
    under = int((x < e0).sum())
    if linear:
        h = np.histogram(x, bins=bins, range=(e0, e1))[0].astype(np.int64)
        inside = int(h.sum())
    else:
        xi = x[(x >= e0) & (x <= e1)]
        inside = xi.size
        h = np.bincount(np.clip(np.searchsorted(edges, xi, side="right") - 1, 0, bins - 1),
                        minlength=bins).astype(np.int64)
    return h, under, x.size - inside - under
