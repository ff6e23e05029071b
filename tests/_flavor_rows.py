"""Small helpers for the flavor tests: literal rows -> Parquet -> advcli.run -> output lists."""
from __future__ import annotations

import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import output_lists, run_table

TOKEN_COLS = {"mask": ("response_mask", pa.int8()), "old": ("old_log_probs", pa.float32()),
              "ref": ("ref_log_probs", pa.float32()), "values": ("values", pa.float32())}


def write_rows(rows: list[dict], path: str) -> str:
    cols = {"reward": pa.array([r["reward"] for r in rows], pa.float32())}
    for key, (name, typ) in TOKEN_COLS.items():
        if key in rows[0]:
            cols[name] = pa.array([r[key] for r in rows], pa.list_(typ))
    for key, typ in (("prompt_id", pa.string()), ("domain", pa.string()), ("step", pa.int64()),
                     ("truncated", pa.bool_())):
        if key in rows[0]:
            cols[key] = pa.array([r[key] for r in rows], typ)
    pq.write_table(pa.table(cols), path)
    return path


def run_rows(tmp_path, rows, flavor, settings, chunk_rows=3):
    src = write_rows(rows, os.path.join(tmp_path, "in.parquet"))
    t, result = run_table(src, os.path.join(tmp_path, "out.parquet"), flavor, settings, chunk_rows=chunk_rows)
    return output_lists(t), result


def assert_rows_close(got, expected, rtol=1e-5, atol=1e-6):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert len(g) == len(e), f"row {i}: length {len(g)} != {len(e)}"
        for t, (x, y) in enumerate(zip(g, e)):
            if isinstance(y, float) and math.isnan(y):
                assert math.isnan(x), f"row {i} pos {t}: {x} is not NaN"
            else:
                assert abs(x - y) <= atol + rtol * abs(y), f"row {i} pos {t}: {x} != {y}"
