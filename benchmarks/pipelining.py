"""The CPU pipelining gain of the write pass: a whole run in this process with the token columns decoded and
checked on a thread of their own (advcli.pipeline.write.DECODE_AHEAD, the default) against the same run
decoding on the math's thread (DECODE_AHEAD = 0). Prints figures; asserts nothing.

    python benchmarks/pipelining.py [--rows 2048] [--rounds 3]

The output is the same either way (tests/cli/test_pipelined.py); what changes is the wall time, and only where
the machine has a core free for the decoding thread while the math runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from advcli import pipeline  # noqa: E402
from advcli.flavors import resolve  # noqa: E402
from advcli.pipeline import write as write_mod  # noqa: E402
from advcli.sample import make_table  # noqa: E402

CASES = {
    "gae+k3": [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
               ("algorithm.kl_penalty", "low_var_kl")],
    "grpo+kl": [("algorithm.adv_estimator", "grpo"), ("algorithm.use_kl_in_reward", True)],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "in.parquet"), os.path.join(d, "out.parquet")
        pq.write_table(make_table(args.rows, 16, 64, 2048, seed=0), src)
        print(f"{args.rows} rows, {os.path.getsize(src) / 2**20:.0f} MiB, {os.cpu_count()} cores; "
              f"medians of {args.rounds} interleaved rounds, in process (start-up excluded)")
        print("| case | decoding ahead s | on the math's thread s | gain |")
        print("|---|---|---|---|")
        for name, sets in CASES.items():
            cfg, native = resolve("verl", sets)
            times: dict[int, list[float]] = {2: [], 0: []}
            for _ in range(args.rounds + 1):  # the first round warms the page cache and the allocator
                for ahead in times:
                    write_mod.DECODE_AHEAD = ahead
                    t0 = time.perf_counter()
                    pipeline.run_pipeline([src], out, cfg, flavor="verl", native=native, device="cpu", force=True)
                    times[ahead].append(time.perf_counter() - t0)
            a, b = (statistics.median(times[k][1:]) for k in (2, 0))
            print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.2f}x |", flush=True)
        write_mod.DECODE_AHEAD = 2


if __name__ == "__main__":
    main()
