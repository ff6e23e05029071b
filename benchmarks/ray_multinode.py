"""The local engine and ``--engine ray`` on 1, 2 and 4 worker nodes of a local multi-node cluster, the
dump and the output in a local S3 server: tokens/s, the driver's peak memory and the bytes the driver
receives per row.

    python benchmarks/ray_multinode.py                          # 4,096 rows <= 512 tokens, GRPO and GAE
    python benchmarks/ray_multinode.py --rows 65536 --max-len 1024 --nodes 1,2,4,8

Each configuration runs in a **fresh subprocess** (so one run's memory does not hide the next one's):

- the cluster is ``ray.cluster_utils.Cluster`` (the tests' helper ``tests/_services.local_ray_cluster``):
  a head node with no CPU for tasks (the driver's node, where the statistics actor lives) and N
  worker nodes of one CPU each, separate raylets; the dump (``advcli.sample.make_table``, written with
  row groups of ``--row-group`` rows in 4 files) and the output live in a moto S3 server on 127.0.0.1
  (``tests/_services.local_s3_server``); the local engine reads and writes the same ``s3://`` URIs;
- **tokens/s** = the dump's tokens / the wall seconds of ``run_pipeline`` / ``run_ray`` (the Python API:
  the CLI's code without its start-up), cluster start-up excluded but every per-run fixed cost included
  (actor start-up, each importing torch; the statistics actor; Ray Data's scheduling);
- **driver peak memory** = the driver process's peak RSS during the run minus its RSS just before
  it: the peak is reset first by writing ``5`` to ``/proc/self/clear_refs`` (Linux), then read from
  ``VmHWM`` in ``/proc/self/status`` after the run. The workers', raylets' and object store's memory
  is not the driver's and is not counted;
- **bytes to the driver per row** = the Arrow bytes (``Table.nbytes``) of every batch the driver
  receives from the workers (``Dataset.iter_batches`` of the row pass, the token-moments pass, the
  rollout-correction and histogram-seed passes; counted by wrapping ``iter_batches`` in the driver) /
  rows; and, apart, the **objects to the driver per row**: the pickled bytes of every ``ray.get`` that
  advcli's own code calls in the driver (the per-step driver's per-shard summaries and per-step numbers,
  the statistics actor's settings and final figures: per run or per step, not per row). The workers'
  partial statistics go to the statistics actor (another process on the driver's node), measured apart
  by ``benchmarks/ray_stats_bytes.py``.

On one host the worker nodes share its cores: with 2 cores, 2 and 4 nodes measure contention, not
scaling; what carries over to a real cluster is the per-node throughput of the 1-node run and the
per-row costs. Run it under ``flock`` on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

CONFIGS = {"grpo": [("algorithm.adv_estimator", "grpo")],
           "gae": [("algorithm.adv_estimator", "gae")]}


def _status(key: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one(args) -> dict:
    """One configuration (in this fresh process): ``args.engine`` local or ray on ``args.node_count`` nodes."""
    import logging

    import pyarrow.parquet as pq
    from _services import local_ray_cluster, local_s3_server

    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.sample import make_table

    logging.disable(logging.WARNING)
    work = tempfile.mkdtemp(prefix="advcli-raybench-")
    with local_s3_server(work) as fs:
        t = make_table(args.rows, 8, args.min_len, args.max_len, 7, shuffle=True, steps=4)
        tokens = int(sum(len(x) for x in t.column("response_mask").to_pylist()))
        step = -(-t.num_rows // 4)
        for i in range(4):
            local = os.path.join(work, f"in{i}.parquet")
            pq.write_table(t.slice(i * step, step), local, row_group_size=args.row_group)
            with open(local, "rb") as src, fs.open_output_stream(f"bkt/dump/in{i}.parquet") as dst:
                dst.write(src.read())
        del t
        results = []
        if args.engine == "local":
            for est in args.estimators:
                cfg, native = resolve("verl", CONFIGS[est])
                _reset_peak()
                base = _status("VmRSS")
                t0 = time.perf_counter()
                run_pipeline(["s3://bkt/dump/"], f"s3://bkt/out-{est}/", cfg, flavor="verl", native=native,
                             chunk_rows=args.chunk_rows, device="cpu")
                wall = time.perf_counter() - t0
                results.append({"estimator": est, "wall": wall, "peak": _status("VmHWM") - base, "driver_bytes": 0,
                                "fetched_bytes": 0})
            return {"rows": args.rows, "tokens": tokens, "results": results}
        with local_ray_cluster(block_size=1 << 20, workers=args.node_count):
            import ray
            import ray.data

            from advcli.engines.ray_engine import run_ray

            received = [0]
            real = ray.data.Dataset.iter_batches

            def counting(self, *a, **kw):
                for b in real(self, *a, **kw):
                    received[0] += getattr(b, "nbytes", 0)
                    yield b

            ray.data.Dataset.iter_batches = counting
            real_get = ray.get

            def counting_get(refs, *a, **kw):  # what advcli's own code fetches: summaries, per-step numbers
                got = real_get(refs, *a, **kw)
                if sys._getframe(1).f_globals.get("__name__", "").startswith("advcli"):
                    fetched[0] += len(pickle.dumps(got, protocol=5))
                return got

            fetched = [0]
            ray.get = counting_get
            for est in args.estimators:
                cfg, native = resolve("verl", CONFIGS[est])
                received[0] = fetched[0] = 0
                _reset_peak()
                base = _status("VmRSS")
                t0 = time.perf_counter()
                run_ray(["s3://bkt/dump/"], f"s3://bkt/rout-{est}", cfg, flavor="verl", native=native,
                        chunk_rows=args.chunk_rows, device="cpu", row_pass="workers", force=True)
                wall = time.perf_counter() - t0
                results.append({"estimator": est, "wall": wall, "peak": _status("VmHWM") - base,
                                "driver_bytes": received[0], "fetched_bytes": fetched[0]})
        return {"rows": args.rows, "tokens": tokens, "results": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--min-len", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--row-group", type=int, default=256, help="rows per Parquet row group of the dump")
    ap.add_argument("--chunk-rows", type=int, default=256)
    ap.add_argument("--nodes", default="1,2,4", help="worker node counts of the Ray runs")
    ap.add_argument("--estimators", default="grpo,gae")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "local" or "ray:N" (one configuration)
    args = ap.parse_args()
    args.estimators = args.estimators.split(",")
    if args.one:
        args.engine, _, n = args.one.partition(":")
        args.node_count = int(n or 0)
        print(json.dumps(one(args)))
        return
    import ray
    import torch

    print(f"# {platform.node()}: {os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}, "
          f"ray {ray.__version__}; load average {os.getloadavg()[0]:.1f} at the start")
    runs = [("local", "local")] + [(f"ray, {n} node{'s' if n > 1 else ''}", f"ray:{n}")
                                  for n in map(int, args.nodes.split(","))]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), ADVCLI_SERVER="off")
    rows = []
    for label, which in runs:
        cmd = [sys.executable, __file__, "--one", which, "--rows", str(args.rows), "--min-len", str(args.min_len),
               "--max-len", str(args.max_len), "--row-group", str(args.row_group),
               "--chunk-rows", str(args.chunk_rows), "--estimators", ",".join(args.estimators)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode:
            print(f"{label}: failed\n{out.stderr[-3000:]}", file=sys.stderr)
            continue
        got = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append((label, got, os.getloadavg()[0]))
    print(f"\ndump: {args.rows:,} rows, {rows[0][1]['tokens'] if rows else 0:,} tokens "
          f"({args.min_len}-{args.max_len} per row), 4 files in s3://, row groups of {args.row_group}, "
          f"--chunk-rows {args.chunk_rows}\n")
    print("| engine | estimator | wall s | Mtok/s | Mtok/s per node | driver peak MB (over RSS before) "
          "| driver peak B/row | batches to the driver B/row | objects to the driver B/row | load after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, got, load in rows:
        nodes = int(label.split(", ")[1].split()[0]) if "," in label else 1
        for r in got["results"]:
            mtok = got["tokens"] / r["wall"] / 1e6
            print(f"| {label} | {r['estimator']} | {r['wall']:.1f} | {mtok:.2f} | {mtok / nodes:.2f} | "
                  f"{r['peak'] / 1e6:.1f} | {r['peak'] / got['rows']:,.0f} | {r['driver_bytes'] / got['rows']:.1f} "
                  f"| {r['fetched_bytes'] / got['rows']:.1f} | {load:.1f} |")


if __name__ == "__main__":
    main()
