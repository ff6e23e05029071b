"""The advantage at each token position: streaming count/Σ/Σ² per position over mask=1 tokens, the
mean and std bucketed to at most :data:`POSITION_POINTS` points; memory is one accumulator per
position. Fed by the run's observer (``advcli run --report``) and by ``advcli stats`` from a file.
Numpy only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

POSITION_POINTS = 200


class PositionStats:
    """Streaming count/Σ/Σ² of the advantage per token position over mask=1 tokens (one slot per position)."""

    def __init__(self):
        import numpy as np
        self.cnt = np.zeros(0, np.float64)
        self.s1 = np.zeros(0, np.float64)
        self.s2 = np.zeros(0, np.float64)

    def add(self, offs: np.ndarray, adv: np.ndarray, mask: np.ndarray | None) -> None:
        part = position_sums(offs, adv, mask)
        if part is not None:
            self.add_sums(*part)

    def add_sums(self, cnt: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> None:
        """One chunk's :func:`position_sums`, made where its tokens are (a Ray worker)."""
        import numpy as np
        n = cnt.size
        if n > self.cnt.size:
            self.cnt, self.s1, self.s2 = (np.concatenate([x, np.zeros(n - x.size)])
                                          for x in (self.cnt, self.s1, self.s2))
        self.cnt[:n] += cnt
        self.s1[:n] += s1
        self.s2[:n] += s2

    def result(self, points: int = POSITION_POINTS) -> dict | None:
        import numpy as np
        if self.cnt.size == 0:
            return None
        width = max(1, -(-self.cnt.size // points))
        nb = -(-self.cnt.size // width)
        pad = nb * width - self.cnt.size
        c, t1, t2 = (np.concatenate([x, np.zeros(pad)]).reshape(nb, width).sum(1) for x in (self.cnt, self.s1, self.s2))
        keep = c > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = t1 / c
            std = np.sqrt(np.maximum(t2 / c - mean * mean, 0))
        starts = np.arange(nb) * width
        return {"positions": starts[keep].tolist(), "bucket_width": width, "mean": mean[keep].tolist(),
                "std": std[keep].tolist(), "lo": (mean - std)[keep].tolist(), "hi": (mean + std)[keep].tolist(),
                "count": c[keep].astype(np.int64).tolist(), "band": "mean ± 1 std",
                "note": "advantage at each token position (0 = first response token), mask=1 tokens"
                        + (f", positions bucketed by {width}" if width > 1 else "")}


def position_sums(offs: np.ndarray, adv: np.ndarray, mask: np.ndarray | None):
    """One chunk's (count, Σa, Σa²) per token position [longest row] over its mask=1 tokens with a finite
    advantage (float64 each), or None when it has none: what :meth:`PositionStats.add_sums` adds."""
    import numpy as np
    m = np.ones(adv.size, dtype=bool) if mask is None else mask.astype(bool)
    lens = np.diff(offs)
    pos = np.arange(adv.size, dtype=np.int64) - np.repeat(offs[:-1], lens)
    pos, a = pos[m], adv[m].astype(np.float64)
    fin = np.isfinite(a)
    pos, a = pos[fin], a[fin]
    if pos.size == 0:
        return None
    n = int(pos.max()) + 1
    return (np.bincount(pos, minlength=n).astype(np.float64), np.bincount(pos, weights=a, minlength=n),
            np.bincount(pos, weights=a * a, minlength=n))


def by_position(batches, mask_col: str | None, points: int = POSITION_POINTS) -> dict | None:
    """Mean/std/count of ``advantages`` per token position over mask=1 tokens, bucketed to ``points``.

    ``batches`` yields record batches holding ``advantages`` (and ``mask_col``).
    """
    from ..io.arrays import list_parts

    acc = PositionStats()
    for batch in batches:
        offs, adv = list_parts(batch.column("advantages"))
        m = list_parts(batch.column(mask_col))[1] if mask_col and mask_col in batch.schema.names else None
        acc.add(offs, adv, m)
    return acc.result(points)
