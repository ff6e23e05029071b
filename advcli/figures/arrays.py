"""The figures' one entry for arrays: :func:`to_numpy` turns whatever a caller holds (a numpy array, a
torch tensor on any device, a list) into a numpy array, without importing torch; :func:`row_reduce`
reduces a flat array row by row; :class:`Codes` is a grouping (code per row) in numpy. The figures
are numpy only, so that ``advcli stats`` runs without torch while ``advcli run`` hands its tensors over."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def to_numpy(x, dtype=None) -> np.ndarray:
    """``x`` as a numpy array (``dtype`` when given): a torch tensor (any device) is detached and moved to
    the CPU, recognised by its ``detach`` method so that torch need not be imported here."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().to("cpu")
        if str(x.dtype) == "torch.bfloat16":  # numpy has no bfloat16: widened, exactly
            x = x.float()
        x = x.numpy()
    return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)


def writable_state(state: dict) -> dict:
    """An object's ``__dict__`` as unpickled, its read-only numpy arrays copied: Ray hands the arrays of an
    actor's arguments over zero-copy and read-only, and the collector adds into its arrays in place."""
    return {k: v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v for k, v in state.items()}


def offsets_of(layout) -> np.ndarray:
    """The row offsets [B+1] (int64) of a layout: an :class:`advcli.ops.ragged.Ragged` or the offsets themselves."""
    return to_numpy(getattr(layout, "offsets", layout), np.int64)


_FILL = {"sum": 0.0, "min": np.inf, "max": -np.inf}
_UFUNC = {"sum": np.add, "min": np.minimum, "max": np.maximum}


def row_reduce(x: np.ndarray, offsets: np.ndarray, reduce: str) -> np.ndarray:
    """Per-row ``reduce`` ("sum" | "min" | "max") of the flat float64 ``x`` cut at ``offsets`` [B+1]
    (``offsets[-1] == x.size``), each row reduced on its own (``ufunc.reduceat``), so that a row's result
    does not depend on the rows around it. Empty rows give 0 / +inf / −inf; NaN propagates."""
    lens = np.diff(offsets)
    out = np.full(lens.size, _FILL[reduce], dtype=np.float64)
    has = lens > 0
    if x.size and has.any():
        # the starts of the non-empty rows: each segment runs to the next non-empty row's start
        out[has] = _UFUNC[reduce].reduceat(x, offsets[:-1][has])
    return out


@dataclass
class Codes:
    """Rows cut into ``num_groups`` groups (steps, scopes, prompts): ``codes`` [R] int64 in 0..num_groups−1."""

    codes: np.ndarray
    num_groups: int

    @staticmethod
    def of(g) -> Codes | None:
        """From an :class:`advcli.ops.groups.GroupIndex` (torch), a :class:`Codes`, or a code array."""
        if g is None or isinstance(g, Codes):
            return g
        if hasattr(g, "codes") and hasattr(g, "num_groups"):
            return Codes(to_numpy(g.codes, np.int64), int(g.num_groups))
        c = to_numpy(g, np.int64)
        return Codes(c, int(c.max()) + 1 if c.size else 0)

    @property
    def sizes(self) -> np.ndarray:
        """Rows per group [G] int64."""
        return np.bincount(self.codes, minlength=self.num_groups).astype(np.int64)

    def sum(self, x: np.ndarray) -> np.ndarray:
        """Σ of the integer per-row ``x`` per group [G] (int64; exact below 2**53)."""
        return np.rint(np.bincount(self.codes, weights=np.asarray(x, np.float64),
                                   minlength=self.num_groups)).astype(np.int64)
