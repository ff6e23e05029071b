"""--engine ray against the local engine on 1, 2 and 4 workers, and what the driver's row table costs.

    python benchmarks/ray_scale.py                    # both parts, medians of 3 rounds
    python benchmarks/ray_scale.py --part scale --workers 1,2 --runs 5
    python benchmarks/ray_scale.py --part rows --row-sizes 100000,400000,1600000

**scale**: two dumps (``advcli sample --rows 16384 --max-len 1024 --steps 4``: ~8.5M tokens, and a
quarter of it; rewritten with row groups of ``--row-group`` 512 rows, so that Ray Data can cut them
into blocks for several workers), verl GRPO (one Ray Data pass) and verl GAE (whitened: two passes), timed in this
process with the Python API (``run_pipeline`` / ``run_ray``, the CLI's code without its start-up),
the two sizes interleaved in each of ``--runs`` rounds, medians.
The Ray engine runs on a **local Ray instance** started with ``num_cpus = W + 1``, which gives W worker
actors (the engine leaves one CPU to Ray Data's read and write tasks): the simplest way to have exactly
W worker processes, and on one host a Cluster of several raylets adds only processes, not cores.
Throughput is 1 / the slope of wall seconds against tokens between the two dumps (so the fixed costs
drop out: actor start-up, which imports torch in each new actor, the statistics actor, Ray Data's
scheduling), then per worker; the fixed cost is the intercept, and ``ray.init`` of the instance is
timed apart. CPU seconds are the driver's (this process): the workers' are in Ray's processes.

**rows**: what the driver holds and does per row, which does not divide by the workers: dumps of
increasing row counts with 4-8 tokens per row (``advcli sample --min-len 4 --max-len 8``, so rows
dominate, not tokens); each size in a fresh subprocess that opens the dump, makes the plan and runs
:func:`advcli.pipeline.prepare_run` (pass 1 on the driver and the resolution: groups, steps, row-level
advantages) and builds the run statistics' observer, as ``run_ray`` does on its driver. Peak RSS
(``os.wait4``) minus that of a subprocess that stops before ``prepare_run``; seconds of prepare_run + observer;
the pickled size of the table broadcast to the workers (``lean(res)``). Per row = the slope between the
smallest and the largest dump, so fixed costs drop out.

Data lives in ``bench_data/ray_scale/`` (git-ignored). Run it under ``flock`` on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "bench_data", "ray_scale")
PY = sys.executable
sys.path.insert(0, ROOT)

CONFIGS = {"grpo": [("algorithm.adv_estimator", "grpo")],
           "gae": [("algorithm.adv_estimator", "gae")]}


def sample(path: str, rows: int, min_len: int, max_len: int, steps: int = 4, row_group: int | None = None) -> str:
    """``advcli sample`` (one row group); ``row_group``: rewritten with row groups of that many rows
    (Ray Data reads at most one block per row group, so a one-row-group file feeds one actor)."""
    if not os.path.exists(path):
        print(f"generating {path} ({rows:,} rows)", file=sys.stderr)
        subprocess.run([PY, "-m", "advcli", "sample", path, "--rows", str(rows), "--min-len", str(min_len),
                        "--max-len", str(max_len), "--steps", str(steps), "--force"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        if row_group:
            import pyarrow.parquet as pq

            pq.write_table(pq.read_table(path), path, row_group_size=row_group, compression="zstd")
    return path


def tokens_of(path: str) -> int:
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    col = [i for i in range(md.num_columns) if md.schema.column(i).path.startswith("response_mask.")][0]
    return sum(md.row_group(g).column(col).num_values for g in range(md.num_row_groups))


def med(xs):
    return statistics.median(xs)


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


# ----------------------------------------------------------------------------------------- scale
def part_scale(args) -> dict:
    import ray

    from advcli.engines.ray_engine import run_ray
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline

    rg = args.row_group
    big = sample(os.path.join(DATA, f"scale-{args.rows}-{args.max_len}-rg{rg}.parquet"), args.rows, 16,
                 args.max_len, row_group=rg)
    small = sample(os.path.join(DATA, f"scale-{args.rows // 4}-{args.max_len}-rg{rg}.parquet"), args.rows // 4, 16,
                   args.max_len, row_group=rg)
    ntok = {big: tokens_of(big), small: tokens_of(small)}
    out = os.path.join(DATA, "out")
    cfgs = {k: resolve("verl", v) for k, v in CONFIGS.items()}

    def local(est, src):
        cfg, native = cfgs[est]
        run_pipeline([src], out + ".parquet", cfg, flavor="verl", native=native, device="cpu", force=True)

    def on_ray(est, src):
        cfg, native = cfgs[est]
        run_ray([src], out, cfg, flavor="verl", native=native, device="cpu", force=True)

    def measure(fn, est, workers: int) -> dict:
        """Rounds of (small, big) interleaved; per round the slope (seconds per token) and intercept."""
        rounds = []
        for _ in range(args.runs):
            ws, _ = timed(lambda: fn(est, small))
            wb, cb = timed(lambda: fn(est, big))
            slope = (wb - ws) / (ntok[big] - ntok[small])
            rounds.append((slope, ws - slope * ntok[small], wb, cb))
        slope = med([r[0] for r in rounds])
        return {"tok_s": 1 / slope, "tok_s_worker": 1 / slope / workers, "fixed": med([r[1] for r in rounds]),
                "wall_big": med([r[2] for r in rounds]), "cpu_driver_big": med([r[3] for r in rounds])}

    res = {"tokens": ntok[big], "tokens_small": ntok[small], "rows": args.rows, "row_group": rg, "local": {},
           "ray": {}}
    for est in CONFIGS:
        local(est, small)  # warm (imports, allocator)
        res["local"][est] = measure(local, est, 1)
        print(f"local {est}: {res['local'][est]}", file=sys.stderr)
    for w in args.workers:
        ray.shutdown()
        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=w + 1, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
        r = {"ray_init": time.perf_counter() - t0}
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        for est in CONFIGS:
            r[est] = measure(on_ray, est, w)
            print(f"ray W={w} {est}: {r[est]}", file=sys.stderr)
        res["ray"][w] = r
        ray.shutdown()
    shutil.rmtree(out, ignore_errors=True)
    if os.path.exists(out + ".parquet"):
        os.remove(out + ".parquet")
    return res


def print_scale(res: dict, runs: int) -> None:
    print(f"\n## scale: {res['rows']:,} rows ({res['tokens']:,} tokens) and a quarter of it "
          f"({res['tokens_small']:,} tokens), row groups of {res['row_group']} rows; medians of {runs} rounds")
    print("throughput = 1 / slope between the two dumps (fixed costs drop out); fixed = the intercept (s); "
          "wall = the whole run on the larger dump (s)")
    print("| engine | workers | ray.init | GRPO Mtok/s | per worker | fixed | wall | GAE Mtok/s | per worker | fixed "
          "| wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [("local", "1 process", None, res["local"])] + [("ray", w, r["ray_init"], r) for w, r in res["ray"].items()]
    for eng, w, init, r in rows:
        cells = [eng, str(w), "-" if init is None else f"{init:.1f}"]
        for est in ("grpo", "gae"):
            m = r[est]
            cells += [f"{m['tok_s'] / 1e6:.2f}", f"{m['tok_s_worker'] / 1e6:.2f}", f"{m['fixed']:.1f}",
                      f"{m['wall_big']:.1f}"]
        print("| " + " | ".join(cells) + " |")
    print("driver CPU seconds on the larger dump: " + "; ".join(
        f"{eng} {w}: GRPO {r['grpo']['cpu_driver_big']:.1f}, GAE {r['gae']['cpu_driver_big']:.1f}"
        for eng, w, _, r in rows))


# ------------------------------------------------------------------------------------ row table
def _rowtable_child(path: str, stop_before_prepare: bool) -> None:
    """In a fresh process: open, plan, (prepare_run + observer); prints seconds and the broadcast size."""
    import dataclasses
    import pickle

    from advcli.engines.ray_engine import lean
    from advcli.flavors import resolve
    from advcli.io.reader import InputSet
    from advcli.pipeline import make_plan, prepare_run
    from advcli.pipeline.observe import RunObserver

    cfg, _ = resolve("verl", CONFIGS["grpo"])
    inputs = InputSet.open([path])
    plan = make_plan(cfg, inputs, {}, "cpu")
    if stop_before_prepare:
        print(json.dumps({"seconds": 0.0, "broadcast": 0}))
        return
    t0 = time.perf_counter()
    res, row, betas, kls, _ = prepare_run(plan, inputs, 4096, None)
    t1 = time.perf_counter()
    RunObserver(dataclasses.replace(plan, device_name="cpu"), res, row, betas, kls)
    t2 = time.perf_counter()
    print(json.dumps({"seconds": t2 - t0, "prepare": t1 - t0, "observer": t2 - t1,
                      "broadcast": len(pickle.dumps(lean(res), protocol=5))}))


def _child(path: str, stop: bool) -> dict:
    p = subprocess.Popen([PY, __file__, "--_rowtable", path] + (["--_stop"] if stop else []),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"row-table child failed on {path}:\n{err}")
    return {**json.loads(out.strip().splitlines()[-1]), "rss": ru.ru_maxrss * 1024}


def part_rows(args) -> dict:
    res = {"sizes": {}}
    for n in args.row_sizes:
        path = sample(os.path.join(DATA, f"rows-{n}.parquet"), n, 4, 8)
        base = med([_child(path, True)["rss"] for _ in range(args.runs)])
        runs = [_child(path, False) for _ in range(args.runs)]
        res["sizes"][n] = {"rss": med([r["rss"] for r in runs]) - base, "base_rss": base,
                           "seconds": med([r["seconds"] for r in runs]), "prepare": med([r["prepare"] for r in runs]),
                           "observer": med([r["observer"] for r in runs]), "broadcast": runs[0]["broadcast"]}
        print(f"rows {n}: {res['sizes'][n]}", file=sys.stderr)
    return res


def print_rows(res: dict, runs: int, mean_len: int) -> None:
    sizes = sorted(res["sizes"])
    print(f"\n## driver row table (verl GRPO; prepare_run + observer in a fresh process; medians of {runs})")
    print("| rows | peak RSS over baseline (MB) | seconds (prepare_run + observer) | broadcast table (MB) |")
    print("|---|---|---|---|")
    for n in sizes:
        s = res["sizes"][n]
        print(f"| {n:,} | {s['rss'] / 1e6:.0f} | {s['seconds']:.2f} ({s['prepare']:.2f} + {s['observer']:.2f}) | "
              f"{s['broadcast'] / 1e6:.1f} |")
    a, b = res["sizes"][sizes[0]], res["sizes"][sizes[-1]]
    dn = sizes[-1] - sizes[0]
    per = {k: (b[k] - a[k]) / dn for k in ("rss", "seconds", "broadcast")}
    rows_per_gtok = 1e9 / mean_len
    print(f"per row (slope {sizes[0]:,} -> {sizes[-1]:,}): {per['rss']:.0f} B of driver memory, "
          f"{per['seconds'] * 1e6:.2f} us, {per['broadcast']:.0f} B broadcast")
    print(f"per billion tokens at {mean_len} tokens per row ({rows_per_gtok:,.0f} rows): "
          f"{per['rss'] * rows_per_gtok / 1e9:.2f} GB driver memory, {per['seconds'] * rows_per_gtok:.1f} s, "
          f"{per['broadcast'] * rows_per_gtok / 1e9:.2f} GB broadcast (one copy per worker actor)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["scale", "rows", "all"], default="all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--row-group", type=int, default=512, help="rows per row group of the scale dumps")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--row-sizes", default="100000,400000,1600000")
    ap.add_argument("--mean-len", type=int, default=1000, help="tokens per row for the per-billion-token figures")
    ap.add_argument("--_rowtable", help=argparse.SUPPRESS)
    ap.add_argument("--_stop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._rowtable:
        _rowtable_child(args._rowtable, args._stop)
        return
    args.workers = [int(x) for x in args.workers.split(",")]
    args.row_sizes = [int(x) for x in args.row_sizes.split(",")]
    os.makedirs(DATA, exist_ok=True)
    import torch

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at start; torch {torch.__version__}; "
          f"python {platform.python_version()}")
    if args.part in ("scale", "all"):
        import ray

        print(f"# ray {ray.__version__}")
        print_scale(part_scale(args), args.runs)
    if args.part in ("rows", "all"):
        print_rows(part_rows(args), args.runs, args.mean_len)
    print(f"# load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"this process's peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
