"""Arrow list-array helpers that need neither torch nor pandas."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import AdvcliError


def offsets_numpy(arr: pa.Array) -> np.ndarray:
    """A (possibly sliced) list array's offsets [B+1] as int64, read from the offsets buffer.

    ``np.asarray(arr.offsets, dtype=...)`` converts element by element (~2 ms per chunk) and
    ``arr.offsets.to_numpy()`` imports pandas (~0.3 s of start-up) on the way."""
    width = 8 if pa.types.is_large_list(arr.type) else 4
    buf = arr.buffers()[1]
    if buf is None or buf.size < (arr.offset + len(arr) + 1) * width:  # an empty array may have no buffer
        return np.zeros(1, dtype=np.int64)
    offs = np.frombuffer(buf, dtype=np.int64 if width == 8 else np.int32, count=len(arr) + 1,
                         offset=arr.offset * width)
    return offs.astype(np.int64)


_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
          pa.float16(): np.float16, pa.float32(): np.float32, pa.float64(): np.float64}


def primitive_numpy(arr: pa.Array) -> np.ndarray:
    """A numeric array without nulls as a read-only numpy view of its data buffer (no copy).

    ``Array.to_numpy`` does the same but imports pandas (~0.3 s) the first time; other types
    (booleans are bit-packed) go through it."""
    dtype = _NUMPY.get(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    if len(arr) == 0:
        return np.zeros(0, dtype=dtype)
    item = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * item)


_ARROW = {np.dtype(v): k for k, v in _NUMPY.items()}


def arrow_from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-D numeric numpy array as an Arrow array viewing its memory (no copy; it keeps ``values``
    alive).

    ``pa.array(ndarray)`` does the same but imports pandas (~0.2 s) the first time it is called,
    which in a run is when the first output batch is built: on the critical path."""
    typ = _ARROW.get(values.dtype)
    if typ is None or values.ndim != 1:
        return pa.array(values)
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)])


def _compute(name: str, *args):
    """Arrow compute function ``name`` on ``args``. ``Array.dictionary_encode()``, ``.take()`` and
    the like import ``pyarrow.compute``, whose function docstrings pull in ``pydoc`` (~0.06 s, on a
    run's critical path); the kernels live in ``pyarrow._compute``, called directly when present."""
    try:
        from pyarrow._compute import call_function
    except ImportError:  # a pyarrow that moved it: the public route
        import pyarrow.compute as pc

        return getattr(pc, name)(*args)
    return call_function(name, list(args))


def dictionary_codes(arr: pa.Array) -> np.ndarray:
    """int64 codes of ``arr``'s values in first-appearance order (Arrow's hash dictionary encoding)."""
    return primitive_numpy(_compute("dictionary_encode", arr).indices).astype(np.int64)


def take(arr, indices: np.ndarray):
    """``arr.take(indices)`` (an Array or ChunkedArray) without importing ``pyarrow.compute``."""
    return _compute("take", arr, arrow_from_numpy(np.asarray(indices, dtype=np.int64)))


def list_offsets(arr: pa.Array) -> np.ndarray:
    """int64 offsets [B+1] starting at 0 (fixed-size lists too)."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return np.arange(len(arr) + 1, dtype=np.int64) * size
    offs = offsets_numpy(arr)
    return offs - offs[0]


def list_values(arr: pa.Array) -> pa.Array:
    """The flat child values covering exactly this (possibly sliced) array's rows."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size)
    offs = arr.offsets
    start, stop = offs[0].as_py(), offs[-1].as_py()
    return arr.values.slice(start, stop - start)


def check_no_nulls(arr: pa.Array, file: str, column: str, row_base: int) -> None:
    """Refuse null rows and null elements inside lists, naming the first bad row."""
    if arr.null_count:
        bad = int(np.nonzero(~np.asarray(arr.is_valid()))[0][0])
        raise AdvcliError(f"{file}: column {column!r}, row {row_base + bad}: null value",
                          hint="fill or drop the rows with missing values before running advcli")
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        vals = list_values(arr)
        if vals.null_count:
            offs = list_offsets(arr)
            pos = int(np.nonzero(~np.asarray(vals.is_valid()))[0][0])
            row = int(np.searchsorted(offs, pos, side="right") - 1)
            raise AdvcliError(f"{file}: column {column!r}, row {row_base + row}: null element at position "
                              f"{pos - offs[row]} of the list",
                              hint="token lists must be complete; fill nulls (e.g. 0 for padding) or drop the row")


def factorize(values: list[pa.Array]) -> np.ndarray:
    """int64 codes (first-appearance order) for a key column split over several arrays.

    Arrow's hash dictionary encoding (pandas.factorize's codes; importing pandas alone costs ~0.3 s of
    start-up). Float keys keep pandas.factorize, whose NaN -> -1 rule the callers rely on."""
    if not values:  # an input of 0 rows
        return np.zeros(0, dtype=np.int64)
    arr = pa.chunked_array(values).combine_chunks() if len(values) != 1 else values[0]
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if pa.types.is_floating(arr.type):
        import pandas as pd

        codes, _ = pd.factorize(arr.to_numpy(zero_copy_only=False), sort=False)
        return codes.astype(np.int64)
    return dictionary_codes(arr)
