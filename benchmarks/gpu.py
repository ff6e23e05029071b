"""The GPU figures of docs/performance.md in one run: the card's measured copy bandwidth, whole runs of the
benchmark dump on the GPU against the CPU and the I/O floor, and a profile of one GPU run (copies,
kernels, synchronisations, and how much of the copies run while kernels run).

    python benchmarks/gpu.py [--rows 16384] [--rounds 3] [--trace OUT.json.gz] [--skip-runs] [--dry-run]

``--dry-run``: the whole-runs table on the CPU alone (no card, bandwidth or profile), so that the script
is checked on a machine without a GPU (``tools/gpu_check.sh --dry-run``).

* **bandwidth**: a device-to-device copy of 1 GiB, counting bytes read plus bytes written, median of 20
  (the ceiling the compute-only figures of ``benchmarks/compute.py --bandwidth`` are set against);
* **whole runs**: ``advcli run`` as a user types it (a fresh process, start-up included) with
  ``--device cuda`` and ``--device cpu``, and ``benchmarks/floor.py`` (read every column + write the
  augmented table, no math), for verl GAE with k3 KL in the reward and verl GRPO; medians of ``--rounds``
  interleaved rounds, on the dump and on a dump 4x its size: the steady state (4x minus 1x, start-up
  excluded, as ``benchmarks/`` does on the CPU) and its ratio to the I/O floor's steady state;
* **profile**: one GAE run in this process under ``torch.profiler``: kernels and copies on the device
  (their busy time as the union of their intervals), host-to-device copy time that overlaps kernel time,
  the CUDA calls that make the host wait (stream/device/event synchronisations, copies to pageable
  memory), kernel launches per chunk. ``--trace`` writes the profile (Chrome trace format, gzipped).
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from bench import ADVCLI, FLOORS, PY, advcli_cmd, ensure_dump, measure, tokens_of  # noqa: E402

WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def copy_bandwidth(gib: float = 1.0, repeat: int = 20) -> float:
    """GB/s of a device-to-device copy (bytes read + bytes written), median of ``repeat``."""
    import torch

    n = int(gib * (1 << 30)) // 4
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return 2 * n * 4 / statistics.median(times) / 1e9


def start_up() -> tuple[float, float]:
    """Seconds of a fresh process that imports torch, and of one that also makes its first CUDA tensor
    (the CUDA context: what ``--device cuda`` adds to every run's start-up), medians of 3."""
    import subprocess

    def wall(code: str) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([PY, "-c", code], check=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return wall("import torch"), wall("import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()")


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _overlap(intervals: list[tuple[float, float]], union: list[tuple[float, float]]) -> float:
    import bisect

    starts = [s for s, _ in union]
    total = 0.0
    for s, e in intervals:
        i = max(0, bisect.bisect_right(starts, s) - 1)
        while i < len(union) and union[i][0] < e:
            total += max(0.0, min(e, union[i][1]) - max(s, union[i][0]))
            i += 1
    return total


def profile_run(src: str, trace: str | None) -> dict:
    """One verl GAE + k3 run on the GPU under torch.profiler, summarised (times in ms)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from advcli import pipeline
    from advcli.flavors import resolve

    cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
                                   ("algorithm.kl_penalty", "low_var_kl")])
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.parquet")
        pipeline.run_pipeline([src], out, cfg, flavor="verl", native=native, device="cuda", force=True)  # warm
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            result = pipeline.run_pipeline([src], out, cfg, flavor="verl", native=native, device="cuda",
                                           force=True)
            wall = time.perf_counter() - t0
    kernels, h2d, d2h, waits, launches = [], [], [], {}, 0
    for ev in prof.events():
        span = (ev.time_range.start, ev.time_range.end)
        if ev.device_type == DeviceType.CUDA:
            if ev.name.startswith("Memcpy HtoD"):
                h2d.append((span, ev.name))
            elif ev.name.startswith("Memcpy DtoH"):
                d2h.append((span, ev.name))
            elif not ev.name.startswith(("Memset", "Memcpy")):
                kernels.append(span)
        elif ev.name in WAITS:
            waits[ev.name] = waits.get(ev.name, 0) + 1
        elif ev.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"):
            launches += 1
    busy = _union(kernels)
    from advcli.pipeline.read import CHUNK_TOKENS

    chunks = max(1, -(-result.tokens // CHUNK_TOKENS))  # about: chunks are cut by rows to ~CHUNK_TOKENS tokens
    summary = {
        "wall_ms": wall * 1e3,
        "kernels": len(kernels), "kernel_busy_ms": sum(e - s for s, e in busy) / 1e3,
        "launches": launches,
        "h2d_copies": len(h2d), "h2d_ms": sum(e - s for (s, e), _ in h2d) / 1e3,
        "h2d_pageable": sum("Pageable" in n for _, n in h2d),
        "h2d_overlapping_kernels_ms": _overlap([s for s, _ in h2d], busy) / 1e3,
        "d2h_copies": len(d2h), "d2h_ms": sum(e - s for (s, e), _ in d2h) / 1e3,
        "d2h_pageable": sum("Pageable" in n for _, n in d2h),
        "host_waits": waits, "chunks (about)": chunks,
        "launches_per_chunk": launches / chunks, "host_waits_per_chunk": sum(waits.values()) / chunks,
    }
    if trace:
        raw = trace[:-3] if trace.endswith(".gz") else trace
        prof.export_chrome_trace(raw)
        if trace.endswith(".gz"):
            with open(raw, "rb") as f_in, gzip.open(trace, "wb") as f_out:
                shutil.copyfileobj(f_in, f_out)
            os.remove(raw)
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(ROOT, "bench_data"), help="where the dump is made")
    ap.add_argument("--trace", help="write the profile here (Chrome trace; .gz: gzipped)")
    ap.add_argument("--skip-runs", action="store_true", help="only the bandwidth and the profile")
    ap.add_argument("--dry-run", action="store_true", help="the whole runs on the CPU only, no GPU needed")
    args = ap.parse_args()
    import torch

    devices = ("cpu",) if args.dry_run else ("cuda", "cpu")
    if not args.dry_run:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device here (--dry-run runs the CPU side)")
        props = torch.cuda.get_device_properties(0)
        bw = copy_bandwidth()
        print(f"card: {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB; "
              f"torch {torch.__version__}; {os.cpu_count()} CPU cores", flush=True)
        print(f"measured copy bandwidth (read + write): {bw:.0f} GB/s", flush=True)
        plain, with_cuda = start_up()
        print(f"start-up: import torch {plain:.2f} s; + first CUDA tensor {with_cuda:.2f} s", flush=True)
    os.makedirs(args.data, exist_ok=True)
    srcs = {}
    for k in (1, 4):  # the dump and 4x it: steady state = t(4x) - t(1x)
        srcs[k] = os.path.join(args.data, f"gpu_{args.rows * k}.parquet")
        ensure_dump(srcs[k], args.rows * k)
    src = srcs[1]
    ntok = {k: tokens_of(p) for k, p in srcs.items()}
    print(f"dump: {args.rows:,} rows, {ntok[1] / 1e6:.1f}M tokens, {os.path.getsize(src) / 2**20:.0f} MiB; "
          f"4x: {ntok[4] / 1e6:.1f}M tokens", flush=True)

    if not args.skip_runs:
        env = {"ADVCLI_SERVER": "off"}
        cases = {}
        with tempfile.TemporaryDirectory(dir=args.data) as d:
            dst = os.path.join(d, "out.parquet")
            for k, path in srcs.items():
                for est in ("gae", "grpo"):
                    floor = FLOORS[est].split()
                    cases[(f"floor {est}", k)] = [PY, os.path.join(HERE, "floor.py"), path, dst, "--like", floor[-1]]
                    for dev in devices:
                        cases[(f"advcli {est} {dev}", k)] = advcli_cmd(path, dst, est, ["--device", dev])
            walls: dict = {key: [] for key in cases}
            for _ in range(args.rounds):
                for key, cmd in cases.items():
                    walls[key].append(measure(cmd, env)["wall"])
        med = {key: statistics.median(w) for key, w in walls.items()}
        print(f"\nwhole runs ({ADVCLI['gae'][:2]} ...; medians of {args.rounds} rounds; 1x and 4x start-up "
              "included; steady = 4x - 1x)")
        print("| case | 1x s | 4x s | steady s | steady M tokens/s | steady x floor |")
        print("|---|---|---|---|---|---|")
        for name in dict.fromkeys(n for n, _ in med):
            one, four = med[(name, 1)], med[(name, 4)]
            steady = four - one
            floor_name = "floor " + name.split()[1]
            fl = med[(floor_name, 4)] - med[(floor_name, 1)]
            rate = (ntok[4] - ntok[1]) / steady / 1e6 if steady > 0 else float("nan")
            ratio = steady / fl if fl > 0 else float("nan")
            print(f"| {name} | {one:.2f} | {four:.2f} | {steady:.2f} | {rate:.1f} | {ratio:.2f} |", flush=True)
    if args.dry_run:
        return

    s = profile_run(src, args.trace)
    print("\nprofile of one GPU run (verl GAE + k3, in process, after a warm-up run)")
    for k, v in s.items():
        print(f"  {k}: {v if not isinstance(v, float) else round(v, 2)}")


if __name__ == "__main__":
    main()
