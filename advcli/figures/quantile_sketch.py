"""Quantiles of the run's figures: exact weighted quantiles (:func:`quantiles`) and the fixed,
chunk-independent sample of valid-token advantages they use when a run's advantages are not
row-constant (:func:`sample_ordinals`, :class:`TokenSample`). See :mod:`advcli.figures` for which
figure uses which. Numpy only."""
from __future__ import annotations

import numpy as np

from ..report.catalog import QUANTILES
from .arrays import to_numpy
from .json_values import figure

RESERVOIR = 65536
SEED = 0x5EED

_M1 = 0x9E3779B97F4A7C15 - (1 << 64)  # splitmix64 constants as signed int64
_M2 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M3 = 0x94D049BB133111EB - (1 << 64)


def hash_keys(index, seed: int = SEED) -> np.ndarray:
    """splitmix64 of ``index + seed`` in int64 arithmetic (wrapping): a fixed pseudo-random key per index."""
    x = to_numpy(index, np.int64).copy()
    with np.errstate(over="ignore"):
        return _mix(x + np.int64(seed))


def _mix(x: np.ndarray) -> np.ndarray:
    x = x * np.int64(_M1)
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * np.int64(_M2)
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * np.int64(_M3)
    x = x ^ ((x >> 31) & ((1 << 33) - 1))
    return x


def quantiles(values, weights=None) -> dict[str, float | None]:
    """``{"p1": ..., "p99": ...}`` as ``np.quantile(expanded, q)`` (linear), where ``expanded`` repeats
    each value ``weights`` times (integer weights; all 1 when None). Exact, no expansion."""
    v = to_numpy(values, np.float64).ravel()
    w = np.ones(v.size, np.int64) if weights is None else to_numpy(weights, np.int64).ravel()
    keep = w > 0
    v, w = v[keep], w[keep]
    n = int(w.sum())
    if n == 0:
        return {f"p{q}": None for q in QUANTILES}
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)  # token k (0-based) has value v[searchsorted(cum, k, right=True)]
    pos = np.array([q / 100 * (n - 1) for q in QUANTILES], dtype=np.float64)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    frac = pos - lo.astype(np.float64)
    vlo = v[np.searchsorted(cum, lo, side="right")]
    vhi = v[np.searchsorted(cum, hi, side="right")]
    out = vlo + frac * (vhi - vlo)
    return {f"p{q}": figure(x) for q, x in zip(QUANTILES, out.tolist())}


def sample_ordinals(total: int, size: int, seed: int = SEED) -> np.ndarray:
    """The sorted ordinals (0-based, among a run's ``total`` valid tokens in input order) that the
    advantage sample keeps: all of ``0 .. size−1`` when ``total <= size``; otherwise ``size`` strata
    ``[⌊j·total/size⌋, ⌊(j+1)·total/size⌋)`` and from stratum j the token at offset
    ``hash_keys(j, seed) mod (stratum width)``."""
    if total <= size:
        return np.arange(size, dtype=np.int64)
    j = np.arange(size, dtype=np.int64)
    lo = j * total // size
    width = (j + 1) * total // size - lo
    return lo + np.remainder(hash_keys(j, seed), width)


class TokenSample:
    """A fixed sample of the run's valid-token advantages, drawn by ordinal (see
    :func:`sample_ordinals`): each chunk costs a search in the sorted ordinals plus one gather of the
    tokens that fall in it, whatever the chunk size; non-finite values are left out."""

    def __init__(self, size: int = RESERVOIR, seed: int = SEED):
        self.size, self.seed = size, seed
        self.ordinals: np.ndarray | None = None
        self.expected = 0
        self.parts: list[np.ndarray] = []
        self.total = 0  # valid tokens seen

    def prepare(self, total: int) -> None:
        """``total``: the run's number of valid tokens (known from the row pass)."""
        self.expected = int(total)
        self.ordinals = sample_ordinals(self.expected, self.size, self.seed)

    def add(self, x: np.ndarray) -> None:
        """``x`` float64: the next valid tokens' values, in input order."""
        n = x.size
        self.add_picked(self.pick(np.arange(self.total, self.total + n, dtype=np.int64), x), n)

    def pick(self, ordinals: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The finite values of ``x`` that the sample keeps, ``ordinals`` [n] (increasing) being their
        tokens' places among the run's valid tokens: what a chunk sends instead of its tokens."""
        if self.ordinals is None:
            self.prepare(0)
        if x.size == 0 or self.ordinals.size == 0:
            return np.zeros(0, np.float64)
        pos = np.searchsorted(self.ordinals, ordinals)
        hit = self.ordinals[np.minimum(pos, self.ordinals.size - 1)] == ordinals
        v = x[hit]
        return v[np.isfinite(v)]

    def add_picked(self, v: np.ndarray, n: int) -> None:
        """The next ``n`` valid tokens, of which the sample keeps ``v`` (:meth:`pick`), in input order."""
        self.total += int(n)
        if v.size:
            self.parts.append(v)

    @property
    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, np.float64)

    @property
    def exact(self) -> bool:
        """Every valid token is in the sample."""
        return self.expected <= self.size and self.total <= self.size
