"""Kernel launches per chunk: the torch path against the fused Triton kernels (advcli.ops.fused), counted
on the CPU, no GPU needed.

    python benchmarks/kernels.py [--rows 48] [--estimators gae+k3 grpo]

For each estimator one chunk's math (``pipeline.chunk_math``: token rewards, the estimator, whitening,
re-masking, clip) runs twice under torch.profiler:

- the torch path (``ADVCLI_KERNELS=off``): every leaf aten operation that would launch a device kernel
  (views, ``empty`` and other metadata-only operations left out) counts as one launch; ``.item()``-like
  reads (``aten::_local_scalar_dense``) count as host waits, which a GPU makes the host sit through;
- the fused path (``ADVCLI_KERNELS=interpret``, Triton's interpreter on the CPU): the launches
  ``advcli.ops.fused.LAUNCHES`` counts, plus the leaf aten operations left outside the kernels (the
  interpreter's own work inside a launch is left out).

A row-level estimator's chunk only broadcasts its row advantages; its group statistics (verl GRPO:
the group mean and the two-pass std, :class:`advcli.ops.groups.GroupIndex`) run once per run on the
row table, counted on their own line. The counts are what a CUDA device would be asked to launch; the
times it takes are not measured here (``benchmarks/compute.py --device cuda`` on a GPU).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile

# the interpreter's switch is read when triton is first imported: before anything imports it
os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("ADVCLI_KERNELS", "off")

import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from advcli import pipeline  # noqa: E402
from advcli.flavors import resolve  # noqa: E402
from advcli.io.reader import InputSet  # noqa: E402
from advcli.ops import fused  # noqa: E402
from advcli.ops.groups import GroupIndex  # noqa: E402
from advcli.ops.ragged import Ragged  # noqa: E402
from advcli.sample import make_table  # noqa: E402

ESTIMATORS = {
    "gae+k3": [("algorithm.adv_estimator", "gae"), ("algorithm.use_kl_in_reward", True),
               ("algorithm.kl_penalty", "low_var_kl")],
    "gae": [("algorithm.adv_estimator", "gae")],
    "reinforce_plus_plus+k2": [("algorithm.adv_estimator", "reinforce_plus_plus"), ("algorithm.gamma", 0.99),
                               ("algorithm.use_kl_in_reward", True), ("algorithm.kl_penalty", "mse")],
    "remax": [("algorithm.adv_estimator", "remax")],
    "grpo": [("algorithm.adv_estimator", "grpo")],
}
# aten operations that only make a tensor's metadata or storage: no kernel on a device
NO_LAUNCH = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::view", "aten::_unsafe_view",
             "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::slice", "aten::select",
             "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::t", "aten::transpose", "aten::permute",
             "aten::detach", "aten::alias", "aten::lift_fresh", "aten::resize_", "aten::set_", "aten::numpy_T",
             "aten::result_type", "aten::contiguous", "aten::split", "aten::unbind", "aten::narrow",
             "aten::pin_memory", "aten::is_pinned", "aten::_local_scalar_dense", "aten::item",
             "aten::to"}  # (aten::to without children: already of that dtype and device, nothing copied)
WAITS = {"aten::_local_scalar_dense"}
FUSED_RANGE = "advcli.fused launch"


@contextlib.contextmanager
def _marked_turn(real):
    with real(), record_function(FUSED_RANGE):
        yield


def count(fn) -> tuple[int, int, dict]:
    """(device launches, host waits, fused launches by kernel) of one call of ``fn``."""
    before = dict(fused.LAUNCHES)
    real = fused._turn
    fused._turn = lambda: _marked_turn(real)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    finally:
        fused._turn = real
    launches = waits = 0
    for e in prof.events():
        inside, p = False, e.cpu_parent
        while p is not None:
            inside |= p.name == FUSED_RANGE
            p = p.cpu_parent
        if inside or e.name == FUSED_RANGE or not e.name.startswith("aten::"):
            continue
        if e.name in WAITS:
            waits += 1
        if e.cpu_children or e.name in NO_LAUNCH:
            continue  # a composite op: its children count
        launches += 1
    by_kernel = {k: v - before.get(k, 0) for k, v in fused.LAUNCHES.items() if v - before.get(k, 0)}
    return launches + sum(by_kernel.values()), waits, by_kernel


def _with_kernels(setting: str, fn):
    saved = os.environ.get("ADVCLI_KERNELS")
    os.environ["ADVCLI_KERNELS"] = setting
    try:
        return count(fn)
    finally:
        os.environ["ADVCLI_KERNELS"] = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32, help="rows of the chunk (the interpreter is slow: keep it small)")
    ap.add_argument("--estimators", nargs="*", choices=list(ESTIMATORS), default=list(ESTIMATORS))
    args = ap.parse_args()
    if not fused.triton_available():
        sys.exit("triton is not installed (pip install 'advcli[gpu]'): the fused path cannot be counted")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "dump.parquet")
        pq.write_table(make_table(args.rows, 4, 16, 256, seed=0), src)
        inputs = InputSet.open([src])
        print(f"one chunk of {args.rows} rows; launches a CUDA device would run (torch path: leaf aten ops)")
        print("| estimator | torch path: launches | host waits | fused path: launches | host waits | kernels |")
        print("|---|---|---|---|---|---|")
        for name in args.estimators:
            cfg, _ = resolve("verl", ESTIMATORS[name])
            plan = pipeline.make_plan(cfg, inputs, {}, "cpu")
            res, *_ = pipeline.prepare_run(plan, inputs, args.rows)
            reader = pipeline.ChunkReader(plan, inputs, res.state)
            cols = list(pipeline.roles_to_columns(plan, plan.token_roles))
            _fi, rb, batch = next(iter(inputs.iter_batches(cols, args.rows)))
            offsets, tok = reader.tokens(batch, src, rb, plan.token_roles)

            def chunk(plan=plan, res=res, offsets=offsets, tok=tok):
                pipeline.chunk_math(plan, res, Ragged(torch.from_numpy(offsets)), dict(tok), 0, apply_whiten=True)

            _with_kernels("interpret", chunk)  # warm-up: caches, and the kernels' first (interpreted) call
            t_l, t_w, _ = _with_kernels("off", chunk)
            f_l, f_w, by = _with_kernels("interpret", chunk)
            print(f"| {name} | {t_l} | {t_w} | {f_l} | {f_w} | {', '.join(f'{k} {v}' for k, v in by.items())} |",
                  flush=True)
        g = torch.Generator().manual_seed(0)
        x = torch.rand(args.rows * 64, generator=g)
        codes = torch.arange(x.numel()) // 8
        gi = GroupIndex.from_codes(codes)

        def stats(gi=gi, x=x):
            gi.std_two_pass(x, gi.mean_f32(x))

        _with_kernels("interpret", stats)  # warm-up: the index's sort order, made once per index
        t_l, t_w, _ = _with_kernels("off", stats)
        f_l, f_w, by = _with_kernels("interpret", stats)
        print(f"| group statistics (GRPO mean + two-pass std, {x.numel()} rows in groups of 8) | {t_l} | {t_w} | "
              f"{f_l} | {f_w} | {', '.join(f'{k} {v}' for k, v in by.items())} |")


if __name__ == "__main__":
    main()
