"""The CPU pipelining gain of the write pass: a whole run in this process with its host work on threads of its own
(the default) against the same run with one of them done on the math's thread instead: the token columns decoded
and checked there (advcli.pipeline.write.DECODE_AHEAD = 0), or the output's row groups encoded and written there
(WRITE_THREAD = False). Prints figures; asserts nothing.

    python benchmarks/pipelining.py [--rows 2048] [--rounds 3] [--device cpu]

The output is the same, byte for byte, every way (tests/cli/test_pipelined.py, tests/cli/test_write_thread.py);
what changes is the wall time, and only where the machine has a core free for the thread while the math runs.
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


VARIANTS = {  # name -> (DECODE_AHEAD, WRITE_THREAD)
    "threads": (2, True),
    "decoding on the math's thread": (0, True),
    "encoding on the math's thread": (2, False),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "in.parquet"), os.path.join(d, "out.parquet")
        pq.write_table(make_table(args.rows, 16, 64, 2048, seed=0), src)
        print(f"{args.rows} rows, {os.path.getsize(src) / 2**20:.0f} MiB, {os.cpu_count()} cores, --device "
              f"{args.device}; medians of {args.rounds} interleaved rounds, in process (start-up excluded)")
        names = list(VARIANTS)
        print("| case | " + " | ".join(f"{n} s" for n in names) + " | gain of decoding ahead | gain of the writer "
              "thread |")
        print("|---|" + "---|" * (len(names) + 2))
        for name, sets in CASES.items():
            cfg, native = resolve("verl", sets)
            times: dict[str, list[float]] = {n: [] for n in names}
            for _ in range(args.rounds + 1):  # the first round warms the page cache and the allocator
                for v in names:
                    write_mod.DECODE_AHEAD, write_mod.WRITE_THREAD = VARIANTS[v]
                    t0 = time.perf_counter()
                    pipeline.run_pipeline([src], out, cfg, flavor="verl", native=native, device=args.device,
                                          force=True)
                    times[v].append(time.perf_counter() - t0)
            med = {v: statistics.median(times[v][1:]) for v in names}
            base = med["threads"]
            print(f"| {name} | " + " | ".join(f"{med[v]:.2f}" for v in names)
                  + f" | {med[names[1]] / base:.2f}x | {med[names[2]] / base:.2f}x |", flush=True)
        write_mod.DECODE_AHEAD, write_mod.WRITE_THREAD = VARIANTS["threads"]


if __name__ == "__main__":
    main()
