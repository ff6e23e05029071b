"""Compute-only throughput of each estimator (tokens/s): the per-chunk math of the write pass on
chunks already in memory — no Parquet reading, writing or run statistics.

    python benchmarks/compute.py [--device cuda] [--rows 4096] [--chunk-tokens 524288] [--scans]

``--estimators grpo gae+k3`` times only those. On a GPU the reverse scans run as the fused Triton kernels
when triton is installed (``advcli.ops.fused``); ``ADVCLI_KERNELS=off`` times the torch path there instead.

``--scans`` adds the reverse scans alone (``advcli.ops.scans``: GAE with holes skipped, the
REINFORCE++ return, GAE over every position, the plain discounted cumsum) on one chunk of about
``--chunk-tokens`` tokens of the same sample (rows of 64..2048 tokens, masked spans and tails).

On a GPU it also prints the memory-bandwidth bound: the bytes each token must at least move
(token columns read once, advantages and returns written once) over the card's bandwidth
(``--bandwidth`` GB/s; by default the card's device-to-device copy rate measured first, bytes read plus
bytes written, as ``benchmarks/gpu.py`` measures it), and the share of it reached.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from advcli import pipeline  # noqa: E402
from advcli.flavors import resolve  # noqa: E402
from advcli.io.reader import InputSet  # noqa: E402
from advcli.ops import scans  # noqa: E402
from advcli.ops.ragged import Ragged  # noqa: E402
from advcli.sample import make_table  # noqa: E402

ESTIMATORS = {
    "gae+k3": [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
               ("algorithm.kl_penalty", "low_var_kl")],
    "grpo": [("algorithm.adv_estimator", "grpo")],
    "rloo": [("algorithm.adv_estimator", "rloo")],
    "reinforce_plus_plus": [("algorithm.adv_estimator", "reinforce_plus_plus"), ("algorithm.gamma", 0.99)],
    "remax": [("algorithm.adv_estimator", "remax")],
    "opo": [("algorithm.adv_estimator", "opo")],
    "gpg": [("algorithm.adv_estimator", "gpg")],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--chunk-tokens", type=int, nargs="+", default=[1 << 19],
                    help="tokens per chunk (several: one table each; the run's default is 524288)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="GB/s of the card (default: measured, a device-to-device copy)")
    ap.add_argument("--scans", action="store_true", help="also time the reverse scans alone on one chunk")
    ap.add_argument("--estimators", nargs="+", choices=list(ESTIMATORS), default=list(ESTIMATORS),
                    help="the estimators to time (default: all)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if dev.type == "cuda" and args.bandwidth is None:
        from gpu import copy_bandwidth

        args.bandwidth = copy_bandwidth()
        print(f"measured copy bandwidth: {args.bandwidth:.0f} GB/s")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "dump.parquet")
        import pyarrow.parquet as pq

        pq.write_table(make_table(args.rows, 16, 64, 2048, seed=0), src)
        inputs = InputSet.open([src])
        for chunk_tokens in args.chunk_tokens:
            estimator_table(dev, src, inputs, args, chunk_tokens)

    if args.scans:
        scan_table(dev, args.chunk_tokens[0], args.repeat)


def estimator_table(dev: torch.device, src: str, inputs, args, chunk_tokens: int) -> None:
    """One table: every estimator's chunk math on chunks of about ``chunk_tokens`` tokens, resident on ``dev``.
    On a GPU also the kernels each chunk launches and the times the host waits for the device per chunk
    (torch.profiler over one chunk): what a chunk costs beyond its bytes."""
    cuda = dev.type == "cuda"
    print(f"\ndevice {dev} ({torch.cuda.get_device_name(dev) if cuda else f'{os.cpu_count()} cores'}), "
          f"{args.rows} rows, chunks of ~{chunk_tokens} tokens", flush=True)
    print("| estimator | tokens | chunks | s (median) | M tokens/s | bytes/token | bound M tokens/s | share "
          "| kernels/chunk | host waits/chunk |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.estimators:
        cfg, _ = resolve("verl", ESTIMATORS[name])
        plan = pipeline.make_plan(cfg, inputs, {}, args.device)
        rows = pipeline.chunk_rows_for(plan, inputs, None, chunk_tokens)
        res, *_ = pipeline.prepare_run(plan, inputs, rows)
        reader = pipeline.ChunkReader(plan, inputs, res.state)  # the columns prepare_run checked: not again
        cols = list(pipeline.roles_to_columns(plan, plan.token_roles))
        chunks, row0 = [], 0
        for _fi, rb, batch in inputs.iter_batches(cols, rows):
            offsets, tok = reader.tokens(batch, src, rb, plan.token_roles)
            tok = {k: v.clone().to(dev) for k, v in tok.items()}  # resident on the device
            chunks.append((Ragged(torch.from_numpy(offsets)).to(dev), tok, row0))
            row0 += batch.num_rows
        n = sum(int(c[0].num_tokens) for c in chunks)
        # the fewest bytes per token: the token columns read once, advantages and returns (and the token
        # rewards, when KL enters them) written once, float32
        bytes_tok = sum(v.element_size() for v in chunks[0][1].values()) + 8 + (4 if plan.kl_on else 0)

        def every_chunk(plan=plan, res=res, chunks=chunks):
            for layout, tok, r0 in chunks:
                pipeline.chunk_math(plan, res, layout, tok, r0, apply_whiten=True)

        t = _median_time(every_chunk, args.repeat, dev)
        rate = n / t / 1e6
        bound = args.bandwidth * 1e9 / bytes_tok / 1e6 if cuda else float("nan")
        kernels = waits = ""
        if cuda:
            kernels, waits = _launches_and_waits(functools.partial(every_chunk, chunks=chunks[:1]))
        print(f"| {name} | {n / 1e6:.1f}M | {len(chunks)} | {t:.4f} | {rate:.0f} | {bytes_tok} | "
              f"{f'{bound:.0f}' if cuda else ''} | {f'{rate / bound:.1%}' if cuda else ''} | {kernels} | {waits} |",
              flush=True)


def _launches_and_waits(fn) -> tuple[int, int]:
    """(kernels on the device, host waits: stream/device/event synchronisations and blocking copies) of one
    call of ``fn``, counted with torch.profiler."""
    from gpu import WAITS
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA
                  and not e.name.startswith(("Memcpy", "Memset")))
    waits = sum(1 for e in prof.events() if e.name in WAITS) - 1  # less the synchronize above
    return kernels, waits


def _median_time(fn, repeat: int, dev: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def scan_table(dev: torch.device, chunk_tokens: int, repeat: int) -> None:
    """The scans alone on one float32 chunk of the sample (a fresh layout per call, as in a run)."""
    import numpy as np

    rows = max(1, chunk_tokens // 1056)  # mean length of 64..2048
    t = make_table(rows, 16, 64, 2048, seed=0)
    m = t.column("response_mask").combine_chunks()
    offsets = torch.from_numpy(m.offsets.to_numpy().astype(np.int64)).to(dev)
    mask = torch.from_numpy(m.values.to_numpy(zero_copy_only=False).astype(np.float32)).to(dev)
    values = torch.from_numpy(t.column("values").combine_chunks().values.to_numpy().copy()).to(dev)
    rewards = torch.zeros_like(values)
    rewards[offsets[1:] - 1] = torch.from_numpy(t.column("reward").to_numpy().copy()).to(dev)
    n = mask.numel()
    ops = {
        "gae_skip_masked": lambda: scans.gae_skip_masked(rewards, values, mask, Ragged(offsets), 0.99, 0.95),
        "returns_skip_masked": lambda: scans.returns_skip_masked(rewards, mask, Ragged(offsets), 0.99),
        "gae_all_positions": lambda: scans.gae_all_positions(rewards, values, Ragged(offsets), 0.99, 0.95),
        "reverse_discounted_cumsum": lambda: scans.reverse_discounted_cumsum(rewards, Ragged(offsets), 0.99),
    }
    print(f"\nscans alone, one chunk of {n} tokens ({rows} rows), {torch.get_num_threads()} threads")
    print("| scan | ms (median) | M tokens/s |")
    print("|---|---|---|")
    for name, fn in ops.items():
        s = _median_time(fn, max(repeat, 3), dev)
        print(f"| {name} | {s * 1e3:.2f} | {n / s / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
