"""Peak memory of every command on long responses: does it stay bounded when the rows get long?

    python benchmarks/commands_memory.py                 # 2,048 responses of 8k-16k tokens (~24M tokens)
    python benchmarks/commands_memory.py --rows 1024 --min-len 32000 --max-len 64000   # agentic lengths

Each command chunks its reads by rows *and* by tokens (about ``advcli.io.reader.CHUNK_TOKENS`` tokens a
chunk), so its peak should not depend on how long the responses are. The script writes a synthetic dump
(``advcli sample``) and its GRPO output into ``bench_data/commands/`` (git-ignored; deleted afterwards),
runs ``run``, ``stats`` (of the dump and of the output), ``validate``, ``filter``, ``audit`` and ``compare``
on them, each in a fresh subprocess, and prints each one's peak RSS and wall time (``os.wait4``).
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
DATA = os.path.join(ROOT, "bench_data", "commands")
ADVCLI = [sys.executable, "-m", "advcli"]


def measure(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of ``advcli ARGS`` in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(ADVCLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"advcli {' '.join(args)} failed:\n{err}")
    return usage.ru_maxrss / 1024, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--min-len", type=int, default=8000)
    ap.add_argument("--max-len", type=int, default=16000)
    a = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    dump, out = os.path.join(DATA, "long.parquet"), os.path.join(DATA, "out.parquet")
    scratch = os.path.join(DATA, "scratch.parquet")
    try:
        subprocess.run(ADVCLI + ["sample", dump, "--rows", str(a.rows), "--min-len", str(a.min_len), "--max-len",
                                 str(a.max_len), "--group-size", "16", "--force"], check=True,
                       stderr=subprocess.DEVNULL)
        grpo = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]
        subprocess.run(ADVCLI + ["run", dump, "-o", out, "--force", "--quiet", *grpo], check=True)
        import pyarrow.parquet as pq

        from advcli.io.reader import list_tokens

        tokens = list_tokens(pq.ParquetFile(dump).metadata, "response_mask")
        print(f"dump: {a.rows:,} responses of {a.min_len:,}-{a.max_len:,} tokens ({tokens:,} tokens), "
              f"{os.path.getsize(dump) / 2**20:,.0f} MiB on disk")
        cases = {
            "run (grpo)": ["run", dump, "-o", scratch, "--force", "--quiet", *grpo],
            "stats (dump)": ["stats", dump, "--json"],
            "stats (output)": ["stats", out, "--json"],
            "validate": ["validate", dump, *grpo],
            "filter --drop-uniform": ["filter", dump, "-o", scratch, "--force", "--drop-uniform", "--allow-empty"],
            "audit (output)": ["audit", out, "--against", "advantages", "--json", *grpo],
            "compare (verl vs nemo)": ["compare", dump, *grpo, "--flavor", "nemo", "--json"],
        }
        print(f"{'command':<26}{'peak RSS':>12}{'wall':>10}")
        for name, args in cases.items():
            rss, wall = measure(args)
            print(f"{name:<26}{rss:>9,.0f} MiB{wall:>9.1f}s")
    finally:
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
