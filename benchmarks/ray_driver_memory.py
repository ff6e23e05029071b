"""The Ray engine driver's peak memory against the number of rows (issue 31: "driver peak memory on a
dump with 4x the rows grows by less than 10%").

    python benchmarks/ray_driver_memory.py                          # 16,384 and 65,536 rows
    python benchmarks/ray_driver_memory.py --rows 32768 --row-pass driver --runs 3
    python benchmarks/ray_driver_memory.py --estimator gae          # verl GAE: values, whitened

Dumps of N and 4N rows (``advcli sample``, 64 rows per group, 16 groups per step, so N/1024 and
4N/1024 steps; 4-8 tokens per row, so rows dominate, not tokens), verl GRPO (``--estimator``: another
of verl's ``algorithm.adv_estimator``, e.g. ``gae``, which reads the values and whitens), run with ``run_ray`` on
a local Ray instance (``num_cpus`` = ``--workers`` + 1), each run in a fresh subprocess.

What is measured: the **driver process's resident set** (RSS, ``/proc/self/statm``), sampled every
5 ms by a thread in that process, peak minus the RSS just before ``run_ray`` is called (torch,
pyarrow, Ray already imported and the Ray instance already started, so their fixed cost drops out).
This counts everything the driver holds, Python objects and tensors alike (tracemalloc would miss
torch's buffers). The Ray workers, the object store and the statistics actor are other processes and
are not counted: they are the cluster's memory, not the driver's — except the object-store pages the
driver itself wrote (its ``ray.put`` objects: the store is shared memory mapped into the driver), which
the resident set counts; ``/proc/self/status`` splits it into private memory (``RssAnon``) and those
shared pages (``RssShmem``), and both peaks are printed. A sample every 5 ms can miss a
peak shorter than that; ``ru_maxrss`` (the kernel's high-water mark) is printed beside it.

Data lives in ``bench_data/ray_driver_memory/`` (git-ignored). Run it under ``flock`` on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "bench_data", "ray_driver_memory")
PY = sys.executable
sys.path.insert(0, ROOT)

GROUP = 64
GROUPS_PER_STEP = 16


def sample(rows: int, row_group: int) -> str:
    """``advcli sample`` with GROUP rows per group and GROUPS_PER_STEP groups per step, rewritten with
    row groups of ``row_group`` rows (Ray reads shards of whole row groups)."""
    path = os.path.join(DATA, f"mem-{rows}-g{GROUP}-rg{row_group}.parquet")
    if not os.path.exists(path):
        os.makedirs(DATA, exist_ok=True)
        steps = max(1, rows // (GROUP * GROUPS_PER_STEP))
        print(f"generating {path} ({rows:,} rows, {steps} steps)", file=sys.stderr)
        subprocess.run([PY, "-m", "advcli", "sample", path, "--rows", str(rows), "--group-size", str(GROUP),
                        "--min-len", "4", "--max-len", "8", "--steps", str(steps), "--force"],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env={**os.environ, "ADVCLI_SERVER": "off"})
        import pyarrow.parquet as pq

        pq.write_table(pq.read_table(path), path, row_group_size=row_group, compression="zstd")
    return path


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_parts() -> tuple[int, int]:
    """(RssAnon, RssShmem) of ``/proc/self/status`` in bytes: the process's private memory, and the shared
    pages it has touched (Ray's object store, which the driver maps and writes its ``ray.put`` objects into)."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssShmem:")):
                k, v = line.split(":")
                got[k] = int(v.split()[0]) * 1024
    return got.get("RssAnon", 0), got.get("RssShmem", 0)


def _child(path: str, workers: int, row_pass: str, estimator: str) -> None:
    """One run in this (fresh) process: prints a JSON line with the driver's RSS figures."""
    import ray

    from advcli.engines.ray_engine import run_ray

    ray.init(address="local", num_cpus=workers + 1, include_dashboard=False, log_to_driver=False)
    out = tempfile.mkdtemp(prefix="advcli-raymem-")
    peak, anon, shm, stop = [0], [0], [0], threading.Event()

    def look():
        peak[0] = max(peak[0], _rss())
        a, m = _rss_parts()
        anon[0], shm[0] = max(anon[0], a), max(shm[0], m)

    def watch():
        while not stop.is_set():
            look()
            time.sleep(0.005)

    base = _rss()
    base_anon, base_shm = _rss_parts()
    hwm_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    t0 = time.perf_counter()
    from advcli.flavors import resolve

    cfg, native = resolve("verl", [("algorithm.adv_estimator", estimator)])
    run_ray([path], os.path.join(out, "o"), cfg, flavor="verl", native=native, device="cpu", force=True,
            row_pass=row_pass)
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    look()
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"base": base, "peak": peak[0], "hwm_before": hwm_before, "hwm": hwm, "wall": wall,
                      "base_anon": base_anon, "anon": anon[0], "base_shm": base_shm, "shm": shm[0]}))
    ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16384, help="N: the small dump (the large one has 4N rows)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--row-pass", default="workers", choices=["driver", "workers"])
    ap.add_argument("--row-group", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--estimator", default="grpo", help="verl's algorithm.adv_estimator (default grpo)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child[0], int(args.child[1]), args.child[2], args.child[3])
    sizes = [args.rows, 4 * args.rows]
    paths = {n: sample(n, args.row_group) for n in sizes}
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    env = {**os.environ, "ADVCLI_SERVER": "off", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(args.runs):
        for n in sizes:  # interleaved
            p = subprocess.run([PY, __file__, "--child", paths[n], str(args.workers), args.row_pass, args.estimator],
                               check=True, capture_output=True, text=True, env=env)
            runs[n].append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"driver peak RSS over its baseline (run_ray, verl {args.estimator}, {args.workers} worker(s), row pass on "
          f"{args.row_pass}, {GROUP} rows/group, {GROUPS_PER_STEP} groups/step; medians of {args.runs})")
    print("| rows | steps | peak RSS (MB) | peak RSS - baseline (MB) | ru_maxrss - baseline (MB) | "
          "private (RssAnon) peak - baseline (MB) | object-store pages (RssShmem) peak - baseline (MB) | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    grow, whole, private = {}, {}, {}
    med = lambda n, f: statistics.median(f(r) for r in runs[n]) / 1e6  # noqa: E731
    for n in sizes:
        d = med(n, lambda r: r["peak"] - r["base"])
        h = med(n, lambda r: max(r["hwm"], r["base"]) - r["base"])
        grow[n], whole[n] = d, med(n, lambda r: r["peak"])
        private[n] = med(n, lambda r: r["anon"] - r["base_anon"])
        print(f"| {n:,} | {n // (GROUP * GROUPS_PER_STEP)} | {whole[n]:.1f} | {d:.1f} | {h:.1f} | {private[n]:.1f} | "
              f"{med(n, lambda r: r['shm'] - r['base_shm']):.1f} | "
              f"{statistics.median(r['wall'] for r in runs[n]):.1f} |")
    a, b = grow[sizes[0]], grow[sizes[1]]
    base = statistics.median(r["base"] / 1e6 for r in runs[sizes[0]])
    print(f"whole peak RSS, 4N / N: {whole[sizes[1]] / whole[sizes[0]]:.3f} "
          f"({100 * (whole[sizes[1]] / whole[sizes[0]] - 1):+.1f}%; baseline {base:.0f} MB)")
    print(f"peak over the baseline, N to 4N rows: {b - a:+.1f} MB ({100 * (b - a) / max(a, 1e-9):+.0f}% of the "
          f"increment); {1e6 * (b - a) / (sizes[1] - sizes[0]):.0f} bytes per added row")
    pa_, pb = private[sizes[0]], private[sizes[1]]
    print(f"private memory (RssAnon) over the baseline, N to 4N rows: {pb - pa_:+.1f} MB "
          f"({100 * (pb - pa_) / max(pa_, 1e-9):+.0f}%); {1e6 * (pb - pa_) / (sizes[1] - sizes[0]):.0f} bytes per "
          "added row")


if __name__ == "__main__":
    main()
