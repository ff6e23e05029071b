"""Refresh the recorded lists of the packaged trainers' releases on the package index
(``advcli/flavors/index/DIST.json``, one file per trainer: verl, trl, openrlhf, skyrl, areal).

Each file lists every final release (no dev/rc/alpha/beta, yanked ones marked) with its upload date, newest
first, as the index serves them: the PyPI JSON API (``https://pypi.org/pypi/DIST/json``), or, where that
cannot be reached, ``pip index versions DIST`` (versions only, dates left empty).
``tests/flavors/test_release_index.py`` fails when a recorded release has no entry in the flavor's release
table, so after a refresh that adds a release, run ``tools/conformance_matrix.py DIST==VERSION`` and add it to
the table (an alias of the release whose semantics it runs, or a new release with what changed)::

    python tools/refresh_releases.py            # every trainer
    python tools/refresh_releases.py trl verl   # some
    python tools/refresh_releases.py --check    # exit 1 when a recorded list is out of date, writing nothing
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INDEX_DIR = os.path.join(ROOT, "advcli", "flavors", "index")
# trainer distribution on the index -> the --flavor it maps to
DISTS = {"verl": "verl", "trl": "trl", "openrlhf": "openrlhf", "skyrl": "skyrl", "areal": "areal"}
PRE = re.compile(r"(dev|rc|a|b|alpha|beta)\d*$")
JSON_API = "https://pypi.org/pypi/{}/json"


def _key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]|post", version) if p)


def from_json_api(dist: str, timeout: float = 30) -> list[dict]:
    with urllib.request.urlopen(JSON_API.format(dist), timeout=timeout) as r:  # noqa: S310 (a fixed https URL)
        data = json.load(r)
    out = []
    for version, files in data["releases"].items():
        if PRE.search(version) or not files:
            continue
        out.append({"version": version, "date": min(f["upload_time"] for f in files)[:10],
                    **({"yanked": True} if all(f.get("yanked") for f in files) else {})})
    return sorted(out, key=lambda r: _key(r["version"]), reverse=True)


def from_pip(dist: str) -> list[dict]:
    res = subprocess.run([sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True)
    m = re.search(r"Available versions: (.*)", res.stdout)
    if not m:
        raise RuntimeError(f"pip index versions {dist}: {res.stderr.strip()[-200:]}")
    versions = [v.strip() for v in m.group(1).split(",") if not PRE.search(v.strip())]
    return [{"version": v, "date": ""} for v in sorted(versions, key=_key, reverse=True)]


def fetch(dist: str) -> tuple[list[dict], str]:
    try:
        return from_json_api(dist), "PyPI JSON API"
    except OSError as e:
        print(f"{dist}: PyPI JSON API unreachable ({e}); using pip index versions", file=sys.stderr)
        return from_pip(dist), "pip index versions"


def dumps(doc: dict) -> str:
    """The recorded list as JSON, one release a line (a refresh's diff shows the releases added)."""
    head = {k: v for k, v in doc.items() if k != "releases"}
    lines = ",\n".join("  " + json.dumps(r) for r in doc["releases"])
    return json.dumps(head, indent=1)[:-2] + ',\n "releases": [\n' + lines + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dists", nargs="*", help=f"trainers ({', '.join(DISTS)}); default all")
    p.add_argument("--check", action="store_true", help="compare only: exit 1 when a list is out of date")
    args = p.parse_args(argv)
    stale = 0
    for dist in args.dists or list(DISTS):
        if dist not in DISTS:
            p.error(f"{dist}: not a packaged trainer; known: {', '.join(DISTS)}")
        releases, source = fetch(dist)
        path = os.path.join(INDEX_DIR, f"{dist}.json")
        old = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {"releases": []}
        known = {r["version"] for r in old["releases"]}
        new = [r["version"] for r in releases if r["version"] not in known]
        print(f"{dist}: {len(releases)} releases ({source})" + (f", new: {', '.join(new)}" if new else ""))
        if args.check:
            stale += bool(new)
            continue
        doc = {"package": dist, "flavor": DISTS[dist], "source": source,
               "refreshed": datetime.date.today().isoformat(), "releases": releases}
        os.makedirs(INDEX_DIR, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(dumps(doc))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
