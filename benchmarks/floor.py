"""The I/O floor: a plain pyarrow read of every column of the dump, then a write of the augmented
table with the fastest plain writer settings measured here: zstd, dictionary encoding only on
id/text columns, byte-stream-split float columns. No math.

``python benchmarks/floor.py IN OUT [--like zeros|grpo|gae]`` — what the new columns hold:

* ``zeros`` (default): two ``list<float32>`` columns of zeros (what compresses best: a lower bound);
* ``grpo``: the table ``advcli run`` writes for a row-level estimator — ``advantages`` and ``returns``
  hold one value per row on its mask=1 tokens (the reward column broadcast, 0 on mask=0);
* ``gae``: the table ``advcli run --write-columns advantages,returns`` writes for GAE —
  ``advantages`` and ``returns``, token-varying floats (the ``values`` and ``old_log_probs`` data of
  the input reused: float noise that compresses like real advantages);
* ``gae+tlr``: the table of GAE's default run with KL in the reward — ``advantages``, ``returns`` and
  ``token_level_rewards`` (``ref_log_probs`` reused for the third).

The data for the new columns is taken from the input without computing anything (a broadcast or a
buffer shared with an input column), so the floor stays read + write.
"""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from advcli.io.lists import offsets_numpy
from advcli.io.writer import _float_columns as float_columns  # the same float columns advcli writes split


def new_columns(table: pa.Table, like: str) -> dict[str, pa.Array]:
    mask = table.column("response_mask").combine_chunks()
    offsets = mask.offsets
    offs = offsets_numpy(mask)
    n = int(offs[-1] - offs[0])
    if like == "zeros":
        zeros = pa.ListArray.from_arrays(offsets, pa.array(np.zeros(n, dtype=np.float32)))
        return {"advantages": zeros, "returns": zeros}
    if like == "grpo":
        reward = table.column("reward").to_numpy().astype(np.float32)
        m = mask.values.slice(offs[0], n).to_numpy().astype(np.float32)
        vals = pa.ListArray.from_arrays(offsets, pa.array(np.repeat(reward, np.diff(offs)) * m))
        return {"advantages": vals, "returns": vals}
    if like in ("gae", "gae+tlr"):
        out = {}
        pairs = [("advantages", "values"), ("returns", "old_log_probs")]
        for new, src in pairs + ([("token_level_rewards", "ref_log_probs")] if like == "gae+tlr" else []):
            col = table.column(src).combine_chunks()
            out[new] = pa.ListArray.from_arrays(col.offsets, col.values)
        return out
    raise SystemExit(f"--like {like!r}: expected zeros, grpo, gae or gae+tlr")


def main(src: str, dst: str, like: str = "zeros") -> None:
    table = pq.read_table(src)
    for name, arr in new_columns(table, like).items():
        table = table.append_column(name, arr)
    dict_cols = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_binary(f.type)]
    pq.write_table(table, dst, compression="zstd", use_dictionary=dict_cols,
                   use_byte_stream_split=float_columns(table.schema), write_statistics=False)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--like", default="zeros", choices=["zeros", "grpo", "gae", "gae+tlr"])
    a = ap.parse_args()
    main(a.src, a.dst, a.like)
