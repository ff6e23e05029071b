"""Peak memory of reading trainer dumps (advcli.formats): does it stay bounded as the dump grows?

    python benchmarks/formats_memory.py                # NeMo JSONL of 1x and 4x SIZE, verl dirs of 500/2000 files
    python benchmarks/formats_memory.py --scale 2.0    # bigger dumps (SIZE x scale)

Each case writes a synthetic dump into ``bench_data/formats/`` (git-ignored; deleted afterwards) and runs
``advcli convert`` and ``advcli run --flavor nemo|verl`` on it in a fresh subprocess; peak RSS and CPU time
come from ``os.wait4``. Bounded memory means the peak does not grow with the dump: the 4x file should
peak where the 1x file does (the converter holds one batch of BATCH_ROWS rows / BATCH_VALUES token
values, plus one small entry per group).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "bench_data", "formats")
PY = sys.executable


def nemo_file(path: str, rows: int, seq: int = 1024, group: int = 8) -> int:
    """A NeMo RL train_data_step1.jsonl of ``rows`` rows of ``seq`` tokens (prompt 64)."""
    rnd = random.Random(0)
    with open(path, "w") as fh:
        for i in range(rows):
            g = i // group
            L = 64 + rnd.randint(16, seq - 64)
            mask = [0] * 64 + [1] * (L - 64) + [0] * (seq - L)
            rec = {"content": [["p", "r"]], "rewards": [float(rnd.random() < 0.5)], "input_lengths": [L],
                   "token_ids": [[g % 50000 + 7] * 64 + [rnd.randint(0, 50000) for _ in range(seq - 64)]],
                   "token_loss_mask": [mask], "sample_loss_mask": [1.0], "advantages": [[0.5] * seq],
                   "generation_logprobs": [[round(-rnd.random(), 4) for _ in range(seq)]],
                   "prev_logprobs": [[round(-rnd.random(), 4) for _ in range(seq)]], "idx": [i]}
            fh.write(json.dumps(rec) + "\n")
    return os.path.getsize(path)


def verl_dir(path: str, files: int, rows: int = 64, group: int = 8) -> int:
    """A verl rollout_data_dir of ``files`` step files ({step}.jsonl, v1 uid) of ``rows`` rows each."""
    os.makedirs(path, exist_ok=True)
    rnd = random.Random(1)
    total = 0
    for s in range(1, files + 1):
        p = os.path.join(path, f"{s}.jsonl")
        with open(p, "w") as fh:
            for i in range(rows):
                uid = f"{s:08x}-0000-4000-8000-{i // group:012x}_{i % group}_0"
                fh.write(json.dumps({"input": "q" * 200, "output": "a" * 400, "gts": "1",
                                     "score": float(rnd.random() < 0.5), "step": s, "uid": uid}) + "\n")
        total += os.path.getsize(p)
    return total


def measure(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.Popen([PY, "-m", "advcli", *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"advcli {' '.join(argv)} failed:\n{err}")
    return {"seconds": round(time.perf_counter() - t0, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
            "peak_rss_mib": round(ru.ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the dump sizes")
    ap.add_argument("--keep", action="store_true", help="keep bench_data/formats afterwards")
    ap.add_argument("--only", choices=("nemo", "verl"), help="one of the two dump kinds")
    a = ap.parse_args()
    os.makedirs(DATA, exist_ok=True)
    results = []
    try:
        for mult in (1, 4) if a.only != "verl" else ():
            rows = int(2048 * mult * a.scale)
            d = os.path.join(DATA, f"nemo_{mult}x", "exp_001")
            os.makedirs(d, exist_ok=True)
            size = nemo_file(os.path.join(d, "train_data_step1.jsonl"), rows)
            out = os.path.join(DATA, "out.parquet")
            for name, argv in (("convert", ["convert", d, "-o", out, "--force", "-q"]),
                               ("run nemo grpo", ["run", d, "-o", out, "--force", "-q", "--flavor", "nemo"])):
                r = measure(argv)
                results.append({"dump": f"nemo-jsonl {rows} rows", "bytes": size, "command": name, **r})
                print(json.dumps(results[-1]), flush=True)
            shutil.rmtree(os.path.dirname(d))
        for files in (int(500 * a.scale), int(2000 * a.scale)) if a.only != "nemo" else ():
            d = os.path.join(DATA, f"verl_{files}")
            size = verl_dir(d, files)
            out = os.path.join(DATA, "out.parquet")
            for name, argv in (("convert", ["convert", d, "-o", out, "--force", "-q"]),
                               ("run verl grpo", ["run", d, "-o", out, "--force", "-q", "--flavor", "verl",
                                                  "--set", "algorithm.adv_estimator=grpo"])):
                r = measure(argv)
                results.append({"dump": f"verl-jsonl {files} files", "bytes": size, "command": name, **r})
                print(json.dumps(results[-1]), flush=True)
            shutil.rmtree(d)
    finally:
        if not a.keep:
            shutil.rmtree(DATA, ignore_errors=True)
    print("\n| dump | size | command | seconds | CPU s | peak RSS |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['dump']} | {r['bytes'] / 2**20:,.0f} MiB | {r['command']} | {r['seconds']} | {r['cpu_s']} | "
              f"{r['peak_rss_mib']:,.0f} MiB |")


if __name__ == "__main__":
    main()
