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

from .lists import arrow_from_numpy, check_no_nulls, list_offsets, list_values, primitive_numpy
from .value_checks import check_mask

__all__ = ["check_mask_values", "check_no_nulls", "list_column_to_tensor", "list_offsets", "list_values",
           "offsets_array", "readonly_view", "tensor_to_list_array"]


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
        np_vals = primitive_numpy(vals)
        if np_vals.dtype.kind == "u" and np_vals.itemsize > 1:  # torch compares no uint16/32/64 (a uint32 mask):
            np_vals = np_vals.astype(np.int64)  # as int64 (a value past its range wraps, and a mask check refuses it)
        t = readonly_view(np_vals)
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


def check_mask_values(mask: torch.Tensor, offsets: np.ndarray, file: str, column: str, row_base: int) -> None:
    """Refuse a response mask holding anything but 0 and 1 (:func:`advcli.io.value_checks.check_mask`), with
    one reduction for the usual int8/bool masks."""
    if mask.dtype == torch.bool or mask.numel() == 0:
        return
    if mask.dtype == torch.int8 and int(mask.view(torch.uint8).max()) <= 1:
        return  # one reduction: as uint8, exactly 0 and 1 are <= 1
    check_mask(mask.numpy(), offsets, file, column, row_base)
