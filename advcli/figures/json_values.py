"""The one conversion every figure of :mod:`advcli.figures` goes through on its way to JSON."""
from __future__ import annotations

import math


def figure(x) -> float | None:
    """A Python float, None for NaN/inf/None (JSON-able)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
