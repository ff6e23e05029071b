"""The GPU against the CPU: the same ``advcli run`` with ``--device cpu`` and ``--device cuda``, every output
column compared, on

* the cross-check cases (``CASES_DIR``: folders with ``case.json`` and ``input.parquet``; the CUDA output is
  also checked against the case's ``expected.parquet`` at its tolerance, on the positions it names),
* every registered estimator on a synthetic dump (``--flavor advcli --set estimator.name=NAME``, with the k3
  KL in the reward and without), and
* the trainers' default configurations on the sample data (``--sample``).

A column is ``equal`` when both runs wrote the same bits, else the largest absolute and relative difference
is printed (over finite values; a NaN on one side only counts as a difference). A run refused on both
devices with the same message counts as equal. Exit status 1 when a value differs by more than
atol + rtol·|cpu value| (a case's own tolerance; elsewhere ``--rtol``/``--atol``, default 1e-4 / 1e-5, the
cases' usual one) or a run fails on one device only.

    python tools/device_parity.py [CASES_DIR] [--sample sample_data/rollouts.parquet] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
from _inprocess import run_cli

# the configurations of the sample-data check: each trainer's default estimator, and the common switches
SAMPLE_CONFIGS = [
    ["--flavor", "verl"],
    ["--flavor", "verl", "--set", "algorithm.adv_estimator=rloo"],
    ["--flavor", "verl", "--set", "algorithm.adv_estimator=reinforce_plus_plus"],
    ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae", "--set", "algorithm.use_kl_in_reward=true",
     "--set", "algorithm.kl_ctrl.type=adaptive"],
    ["--flavor", "nemo"],
    ["--flavor", "trl", "--set", "advcli.group_by=id", "--set", "num_generations=8"],
    ["--flavor", "openrlhf", "--set", "algo.advantage.estimator=rloo", "--set", "rollout.n_samples_per_prompt=8",
     "--set", "advcli.group_by=id"],
    ["--flavor", "roll", "--set", "adv_estimator=grpo", "--set", "actor_infer.generating_args.num_return_sequences=8",
     "--set", "advcli.group_by=id"],
    ["--flavor", "slime", "--set", "advcli.group_by=id", "--set", "n_samples_per_prompt=8"],
    ["--flavor", "skyrl"],
    ["--flavor", "advcli", "--set", "estimator.name=gdpo", "--set", "reward.components=[acc, fmt]"],
    ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=false"],
]


def _read(path: str):
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _float_values(col, floats_only: bool = True) -> np.ndarray | None:
    """A number column's values (a list column's flattened values), as float64; None for a column that is
    not a float column (``floats_only``) or not a number column."""
    import pyarrow as pa

    arr = col.combine_chunks()
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        arr = arr.flatten()
    if not (pa.types.is_floating(arr.type) or (not floats_only and pa.types.is_integer(arr.type))):
        return None
    return arr.to_numpy(zero_copy_only=False).astype(np.float64)


def column_differences(a, b, tol: tuple[float, float]) -> dict[str, tuple[float, float, int] | str]:
    """Per column of table ``a``: "equal" (same bits), or (max |a-b|, max |a-b|/|a|, how many values are
    outside |a-b| <= atol + rtol·|a|) over the float values, or a string saying why the column cannot be
    compared."""
    out: dict[str, tuple[float, float] | str] = {}
    for name in a.column_names:
        if name not in b.column_names:
            out[name] = "missing on cuda"
            continue
        if a.column(name).equals(b.column(name)):
            out[name] = "equal"
            continue
        x, y = _float_values(a.column(name)), _float_values(b.column(name))
        if x is None or y is None or x.shape != y.shape:
            out[name] = "differs (not a float column of the same layout)"
            continue
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        if (nan_x != nan_y).any():
            out[name] = f"NaN at {int((nan_x != nan_y).sum())} positions on one device only"
            continue
        ok = ~nan_x
        d = np.abs(x[ok] - y[ok])
        rel = d / np.maximum(np.abs(x[ok]), np.finfo(np.float64).tiny)
        rtol, atol = tol
        out[name] = (float(d.max(initial=0.0)), float(rel[d > 0].max(initial=0.0)),
                     int((d > atol + rtol * np.abs(x[ok])).sum()))
    return out


def against_expected(case_dir: str, meta: dict, out_path: str) -> str:
    """The CUDA output against the case's expected values (the framework's own), at the case's tolerance."""
    expected, got, inp = (_read(os.path.join(case_dir, "expected.parquet")), _read(out_path),
                          _read(os.path.join(case_dir, "input.parquet")))
    mask = _float_values(inp.column("response_mask"), floats_only=False)
    worst = 0.0
    for name in meta["compare"]:
        e, g = _float_values(expected.column(name)), _float_values(got.column(name))
        keep = mask > 0 if meta.get("positions") == "mask" and e.shape == mask.shape else np.ones(e.shape, bool)
        e, g = e[keep], g[keep]
        bad = ~((np.abs(g - e) <= meta["atol"] + meta["rtol"] * np.abs(e)) | (np.isnan(e) & np.isnan(g)))
        if bad.any():
            return f"{name}: {int(bad.sum())} values outside rtol {meta['rtol']} atol {meta['atol']}"
        worst = max(worst, float(np.nanmax(np.abs(g - e), initial=0.0)))
    return f"matches the framework (worst |diff| {worst:.2g})"


def synthetic_dump(path: str) -> None:
    import pyarrow.parquet as pq

    from advcli.sample import make_table

    pq.write_table(make_table(512, 8, 1, 400, seed=11, steps=3), path)


def estimator_configs() -> list[tuple[str, list[str]]]:
    import advcli.estimators as est

    out = []
    for name in est.all_specs():
        base = ["--flavor", "advcli", "--set", f"estimator.name={name}"]
        out.append((name, base))
        out.append((f"{name}+k3", base + ["--set", "kl.in_reward=true", "--set", "kl.estimator=k3"]))
    return out


def compare_one(label: str, src: str, args: list[str], tmp: str, tol: tuple[float, float], report: list,
                case: tuple[str, dict] | None = None, devices: tuple[str, str] = ("cpu", "cuda")) -> bool:
    outs = {}
    for dev in devices:
        out = os.path.join(tmp, f"{len(report)}-{dev}.parquet")
        outs[dev] = (out, *run_cli(["run", src, "--output", out, *args, "--device", dev, "--quiet", "--force"]))
    (co, ccode, cmsg), (go, gcode, gmsg) = outs[devices[0]], outs[devices[-1]]
    entry = {"label": label, "args": args}
    if ccode or gcode:
        same = ccode == gcode and cmsg == gmsg
        entry.update(status="refused on both" if same else "FAIL", cpu=[ccode, cmsg], cuda=[gcode, gmsg])
        report.append(entry)
        print(f"{'ok  ' if same else 'FAIL'} {label}: exit {ccode} on cpu ({cmsg[:80]}), {gcode} on cuda"
              + ("" if same else f" ({gmsg[:80]})"), flush=True)
        return same
    if case is not None:  # the case's own tolerance
        tol = (case[1]["rtol"], case[1]["atol"])
    diffs = column_differences(_read(co), _read(go), tol)
    failed = [name for name, d in diffs.items() if (d != "equal" if isinstance(d, str) else d[2] > 0)]
    notes = ", ".join(f"{n} {d[0]:.1e}/{d[1]:.1e}" for n, d in diffs.items() if isinstance(d, tuple))
    exact = all(d == "equal" for d in diffs.values())
    line = "every column equal (bits)" if exact else f"differ (max abs/rel): {notes}"
    if case is not None:
        line += f"; {devices[-1]} " + against_expected(case[0], case[1], go)
        if "outside" in line:
            failed.append("expected")
    entry.update(status="FAIL" if failed else ("equal" if exact else "close"), columns={
        n: d if isinstance(d, str) else {"max_abs": d[0], "max_rel": d[1], "outside": d[2]}
        for n, d in diffs.items()})
    report.append(entry)
    print(f"{'FAIL' if failed else 'ok  '} {label}: {line}", flush=True)
    return not failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="?", help="a folder of cross-check case folders")
    ap.add_argument("--sample", help="the sample dump (sample_data/rollouts.parquet) for the trainers' defaults")
    ap.add_argument("--no-estimators", action="store_true", help="skip the every-estimator sweep")
    ap.add_argument("--rtol", type=float, default=1e-4, help="outside the cases (the cases' usual tolerance)")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--json", help="write every comparison here")
    ap.add_argument("--devices", default="cpu,cuda", help="the two devices compared (cpu,cpu: a dry run)")
    args = ap.parse_args()
    os.environ.setdefault("ADVCLI_SERVER", "off")
    import torch

    devices = tuple(args.devices.split(","))
    if "cuda" in devices and not torch.cuda.is_available():
        print("no CUDA device here: nothing to compare")
        return 1
    tol, report, ok = (args.rtol, args.atol), [], True
    with tempfile.TemporaryDirectory(prefix="device_parity_") as tmp:
        if args.cases:
            root = os.path.abspath(args.cases)
            for case in sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "case.json"))):
                folder = os.path.join(root, case)
                meta = json.load(open(os.path.join(folder, "case.json"), encoding="utf-8"))
                ok &= compare_one(f"case {case}{' (hazard)' if meta.get('hazard') else ''}",
                                  os.path.join(folder, "input.parquet"), meta["args"], tmp, tol, report,
                                  case=(folder, meta), devices=devices)
        if args.sample:
            for cfg in SAMPLE_CONFIGS:
                ok &= compare_one("sample " + " ".join(cfg), args.sample, cfg, tmp, tol, report, devices=devices)
        if not args.no_estimators:
            src = os.path.join(tmp, "synthetic.parquet")
            synthetic_dump(src)
            for label, cfg in estimator_configs():
                ok &= compare_one(f"estimator {label}", src, cfg, tmp, tol, report, devices=devices)
    counts = {s: sum(e["status"] == s for e in report) for s in ("equal", "close", "refused on both", "FAIL")}
    card = torch.cuda.get_device_name(0) if "cuda" in devices else "no GPU"
    print(f"device parity {'/'.join(devices)} ({card}): {len(report)} runs: "
          + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
