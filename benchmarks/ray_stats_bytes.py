"""Bytes per row that ``advcli run --engine ray`` ships to its statistics actor, before and after the
workers made their own partial statistics (issue 31, "statistics merged, not funnelled").

    python benchmarks/ray_stats_bytes.py                      # verl GRPO and GAE, 4096 rows ≤ 512 tokens
    python benchmarks/ray_stats_bytes.py --rows 8192 --max-len 1024 --chunk-rows 1024

No Ray needed: the local engine runs the dump (``advcli.sample.make_table``) and, for every chunk
it feeds its run statistics, this script pickles (protocol 5, as Ray serialises a task's arguments)

- **before**: what a worker sent per chunk until now: ``(row0, offsets, mask, adv, ret, tlr, token
  columns)``, every token of the chunk;
- **after**: what it sends now: ``(row0, rows, ChunkPartials)`` made by a worker's
  :class:`advcli.pipeline.observe.PartialMaker` (the histogram's edges fixed, as the engine fixes them
  when the run has more than 65,536 valid tokens).

Prints bytes per row and per token for each; the ratio grows with the response length (before is
per token, after per row). Sizes only, no timing.
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def measure(path: str, flavor: str, settings: list, chunk_rows: int) -> dict:
    import torch

    from advcli.figures.histograms import seed_edges
    from advcli.flavors import resolve
    from advcli.pipeline import run_pipeline
    from advcli.pipeline.observe import PartialMaker, RunObserver

    sizes = {"before": 0, "after": 0, "rows": 0, "tokens": 0}
    real_add = RunObserver.add

    def add(self, row0, layout, mask, adv, ret, tlr, tok, seen=None):
        if not hasattr(self, "_bench_maker"):  # a worker's maker: no collector of the run, edges fixed
            self._bench_maker = PartialMaker(self.plan, self.partial_settings(), self.figures.valid_len,
                                             edges=seed_edges(torch.tensor([-1.0, 1.0], dtype=torch.float64)))
        toks = {k: v for k, v in tok.items() if isinstance(v, torch.Tensor)}
        before = (row0, layout.offsets.numpy(), mask, adv, ret, tlr, toks)
        after = (row0, layout.num_rows, self._bench_maker.partials(row0, layout, mask, adv, ret, tlr, tok))
        sizes["before"] += len(pickle.dumps(before, protocol=5))
        sizes["after"] += len(pickle.dumps(after, protocol=5))
        sizes["rows"] += layout.num_rows
        sizes["tokens"] += int(layout.offsets[-1])
        return real_add(self, row0, layout, mask, adv, ret, tlr, tok, seen)

    RunObserver.add = add
    try:
        cfg, native = resolve(flavor, settings)
        with tempfile.TemporaryDirectory() as d:
            run_pipeline([path], os.path.join(d, "out.parquet"), cfg, flavor=flavor, native=native,
                         chunk_rows=chunk_rows, device="cpu")
    finally:
        RunObserver.add = real_add
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--chunk-rows", type=int, default=512)
    a = ap.parse_args()
    import pyarrow.parquet as pq

    from advcli.sample import make_table

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "dump.parquet")
        pq.write_table(make_table(a.rows, 8, 16, a.max_len, 0, steps=2), path)
        print(f"{a.rows} rows, responses 16..{a.max_len} tokens, chunks of {a.chunk_rows} rows")
        print(f"{'run':<10} {'tokens/row':>10} {'before B/row':>13} {'after B/row':>12} {'before B/tok':>13} "
              f"{'after B/tok':>12} {'ratio':>7}")
        for name, flavor, settings in (("verl grpo", "verl", [("algorithm.adv_estimator", "grpo")]),
                                       ("verl gae", "verl", [("algorithm.adv_estimator", "gae")])):
            s = measure(path, flavor, settings, a.chunk_rows)
            R, T = s["rows"], s["tokens"]
            print(f"{name:<10} {T / R:>10.1f} {s['before'] / R:>13.1f} {s['after'] / R:>12.1f} "
                  f"{s['before'] / T:>13.2f} {s['after'] / T:>12.3f} {s['before'] / s['after']:>6.0f}x")


if __name__ == "__main__":
    main()
