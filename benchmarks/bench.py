"""advcli against the I/O floor and a padded-and-looped baseline, side by side in one run.

    python benchmarks/bench.py                 # 16,384 rows (~17.3M tokens) + a half-size dump
    python benchmarks/bench.py --runs 5        # medians of 5 rounds (default 3)
    python benchmarks/bench.py --big           # also the 8x dump (~140M tokens, ~1.5 GB): peak RSS
                                               # of every estimator; the dump is deleted afterwards
    python benchmarks/bench.py --cold          # the input dropped from the page cache before every run

Every measurement is a fresh subprocess (start-up included) timed from outside; its CPU time and
peak RSS come from ``os.wait4``. The rounds interleave the cases, so a burst of load from other
processes on the machine hits them alike; medians are reported.

* floor:    ``benchmarks/floor.py`` — pyarrow read of every column + write of the augmented table:
  ``floor`` with two columns of zeros, ``floor grpo``/``floor gae`` with the columns advcli writes
  for that estimator (row-constant / token-varying floats, taken from the input without math)
* advcli:   ``advcli run`` (verl GAE with k3 KL in the reward, writing advantages and returns, and
  ``gae+tlr``: its default full output with token_level_rewards, against ``floor gae+tlr``; verl GRPO)
* baseline: ``benchmarks/baseline.py`` — load all, pad, the frameworks' Python loops, write back
  (default: pyarrow read, pad_sequence + pyarrow's default writer; ``baseline-lean``: vectorised +
  tuned writer; ``baseline-pandas``: pd.read_parquet, the whole dump padded, df.to_parquet)

``advcli-server``: the same advcli commands handed to a running ``advcli server`` (started once before
the rounds, in a private directory, and stopped after): the run forks from a process that has already
imported torch and advcli, so start-up is ~0.1 s instead of ~2 s. Its CPU time and peak RSS are not
the client's to report (the work happens in the server's child), so only its wall time is given. All
other advcli cases run with ``ADVCLI_SERVER=off``.

``--cold`` asks the kernel to drop the input's pages from the page cache before every measurement
(``POSIX_FADV_DONTNEED``; no root needed): the runs then read the dump from the disk, as on a fresh
machine, and advcli's start-up readahead (``advcli.io.readahead``) overlaps that read with its
torch import. On a VM the host's own cache may still serve the "cold" reads.

advcli's modules are byte-compiled once before timing (``compileall``), as a wheel install ships
them: with ``PYTHONDONTWRITEBYTECODE`` set (as on the benchmark machine and in many containers) an
editable checkout would otherwise compile its ~120 modules from source at every start.

Per-token cost is the slope between the half-size and the full dump (seconds per million tokens),
so start-up and fixed costs drop out; the whole-run figures include them.
Data lives in ``bench_data/`` (git-ignored).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "bench_data")
PY = sys.executable

GAE_K3 = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae", "--set", "algorithm.use_kl_in_reward=true",
          "--set", "algorithm.kl_penalty=low_var_kl"]
# the floor writes two new list columns: GAE is timed writing those two (advantages, returns);
# "advcli gae+tlr" is the default run, which also writes token_level_rewards (KL enters the reward)
ADVCLI = {
    "gae": GAE_K3 + ["--write-columns", "advantages,returns"],
    "gae+tlr": GAE_K3,  # verl's defaults, full output: token_level_rewards too (issue 21's target)
    "grpo": ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"],
}
BASELINES = ("gae", "grpo")  # baseline.py's loops; "gae+tlr" is compared with the GAE baseline
# --big: every verl estimator the sample dump can feed (gdpo reads the acc/fmt components)
# the floor writes the table advcli writes, without the math: "floor" two columns of zeros (a lower
# bound), "floor grpo" the two row-constant columns of a row-level estimator, "floor gae" two
# token-varying float columns like GAE's advantages and returns (see floor.py)
FLOORS = {"zeros": "floor", "grpo": "floor grpo", "gae": "floor gae", "gae+tlr": "floor gae+tlr"}
BIG_ESTIMATORS = ["gae", "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
                  "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gdpo"]


def measure(cmd: list[str], env: dict | None = None) -> dict:
    """Wall seconds, CPU seconds (user + sys) and peak RSS (MiB) of one subprocess."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024}


SERVER_DIR = os.path.join(DATA, "server")
NO_SERVER = {"ADVCLI_SERVER": "off"}
VIA_SERVER = {"ADVCLI_SERVER": "require", "ADVCLI_SERVER_DIR": SERVER_DIR}


def server(action: str) -> None:
    """``advcli server start|stop`` in the benchmark's private server directory."""
    os.makedirs(SERVER_DIR, mode=0o700, exist_ok=True)
    os.chmod(SERVER_DIR, 0o700)
    subprocess.run([PY, "-m", "advcli", "server", action, *(["--idle-timeout", "never"] if action == "start" else [])],
                   check=True, cwd=ROOT, env={**os.environ, **VIA_SERVER, "ADVCLI_SERVER": "auto"})


def advcli_cmd(src: str, dst: str, est: str, extra: list[str] = ()) -> list[str]:
    args = ADVCLI.get(est) or ["--flavor", "verl", "--set", f"algorithm.adv_estimator={est}"]
    if est == "gdpo":
        args = args + ["--set", "algorithm.gdpo_reward_keys=[acc,fmt]"]
    return [PY, "-m", "advcli", "run", src, "-o", dst, "--force", "-q", *args, *extra]


def ensure_dump(path: str, rows: int, seed: int = 0) -> None:
    if not os.path.exists(path):
        print(f"generating {path} ({rows:,} rows)", file=sys.stderr)
        subprocess.run([PY, "-m", "advcli", "sample", path, "--rows", str(rows), "--min-len", "64", "--max-len",
                        "2048", "--group-size", "16", "--seed", str(seed), "--force"], check=True, cwd=ROOT)


def tokens_of(path: str) -> int:
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    col = [i for i in range(md.num_columns) if md.schema.column(i).path.startswith("response_mask.")][0]
    return sum(md.row_group(g).column(col).num_values for g in range(md.num_row_groups))


def make_big(path: str, pieces: int = 8, rows: int = 16384) -> None:
    """``pieces`` sample dumps of ``rows`` rows in one file, prompt ids reassigned so that every group
    of 16 is scattered over the whole file (a random permutation of all rows)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, ROOT)
    from advcli.sample import make_table

    perm = np.random.default_rng(7).permutation(pieces * rows)
    tmp = path + ".tmp"
    writer = None
    for k in range(pieces):
        t = make_table(rows, 16, 64, 2048, seed=100 + k)
        gid = perm[k * rows:(k + 1) * rows] // 16
        t = t.set_column(t.schema.get_field_index("prompt_id"), "prompt_id",
                         pa.array([f"prompt-{g:06d}" for g in gid.tolist()]))
        if writer is None:
            writer = pq.ParquetWriter(tmp, t.schema, compression="zstd")
        writer.write_table(t, row_group_size=rows)
        del t
    writer.close()
    os.replace(tmp, path)


def evict(path: str) -> None:
    """Drop ``path``'s pages from the page cache (clean pages only: the dumps are written once)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def compile_advcli() -> None:
    """Byte-compile advcli's modules into __pycache__ (what ``pip install`` of a wheel does)."""
    import compileall

    compileall.compile_dir(os.path.join(ROOT, "advcli"), quiet=1)


def med(xs):
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also measure peak RSS on the 8x dump (~1.5 GB, deleted after)")
    ap.add_argument("--keep-big", action="store_true", help="keep the 8x dump for the next --big")
    ap.add_argument("--big-only", action="store_true", help="only the 8x dump's peak-RSS table (implies --big)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated: keep the cases whose name contains one of "
                    "these (e.g. 'gae' for the GAE floor, advcli and baselines); the table skips the rest")
    ap.add_argument("--cold", action="store_true", help="drop the input from the page cache before every run")
    ap.add_argument("--no-server", action="store_true", help="leave out the advcli-server cases")
    ap.add_argument("--json", default=os.path.join(DATA, "results.json"))
    args = ap.parse_args()
    compile_advcli()
    os.makedirs(DATA, exist_ok=True)
    full, half = os.path.join(DATA, "dump.parquet"), os.path.join(DATA, "half.parquet")
    ensure_dump(full, 16384)
    ensure_dump(half, 8192, seed=1)
    ntok = {full: tokens_of(full), half: tokens_of(half)}
    out = os.path.join(DATA, "out.parquet")

    cases: dict[str, list] = {}
    for name, src in (("full", full), ("half", half)):
        for like in FLOORS:
            cases[f"{FLOORS[like]}/{name}"] = [PY, os.path.join(HERE, "floor.py"), src, out, "--like", like]
        for est in ADVCLI:
            cases[f"advcli {est}/{name}"] = advcli_cmd(src, out, est)
            if not args.no_server:
                cases[f"advcli-server {est}/{name}"] = advcli_cmd(src, out, est)
    cases["advcli gae sidecar/full"] = advcli_cmd(full, out, "gae", ["--output-mode", "sidecar"])
    cases["advcli grpo sidecar/full"] = advcli_cmd(full, out, "grpo", ["--output-mode", "sidecar"])
    if not args.no_baseline:
        for est in BASELINES:
            cases[f"baseline {est}/full"] = [PY, os.path.join(HERE, "baseline.py"), est, full, out]
            for variant in ("lean", "pandas"):
                cases[f"baseline-{variant} {est}/full"] = [PY, os.path.join(HERE, "baseline.py"), est, full, out,
                                                           f"--{variant}"]
    if args.only:
        keep = [k for k in args.only.split(",") if k]
        cases = {k: v for k, v in cases.items() if any(x in k for x in keep)}
    if args.big_only:
        args.big, cases = True, {}
    res: dict[str, list] = {k: [] for k in cases}
    served = any(k.startswith("advcli-server") for k in cases)
    if served:
        server("start")
    for r in range(args.runs if cases else 0):
        for k, cmd in cases.items():
            if args.cold:
                evict(full if k.endswith("/full") else half)
            m = measure(cmd, VIA_SERVER if k.startswith("advcli-server") else NO_SERVER)
            res[k].append(m)
            print(f"round {r + 1}/{args.runs} {k:28s} {m['wall']:6.2f} s wall {m['cpu']:6.2f} s cpu "
                  f"{m['rss_mib']:7.0f} MiB", file=sys.stderr)
    if served:
        server("stop")
    if os.path.exists(out):
        os.remove(out)

    summary: dict = {}
    rows: list = []
    if cases:
        summary = {k: {"wall": med([m["wall"] for m in v]), "cpu": med([m["cpu"] for m in v]),
                       "rss_mib": max(m["rss_mib"] for m in v), "walls": [round(m["wall"], 2) for m in v]}
                   for k, v in res.items()}
        dtok = (ntok[full] - ntok[half]) / 1e6

        def slope(kind: str, what: str) -> float:  # seconds per million tokens, per round then median
            return med([(a[what] - b[what]) / dtok for a, b in zip(res[f"{kind}/full"], res[f"{kind}/half"])])

        print(f"\n{platform.node()} · {os.cpu_count()} cores · load average {os.getloadavg()[0]:.1f} · "
              f"{ntok[full] / 1e6:.1f}M / {ntok[half] / 1e6:.1f}M tokens · medians of {args.runs} rounds\n")
        print("| case | wall s (full) | CPU s (full) | peak RSS MiB | s per M tokens (wall) | vs floor (zeros) "
              "| vs its floor | CPU s per M tokens | vs its floor (CPU) "
              "| baseline ÷ advcli (wall) | lean baseline ÷ advcli | pandas baseline ÷ advcli |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        fl = slope("floor", "wall") if "floor/full" in summary else None
        for kind in list(FLOORS.values()) + [f"advcli {e}" for e in ADVCLI] + [f"advcli-server {e}" for e in ADVCLI]:
            if f"{kind}/full" not in summary or f"{kind}/half" not in summary:
                continue
            s = summary[f"{kind}/full"]
            sl = slope(kind, "wall")
            est = kind.split()[-1]
            base_est = est.split("+")[0]
            own = (slope(f"floor {est}", "wall") if kind.startswith("advcli") and f"floor {est}/half" in summary
                   else None)
            speed = ["", "", ""]
            for i, b in enumerate(("baseline", "baseline-lean", "baseline-pandas")):
                if kind.startswith("advcli") and f"{b} {base_est}/full" in summary:
                    speed[i] = f"{summary[f'{b} {base_est}/full']['wall'] / s['wall']:.2f}x"
            own_s = f"{sl / own:.2f}x" if own else ""
            vs_zeros = f"{sl / fl:.2f}x" if fl else ""
            # the CPU-time slope: what the per-token work costs whatever else loads the machine
            # (not for advcli-server: its CPU and memory are the server child's, which wait4 does not see)
            client_only = kind.startswith("advcli-server")
            sl_cpu = None if client_only else slope(kind, "cpu")
            own_cpu = slope(f"floor {est}", "cpu") if own and not client_only else None
            own_cpu_s = f"{sl_cpu / own_cpu:.2f}x" if own_cpu else ""
            cpu_s, rss_s, sl_cpu_s = (("", "", "") if client_only else
                                      (f"{s['cpu']:.2f}", f"{s['rss_mib']:.0f}", f"{sl_cpu:.3f}"))
            print(f"| {kind} | {s['wall']:.2f} | {cpu_s} | {rss_s} | {sl:.3f} | {vs_zeros} "
                  f"| {own_s} | {sl_cpu_s} | {own_cpu_s} | {speed[0]} | {speed[1]} | {speed[2]} |")
            rows.append({"case": kind, **s, "s_per_mtok": sl, "vs_floor": (sl / fl) if fl else None,
                         "vs_own_floor": (sl / own) if own else None, "cpu_s_per_mtok": sl_cpu,
                         "vs_own_floor_cpu": (sl_cpu / own_cpu) if own_cpu else None, "speedup": speed})
        for k in summary:
            if "sidecar" in k or k.startswith("baseline"):
                s = summary[k]
                print(f"| {k[:-5]} | {s['wall']:.2f} | {s['cpu']:.2f} | {s['rss_mib']:.0f} | | | | | | | | |")
    result = {"machine": {"node": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()}, "cold": args.cold,
              "tokens": {"full": ntok[full], "half": ntok[half]}, "runs": args.runs, "summary": summary,
              "table": rows}

    if args.big:
        big = os.path.join(DATA, "big.parquet")
        if not os.path.exists(big):
            print("generating the 8x dump", file=sys.stderr)
            # in a child: Linux reports a child's peak RSS as at least its parent's at fork time, so
            # the parent must not have held the pieces while the estimators run
            subprocess.run([PY, "-c", f"import bench; bench.make_big({big!r})"], check=True, cwd=HERE)
        ntok["big"] = tokens_of(big)
        print(f"\n8x dump: {ntok['big'] / 1e6:.1f}M tokens, groups of 16 scattered over the whole file\n")
        print("| estimator | wall s | CPU s | peak RSS MiB |")
        print("|---|---|---|---|")
        result["big"] = {"tokens": ntok["big"], "runs": {}}
        bigout = os.path.join(DATA, "big_out.parquet")
        for est in BIG_ESTIMATORS:
            # the default run (GAE also writes token_level_rewards): memory of what users run
            cmd = [PY, "-m", "advcli", "run", big, "-o", bigout, "--force", "-q", *GAE_K3] if est == "gae" else \
                advcli_cmd(big, bigout, est)
            m = measure(cmd, NO_SERVER)
            result["big"]["runs"][est] = m
            print(f"| {est} | {m['wall']:.1f} | {m['cpu']:.1f} | {m['rss_mib']:.0f} |", flush=True)
        for p in [bigout] + ([] if args.keep_big else [big]):
            if os.path.exists(p):
                os.remove(p)
    with open(args.json, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"\nfigures: {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
