"""Arrow list columns <-> flat torch tensors, without copying where Arrow allows it.

A ``list<float32>`` chunk is an offsets buffer plus a flat values buffer. A sliced ListArray's
``.values`` is the whole unsliced child, so the values are taken from ``offsets[0]`` to
``offsets[-1]`` and the offsets rebased to 0. Results go back the same way: the flat result tensor
plus the input's (rebased) offsets is the output list column.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from ..errors import AdvcliError
from .lists import arrow_from_numpy, offsets_numpy, primitive_numpy


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


def readonly_view(np_vals: np.ndarray) -> torch.Tensor:
    """torch.from_numpy on a read-only buffer without the warning and without a copy."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np_vals)


def list_column_to_tensor(arr: pa.Array, dtype: torch.dtype | None = None) -> tuple[np.ndarray, torch.Tensor]:
    """(offsets int64 [B+1] from 0, flat values tensor [N]) of a list column chunk."""
    offsets = list_offsets(arr)
    vals = list_values(arr)
    if pa.types.is_boolean(vals.type):
        t = torch.from_numpy(np.asarray(vals.to_numpy(zero_copy_only=False), dtype=np.int8))
    else:
        t = readonly_view(primitive_numpy(vals))
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return offsets, t


def offsets_array(offsets: np.ndarray) -> pa.Array:
    """int32 offsets from 0 as an Arrow array, to be shared by several output list columns."""
    return arrow_from_numpy(np.asarray(offsets).astype(np.int32, copy=False))


def tensor_to_list_array(values: torch.Tensor, offsets) -> pa.Array:
    """A flat tensor plus offsets from 0 (numpy, or an Arrow int32 array from :func:`offsets_array`
    to share one buffer between columns) -> ``list<float32>``. A float32 CPU tensor's values are
    not copied: the Arrow array views the tensor's memory (and keeps it alive)."""
    np_vals = values.detach().to("cpu", torch.float32).contiguous().numpy()
    offs = offsets if isinstance(offsets, pa.Array) else offsets_array(offsets)
    return pa.ListArray.from_arrays(offs, arrow_from_numpy(np_vals))


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


def check_mask_values(mask: torch.Tensor, offsets: np.ndarray, file: str, column: str, row_base: int) -> None:
    """Refuse a response mask holding anything but 0 and 1, naming the first bad row and position.

    Every framework multiplies by the mask (a weight of 2 would count a token twice, -1 would flip
    its sign) and counts Σm as the number of trained tokens, so only 0/1 masks have a meaning."""
    if mask.dtype == torch.bool or mask.numel() == 0:
        return
    if mask.dtype == torch.int8 and int(mask.view(torch.uint8).max()) <= 1:
        return  # one reduction: as uint8, exactly 0 and 1 are <= 1
    bad = (mask != 0) & (mask != 1)
    if bool(bad.any()):
        pos = int(torch.nonzero(bad)[0])
        row = int(np.searchsorted(offsets, pos, side="right") - 1)
        raise AdvcliError(f"{file}: column {column!r}, row {row_base + row}, position {pos - offsets[row]}: mask "
                          f"value {mask[pos].item()}; a response mask holds only 0 or 1",
                          hint="1 marks a trained token, 0 a masked one (prompt padding, tool output); "
                               "convert the column, e.g. (mask != 0).astype(int8)")
