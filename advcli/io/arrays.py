"""Reading Parquet columns as numpy, for what only looks at a file (inspect, stats, compare, audit, curate).

No torch here: these commands must start fast and work where only pyarrow is at hand.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..errors import AdvcliError
from ..io.lists import offsets_numpy


def provenance(schema: pa.Schema) -> dict | None:
    """The ``advcli`` key-value metadata of an advcli output (version, flavor, config, ...), or None."""
    import json

    raw = (schema.metadata or {}).get(b"advcli")
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def list_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets [R+1] starting at 0, flat values) of a list column chunk; slices and fixed-size lists too."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_fixed_size_list(arr.type):
        n = arr.type.list_size
        offsets = np.arange(len(arr) + 1, dtype=np.int64) * n
        values = arr.flatten()
    else:
        offsets = offsets_numpy(arr)
        offsets = offsets - offsets[0]
        values = arr.flatten()
    return offsets, values.to_numpy(zero_copy_only=False)


def row_sums(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Σ over each row's values (float64), empty rows 0."""
    c = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    return c[offsets[1:]] - c[offsets[:-1]]


def numeric(arr, name: str, file: str) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise AdvcliError(f"{file}: column {name!r} has {arr.null_count} null value(s)")
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def import_pandas() -> None:
    """Import pandas here, from Python, before pyarrow does: ``Array.to_numpy(zero_copy_only=False)`` imports it
    from pyarrow's compiled code the first time it converts, and a Ctrl-C held through that import
    (:func:`advcli.lazy_torch.import_held`) and raised again at its end was lost there (the command ran to its
    end). ``advcli stats`` and ``filter`` call it before they read; ``run`` never imports pandas."""
    import pandas  # noqa: F401


def keys_codes(arr) -> tuple[np.ndarray, np.ndarray]:
    """(codes [R] in first-appearance order, unique values) of a key column."""
    import pandas as pd

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    codes, uniques = pd.factorize(arr.to_numpy(zero_copy_only=False), sort=False)
    return codes.astype(np.int64), np.asarray(uniques)


def aligned_batches(files: list, columns: list[list[str]], batch_rows: int) -> Iterator[list[pa.RecordBatch]]:
    """Batches of several Parquet files read in lock step: each yield holds the same rows of every file, at most
    ``batch_rows`` of them and about :data:`~advcli.io.reader.CHUNK_TOKENS` tokens of the longest list column
    read (so that long responses do not make a batch large)."""
    from .reader import file_chunk_rows

    batch_rows = min([file_chunk_rows(f, cols, batch_rows) for f, cols in zip(files, columns)] or [batch_rows])
    iters = [f.iter_batches(batch_size=batch_rows, columns=cols, use_threads=True) for f, cols in zip(files, columns)]
    bufs: list[pa.RecordBatch | None] = [None] * len(files)
    while True:
        for i, it in enumerate(iters):
            while bufs[i] is None or bufs[i].num_rows == 0:
                nxt = next(it, None)
                if nxt is None:
                    bufs[i] = None
                    break
                bufs[i] = nxt
        if any(b is None for b in bufs):
            return
        n = min(b.num_rows for b in bufs)
        yield [b.slice(0, n) for b in bufs]
        bufs = [b.slice(n) for b in bufs]


def quantiles(x: np.ndarray, qs=(0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)) -> dict[str, float]:
    if x.size == 0:
        return {}
    vals = np.quantile(x.astype(np.float64), qs)
    return {f"p{round(q * 100):02d}": float(v) for q, v in zip(qs, vals)}
