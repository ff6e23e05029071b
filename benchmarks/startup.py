"""How long the ``advcli`` command takes to start: three figures, each the minimum of several fresh processes,
each printed against its target (issue 42: on a quiet machine, with the newest typer).

    python benchmarks/startup.py              # 10 rounds
    python benchmarks/startup.py --runs 20

* ``advcli --help`` (target 0.3 s)
* ``advcli run --help`` (target 0.5 s)
* ``advcli run sample_data/rollouts.parquet -o OUT``: the time from the process's start to its first
  ``import torch`` (the run's work that torch does not need: the command line parsed, the dump opened
  and the configuration resolved; target 0.15 s). The process stops there: torch's own import (seconds,
  cold or warm) is not advcli's to make faster, and ``advcli server`` removes it (docs/performance.md).

Each is measured through both doors a user has: the ``advcli`` entry script of this interpreter's
environment (where it is installed: the script pip wrote, which imports ``advcli._entry``) and
``python -m advcli``. Both hand the command to a server first (``advcli._entry``); ``ADVCLI_SERVER=off``
here, so that a running ``advcli server`` does not answer.

Each figure is the wall time of a fresh process seen from outside (interpreter start-up included; it is
printed too, as ``python -c pass``). The rounds interleave the cases, so a burst of load from other
processes hits them alike; the minimum is the figure a quiet machine gives, and the median is printed
beside it, and so is the CPU time (user + system, from ``os.wait4``), which other processes disturb less.
The verdict against each target reads the minimum wall time.

The floor is printed beside them, the import no figure can do without whatever advcli does: ``import
typer`` (the command line). A run reads its dump's Parquet footer before torch without pyarrow
(:mod:`advcli.io.footer`), so neither pyarrow nor numpy is imported before torch; ``import typer,
pyarrow.parquet`` is printed too, what the figure would hold if they were. A figure minus the floor is
advcli's own share.

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

# The same through ``python -m advcli`` (advcli/__main__.py, run as the interpreter's -m runs it).
_UNTIL_TORCH_M = _UNTIL_TORCH.replace(
    "from advcli._entry import main\nmain()\n",
    "import runpy\nsys.argv[0] = 'advcli'\nrunpy.run_module('advcli', run_name='__main__', alter_sys=True)\n")

# The entry script as pip writes it, run from its file (its own ``sys.argv[0]``), stopped at torch likewise.
_UNTIL_TORCH_SCRIPT = _UNTIL_TORCH.replace(
    "sys.argv = [\"advcli\"] + sys.argv[1:]\nfrom advcli._entry import main\nmain()\n",
    "script = sys.argv[1]\nsys.argv = sys.argv[1:]\nimport runpy\nrunpy.run_path(script, run_name='__main__')\n")

assert _UNTIL_TORCH_M != _UNTIL_TORCH != _UNTIL_TORCH_SCRIPT

TARGETS = {"advcli --help": 0.3, "advcli run --help": 0.5, "advcli run, until import torch": 0.15}


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
        run = ["run", "sample_data/rollouts.parquet", "-o", out]
        cases = {
            "python -c pass": [py, "-c", "pass"],
            "floor: import typer": [py, "-c", "import typer"],
            "import typer, pyarrow.parquet (not a floor)": [py, "-c", "import typer, pyarrow.parquet"],
        }
        script = _entry_script()
        for door, prefix in (("advcli", [py, script] if script else None), ("python -m advcli", [py, "-m", "advcli"])):
            if prefix is None:
                continue
            cases[f"advcli --help [{door}]"] = prefix + ["--help"]
            cases[f"advcli run --help [{door}]"] = prefix + ["run", "--help"]
            until = [py, "-c", _UNTIL_TORCH_SCRIPT, script] if door == "advcli" else [py, "-c", _UNTIL_TORCH_M]
            cases[f"advcli run, until import torch [{door}]"] = until + run
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
    if script is None:
        print("no advcli entry script beside this interpreter (pip install -e .): python -m advcli only")
    width = max(map(len, times)) + 1
    print(f"{'':{width}s} {'wall: min':>10s} {'median':>7s} {'CPU: min':>9s}   ({args.runs} fresh processes each)")
    for name, ts in times.items():
        wall, cpu = [t[0] for t in ts], [t[1] for t in ts]
        target = TARGETS.get(name.split(" [")[0])
        verdict = "" if target is None else \
            f"   target {target:.2f}s: {'met' if min(wall) <= target else 'NOT met'}"
        print(f"{name:{width}s} {min(wall):9.3f}s {statistics.median(wall):6.3f}s {min(cpu):8.3f}s{verdict}")
    floor = times["floor: import typer"]
    for name in times:
        if name.startswith("advcli"):
            own = [min(t[i] for t in times[name]) - min(t[i] for t in floor) for i in (0, 1)]
            print(f"{name}: {own[0]:+.3f}s wall, {own[1]:+.3f}s CPU above the floor of import typer "
                  "(advcli's own share)")


def _entry_script() -> str | None:
    """The ``advcli`` script pip installed beside this interpreter, or None."""
    path = os.path.join(os.path.dirname(sys.executable), "advcli")
    return path if os.path.isfile(path) else None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


if __name__ == "__main__":
    main()
