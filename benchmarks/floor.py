"""The I/O floor: a plain pyarrow read of every column of the dump, then a write of the augmented
table (the input plus two new ``list<float32>`` columns) with the fastest plain writer settings
measured here: zstd, dictionary encoding only on id/text columns, byte-stream-split float columns.

No math: the two new columns are zeros sharing the mask's offsets. ``python benchmarks/floor.py IN OUT``.
"""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.io.writer import _float_columns as float_columns  # the same float columns advcli writes split


def main(src: str, dst: str) -> None:
    table = pq.read_table(src)
    mask = table.column("response_mask").combine_chunks()
    offsets = mask.offsets
    n = int(offsets[-1].as_py()) - int(offsets[0].as_py())
    new = pa.ListArray.from_arrays(offsets, pa.array(np.zeros(n, dtype=np.float32)))
    table = table.append_column("advantages", new).append_column("returns", new)
    dict_cols = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_binary(f.type)]
    pq.write_table(table, dst, compression="zstd", use_dictionary=dict_cols,
                   use_byte_stream_split=float_columns(table.schema), write_statistics=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
