"""Run the conformance tests (tests/conformance/test_conformance_*.py) against a matrix of the trainers'
released packages and print one line per release: the tests that passed, failed and were skipped, and the first failure.

Each release is installed with ``pip install --no-deps PKG==VERSION`` (plus the few small modules the
tests' imports need, the ``conformance`` extra of pyproject.toml less the trainers) into its own temporary
virtual environment, which sees the current environment's packages (torch, advcli, pytest) behind its
own, so the release under test shadows any other installed version of it::

    python tools/conformance_matrix.py                       # the newest 4 releases of each trainer
    python tools/conformance_matrix.py --last 8 trl          # TRL's 8 newest
    python tools/conformance_matrix.py verl==0.9.0 trl==1.9.2 # chosen releases
    python tools/conformance_matrix.py --all trl             # every recorded release of TRL that has an entry
    python tools/conformance_matrix.py --all --unmapped trl  # ... and the recorded ones that have none

``--all`` takes the recorded lists of the package index's releases (advcli/flavors/index/DIST.json, refreshed by
tools/refresh_releases.py) instead of asking the index. Each release runs with the settings of the table entry it
is listed under (its name or alias; none: the flavor's newest state), so a release that passes confirms its
entry; the ``entry`` column names it.

A release whose code the tests cannot find (a function renamed, a trainer class restructured) shows as
failed with the first error line: the tests only know the layout of the releases named in the flavors'
release tables.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # advcli of this checkout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# trainer distribution -> its test module
TESTS = {"verl": ("test_conformance_verl.py", "test_conformance_verl_rollout_correction.py"),
         "trl": ("test_conformance_trl.py", "test_conformance_trl_old_rloo.py"),
         "openrlhf": ("test_conformance_openrlhf.py", "test_conformance_openrlhf_old.py"),
         "skyrl": "test_conformance_skyrl.py",
         "areal": "test_conformance_areal.py"}
# small modules the released code imports at call time (SkyRL's rloo logs through loguru)
HELPERS = ["loguru"]


def releases(dist: str, last: int) -> list[str]:
    """The newest ``last`` releases of ``dist`` installable here, newest first (``pip index versions``)."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", out.stdout)
    if not m:
        return []
    versions = [v.strip() for v in m.group(1).split(",")]
    return [v for v in versions if not re.search(r"(dev|rc|a|b)\d*$", v)][:last]


def recorded(dist: str, unmapped: bool) -> list[str]:
    """Every recorded release of ``dist`` (newest first) that has an entry in the flavor's release table, and with
    ``unmapped`` also those that have none."""
    from advcli.flavors import get
    from advcli.flavors._releases import index_mapping

    return [v for v, _, entry in index_mapping(get(dist).releases, dist) if entry is not None or unmapped]


def entry_name(dist: str, version: str) -> str:
    from advcli.flavors import get
    from advcli.flavors._releases import entry_of

    entry = entry_of(get(dist).releases, version)
    return entry.name if entry else "-"


def run_one(dist: str, version: str, timeout: int) -> tuple[str, str]:
    """(counts, first failure) of the dist's test module against one release, in a temporary venv."""
    with tempfile.TemporaryDirectory(prefix=f"conform-{dist}-") as tmp:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        py = os.path.join(venv, "bin", "python")
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        # the current environment behind the venv's own packages: torch, advcli, pytest, the helpers
        base = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        with open(os.path.join(site, "_conformance_base.pth"), "w") as f:
            f.write("\n".join(sorted(base)) + "\n")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                              "--ignore-requires-python", f"{dist}=={version}"], capture_output=True, text=True)
        if pip.returncode:
            return "not installed", (pip.stderr.strip().splitlines() or ["pip failed"])[-1]
        env = dict(os.environ, PYTHONPATH=ROOT, ADVCLI_SERVER="off")
        try:
            files = (TESTS[dist],) if isinstance(TESTS[dist], str) else TESTS[dist]
            res = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  *(os.path.join(ROOT, "tests", "conformance", f) for f in files)],
                                 capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timed out", f"past {timeout} s"
        lines = res.stdout.strip().splitlines()
        summary = lines[-1] if lines else res.stderr.strip()[-200:]
        counts = ", ".join(re.findall(r"\d+ (?:passed|failed|skipped|error)", summary)) or summary
        first = next((ln for ln in lines if ln.startswith("E ")), "")
        return counts, first[2:].strip()[:160]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="*", help="trainers (verl, trl, openrlhf, skyrl, areal) or DIST==VERSION")
    p.add_argument("--last", type=int, default=4, help="releases per trainer when none is named (default 4)")
    p.add_argument("--all", action="store_true", help="every recorded release (advcli/flavors/index) that has an "
                   "entry in the flavor's release table")
    p.add_argument("--unmapped", action="store_true", help="with --all: also the recorded releases without an entry")
    p.add_argument("--timeout", type=int, default=600, help="seconds per release (default 600)")
    args = p.parse_args(argv)
    targets = args.targets or list(TESTS)
    plan: list[tuple[str, str]] = []
    for t in targets:
        dist, _, version = t.partition("==")
        if dist not in TESTS:
            p.error(f"{dist}: not a packaged trainer; known: {', '.join(TESTS)}")
        if version:
            plan.append((dist, version))
        elif args.all:
            plan += [(dist, v) for v in recorded(dist, args.unmapped)]
        else:
            plan += [(dist, v) for v in releases(dist, args.last)]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *HELPERS], check=False)
    rows = [("trainer", "release", "entry", "tests", "first failure")]
    for dist, version in plan:
        counts, first = run_one(dist, version, args.timeout)
        rows.append((dist, version, entry_name(dist, version), counts, first))
        print(f"{dist}=={version}: {counts}", file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + ("  " + r[4] if r[4] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
