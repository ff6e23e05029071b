"""The Ray engine against the local engine on cross-check cases: for every case folder (``case.json`` with
the ``args`` of an ``advcli run`` and its ``input.parquet``), ``advcli run INPUT --output OUT ARGS`` runs
once with the local engine and once with ``--engine ray`` (one local Ray instance for all cases), and every
column of the two outputs must be equal (pyarrow ``equals``: same values, bit for bit, same row order).

The cases' expected values (from the frameworks' own code) are checked against the local engine by the
cross-check runner; this script checks that ``--engine ray`` gives the same table, so the Ray engine meets
every flavor's cases too. Exit status 1 when a case differs or fails on one engine only.

    python tools/ray_case_parity.py CASES_DIR [--only ID ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from _inprocess import run_cli as _run


def _differences(local: str, ray_out: str) -> list[str]:
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    a = pq.read_table(local)
    b = ds.dataset(ray_out, format="parquet").to_table() if os.path.isdir(ray_out) else pq.read_table(ray_out)
    if a.column_names != b.column_names:
        return [f"columns differ: {a.column_names} vs {b.column_names}"]
    if a.num_rows != b.num_rows:
        return [f"{a.num_rows} rows locally, {b.num_rows} with --engine ray"]
    return [c for c in a.column_names if not a.column(c).equals(b.column(c))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", help="a folder of case folders (case.json + input.parquet)")
    ap.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    ap.add_argument("--row-pass", choices=["auto", "driver", "workers"], default="auto",
                    help="where --engine ray's row pass runs (workers: the per-step driver where the run allows it)")
    args = ap.parse_args()
    os.environ.setdefault("ADVCLI_SERVER", "off")
    if args.row_pass != "auto":
        os.environ["ADVCLI_RAY_ROW_PASS"] = args.row_pass
    import ray

    ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    cases = sorted(d for d in os.listdir(args.cases) if os.path.isfile(os.path.join(args.cases, d, "case.json")))
    if args.only:
        cases = [c for c in cases if c in args.only]
    failed = 0
    for case in cases:
        folder = os.path.join(os.path.abspath(args.cases), case)
        meta = json.load(open(os.path.join(folder, "case.json"), encoding="utf-8"))
        with tempfile.TemporaryDirectory(prefix="ray_parity_") as tmp:
            outs = {}
            for engine in ("local", "ray"):
                out = os.path.join(tmp, engine, "out.parquet")
                os.makedirs(os.path.dirname(out))
                extra = ["--engine", "ray", "--quiet"] if engine == "ray" else ["--quiet"]
                outs[engine] = (out, *_run(["run", os.path.join(folder, "input.parquet"), "--output", out,
                                            *meta["args"], *extra]))
            (lo, lcode, lmsg), (ro, rcode, rmsg) = outs["local"], outs["ray"]
            if lcode or rcode:
                same_refusal = lcode == rcode and lmsg == rmsg
                print(f"{'ok  ' if same_refusal else 'FAIL'} {case}: exit {lcode} locally ({lmsg}), "
                      f"{rcode} with --engine ray ({rmsg})")
                failed += not same_refusal
                continue
            diff = _differences(lo, ro)
            print(f"{'FAIL' if diff else 'ok  '} {case}" + (f": differ in {', '.join(diff)}" if diff else
                                                         ": every column equal"))
            failed += bool(diff)
    print(f"ray parity: {len(cases) - failed}/{len(cases)} cases give the local engine's table")
    ray.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
