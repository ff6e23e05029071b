"""Time and peak memory of a run whatever the input's row-group layout (issue 46, item 8).

    python benchmarks/row_groups.py                  # 10,000 rows: one row group vs 10,000 of one row
    python benchmarks/row_groups.py --rows 2000      # smaller

The same rows are written twice into ``bench_data/row_groups/`` (git-ignored; deleted afterwards): as one
row group, and as one row group per row. ``advcli run`` (full output) runs on each in a fresh subprocess;
wall time, CPU time and peak RSS come from ``os.wait4``. Bounded means the many-row-group input costs
about what the one-row-group input does (an input of many small row groups is written in the writer's
own row groups instead of being spliced, advcli.pipeline.write.few_row_groups), and both outputs hold
the same table.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "bench_data", "row_groups")


def run(src: str, out: str) -> tuple[float, float, float]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), ADVCLI_SERVER="off")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "advcli", "run", src, "-o", out, "--flavor", "verl", "--set",
                          "algorithm.adv_estimator=grpo", "-q", "--force"], env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"advcli run {src} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import pyarrow.parquet as pq

    from advcli.sample import make_table

    os.makedirs(DATA, exist_ok=True)
    try:
        t = make_table(args.rows, group_size=8, min_len=4, max_len=64, seed=3)
        one, many = os.path.join(DATA, "one.parquet"), os.path.join(DATA, "many.parquet")
        pq.write_table(t, one)
        pq.write_table(t, many, row_group_size=1)
        outs = {}
        for name, src in (("1 row group", one), (f"{args.rows} row groups", many)):
            out = os.path.join(DATA, f"out_{os.path.basename(src)}")
            wall, cpu, rss = run(src, out)
            outs[name] = out
            print(f"{name:>20}: {wall:6.1f} s wall, {cpu:6.1f} s CPU, peak RSS {rss:6.0f} MiB", flush=True)
        a, b = (pq.read_table(o) for o in outs.values())
        print("outputs equal:", a.equals(b))
    finally:
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
