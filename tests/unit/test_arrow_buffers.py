"""advcli.io.lists: Arrow <-> numpy through the buffers (no copy, no pandas), checked against
pyarrow's own conversions."""
import numpy as np
import pyarrow as pa
import pytest

from advcli.io.lists import arrow_from_numpy, offsets_numpy, primitive_numpy


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.float32, np.float64])
def test_arrow_from_numpy_views_the_array(dtype):
    values = (np.arange(11) * 3 - 7).astype(dtype)
    arr = arrow_from_numpy(values)
    assert arr.type == pa.from_numpy_dtype(dtype)
    assert arr.to_pylist() == values.tolist()
    assert arr.buffers()[1].address == values.ctypes.data  # the same memory: no copy
    strided = values[::2]  # not contiguous: copied once, values still right
    assert arrow_from_numpy(strided).to_pylist() == strided.tolist()
    assert len(arrow_from_numpy(np.zeros(0, dtype=dtype))) == 0


def test_arrow_from_numpy_keeps_its_memory_alive():
    arr = arrow_from_numpy(np.full(1000, 2.5, dtype=np.float32))  # the only reference is Arrow's
    junk = [np.ones(1000, dtype=np.float32) * 9 for _ in range(50)]  # reuse freed memory, if any
    assert arr.to_pylist() == [2.5] * 1000 and len(junk) == 50


def test_offsets_and_values_of_a_sliced_list_array():
    lists = pa.array([[1.0], [], [2.0, 3.0], [4.0, 5.0, 6.0], [7.0]], type=pa.list_(pa.float32()))
    part = lists.slice(2, 2)
    assert offsets_numpy(part).tolist() == [1, 3, 6]
    assert primitive_numpy(part.values).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert primitive_numpy(pa.array([1, 2, 3, 4], type=pa.int16()).slice(1, 2)).tolist() == [2, 3]
