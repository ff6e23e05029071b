"""How long the ``advcli`` command takes to start: three figures, each the minimum of several fresh processes.

    python benchmarks/startup.py              # 10 rounds
    python benchmarks/startup.py --runs 20

* ``advcli --help``
* ``advcli run --help``
* ``advcli run sample_data/rollouts.parquet -o OUT``: the time from the process's start to its first
  ``import torch`` (the run's work that torch does not need: the command line parsed, the dump opened
  and the configuration resolved). The process stops there: torch's own import (seconds, cold or warm)
  is not advcli's to make faster, and ``advcli server`` removes it (docs/performance.md).

Each figure is the wall time of a fresh ``python -m advcli`` seen from outside (interpreter start-up
included; it is printed too, as ``python -c pass``). The rounds interleave the cases, so a burst of
load from other processes hits them alike; the minimum is the figure a quiet machine gives, and the
median is printed beside it, and so is the CPU time (user + system, from ``os.wait4``), which
other processes disturb less. ``ADVCLI_SERVER=off``: a running ``advcli server`` would otherwise answer.

advcli's modules are byte-compiled once before timing, and one untimed round runs first, as an
installed package has its byte code: with ``PYTHONDONTWRITEBYTECODE`` set (as in many containers) an
editable checkout would otherwise compile its modules from source at every start. The versions of
typer, rich and click that were used are printed: typer's release changes the figures (0.29 builds
pydantic adapters for the parameters it converts).
"""
from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run as ``python -c``: advcli's entry point, stopped (exit 0, nothing written) when something first
# imports torch. The finder sits first on sys.meta_path and only watches; it never loads anything.
_UNTIL_TORCH = """
import os, sys
class _StopAtTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            sys.stdout.flush()
            os._exit(0)
        return None
sys.meta_path.insert(0, _StopAtTorch)
sys.argv = ["advcli"] + sys.argv[1:]
from advcli._entry import main
main()
sys.exit(3)  # the run ended without importing torch: not what this figure measures
"""


def _env() -> dict:
    env = dict(os.environ, ADVCLI_SERVER="off", COLUMNS="100", PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the untimed round writes the byte code of what it imports
    return env


def _timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} ended with {proc.returncode}:\n{err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="fresh processes per figure (default 10)")
    args = ap.parse_args()

    compileall.compile_dir(str(ROOT / "advcli"), quiet=1)
    env = _env()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="advcli-startup-") as tmp:
        out = os.path.join(tmp, "out.parquet")
        cases = {
            "python -c pass": [py, "-c", "pass"],
            "advcli --help": [py, "-m", "advcli", "--help"],
            "advcli run --help": [py, "-m", "advcli", "run", "--help"],
            "advcli run, until import torch": [py, "-c", _UNTIL_TORCH, "run", "sample_data/rollouts.parquet",
                                               "-o", out],
        }
        for argv in cases.values():  # untimed: byte code written, files in the page cache
            _timed(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, argv in cases.items():
                times[name].append(_timed(argv, env))
        if os.path.exists(out):
            raise SystemExit("the run wrote its output before importing torch: the figure is not what it says")

    versions = ", ".join(f"{p} {_version(p)}" for p in ("typer", "click", "rich", "pydantic"))
    print(f"python {sys.version.split()[0]}; {versions}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'':32s} {'wall: min':>10s} {'median':>7s} {'CPU: min':>9s}   ({args.runs} fresh processes each)")
    for name, ts in times.items():
        wall, cpu = [t[0] for t in ts], [t[1] for t in ts]
        print(f"{name:32s} {min(wall):9.3f}s {statistics.median(wall):6.3f}s {min(cpu):8.3f}s")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


if __name__ == "__main__":
    main()
