"""Start-up: what a command costs before it reads a row, the figures docs/server.md and README quote.

Each case is a fresh subprocess timed from outside (wall), the cases interleaved over ``--runs`` rounds,
medians printed:

- ``python -c pass``: the interpreter alone;
- ``import pyarrow`` and ``import torch``: the two heavy imports, each in a fresh interpreter;
- ``advcli --version``: the entry point, no torch;
- ``advcli run`` on the 384-row sample (``sample_data/rollouts.parquet``, verl GRPO): a whole small run in
  its own process (``ADVCLI_SERVER=off``), where start-up is nearly all of it;
- the same run handed to an ``advcli server`` (started once, in a private directory, before the rounds):
  the command's own start-up, the hand-over and the fork, with torch already imported (the server stops
  by itself after 10 minutes without a command, should this script be killed).

Usage: ``python benchmarks/server_startup.py [--runs 7]`` (on a shared machine, under ``flock``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable
SAMPLE = os.path.join(ROOT, "sample_data", "rollouts.parquet")


def wall(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="advcli-startup-")
    server_dir = os.path.join(tmp, "server")
    os.makedirs(server_dir, mode=0o700)
    out = os.path.join(tmp, "out.parquet")
    off = {"ADVCLI_SERVER": "off"}
    served = {"ADVCLI_SERVER": "require", "ADVCLI_SERVER_DIR": server_dir}
    run = [PY, "-m", "advcli", "run", SAMPLE, "-o", out, "--force", "-q", "--flavor", "verl", "--set",
           "algorithm.adv_estimator=grpo"]
    cases = {
        "python -c pass": ([PY, "-c", "pass"], off),
        "import pyarrow": ([PY, "-c", "import pyarrow, pyarrow.parquet"], off),
        "import torch": ([PY, "-c", "import torch"], off),
        "advcli --version": ([PY, "-m", "advcli", "--version"], off),
        "advcli run sample (own process)": (run, off),
        "advcli run sample (served)": (run, served),
    }
    subprocess.run([PY, "-m", "advcli", "server", "start", "--idle-timeout", "10m"], check=True, cwd=ROOT,
                   env={**os.environ, **served, "ADVCLI_SERVER": "auto"})
    try:
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.runs):
            for name, (cmd, env) in cases.items():
                times[name].append(wall(cmd, env))
    finally:
        subprocess.run([PY, "-m", "advcli", "server", "stop"], cwd=ROOT,
                       env={**os.environ, **served, "ADVCLI_SERVER": "auto"})
    print(f"start-up, median of {args.runs} (wall s; min-max)")
    for name, ts in times.items():
        print(f"  {name:34s} {statistics.median(ts):6.3f}  ({min(ts):.3f}-{max(ts):.3f})")


if __name__ == "__main__":
    main()
