"""The Ray engine's run statistics, merged rather than funnelled: every worker makes its chunks'
partial statistics (:class:`advcli.pipeline.observe.PartialMaker`: a few numbers per row, the
advantage sample's values in the chunk, histogram counts, diagnostics' counters, by-position sums)
and sends only those to one small actor (:class:`StatsSink`), which merges them in row order into
the local engine's :class:`advcli.pipeline.observe.RunObserver`, so every figure is the local
engine's. The advantage histogram's edges are fixed from the run's first finite valid tokens
before the write pass (:func:`histogram_edges`), so that every worker counts its tokens itself.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import torch

from ..pipeline import RunResult
from .ray_shards import Shard


class StatsSink:
    """The local engine's run statistics and diagnostics (:class:`advcli.pipeline.observe.RunObserver`,
    the same object, built on the driver, or here from the per-step driver's pieces) in a small Ray
    actor: every worker sends it its chunks' :class:`advcli.pipeline.observe.ChunkPartials`, which it
    merges in global row order (holding those that come early)."""

    def __init__(self, observer, num_rows: int):
        # ``observer``: the RunObserver, or a function that builds it here (the per-step driver's pieces,
        # advcli.engines.ray_steps.observer_of_steps). One that arrives through Ray's object store has its
        # numpy arrays read-only: the figures add into them in place, so the read-only ones are copied
        # here (FigureCollector.make_writable)
        if callable(observer):
            observer = observer()
        self.obs, self.R = observer, num_rows
        observer.figures.make_writable()
        self.next = 0
        self.received = 0  # chunks received, duplicates included: the driver's NodeWatch reads it as progress
        self.waiting: dict[int, tuple] = {}

    def stats_settings(self) -> dict:
        """What the workers' :class:`advcli.pipeline.observe.PartialMaker` needs (the write pass's ``stats``)."""
        return {"settings": self.obs.partial_settings(), "edges": None,
                "seed_tokens": self.obs.figures.adv_hist.seed_tokens, "bins": self.obs.figures.bins,
                # the run's grouping warnings, where the observer grouped the whole run itself (per-step driver)
                "group_warnings": list(self.obs.res.state.group_warnings)}

    def fix_edges(self, edges) -> None:
        """The advantage histogram's edges, fixed by the seed pass (:func:`histogram_edges`) before the
        workers count."""
        self.obs.figures.adv_hist.fix_edges(edges)

    def seen(self) -> tuple[int, int]:
        """(chunks received, rows merged in order)."""
        return self.received, self.next

    def add(self, row0: int, num_rows: int, partials) -> bool:
        self.received += 1
        if row0 < self.next:  # a batch Ray ran again (a worker or node was lost): the same values, merged already
            return True
        self.waiting[row0] = (num_rows, partials)
        while self.next in self.waiting:
            n, p = self.waiting.pop(self.next)
            self.obs.add_partials(self.next, p)
            self.next += n
        return True

    def finish(self) -> dict:
        if self.next != self.R or self.waiting:
            raise RuntimeError(f"internal: the statistics received rows 0..{self.next - 1} of {self.R} in order "
                               f"({len(self.waiting)} chunks left waiting); please report this")
        result = RunResult(inputs=[], outputs=[], rows=self.R, tokens=0, valid_tokens=0, seconds=0.0, config={})
        self.obs.finish(result)
        return {"metrics": result.metrics, "per_step": result.per_step, "histograms": result.histograms,
                "group_health": result.group_health, "diagnostics": result.diagnostics,
                "warnings": result.warnings, "by_position": result.by_position}


def seed_values(first: int, vfirst: int, seed_tokens: int, mask, adv) -> pa.Table:
    """One batch's finite valid advantages (float64, in order) when its first row (global row ``first``,
    whose first valid token is the run's ``vfirst``-th) starts before the run's ``seed_tokens``-th valid
    token (else none): the seed pass's result for :func:`histogram_edges`."""
    x = []
    if vfirst < seed_tokens:
        m = mask.detach().to("cpu") > 0
        v = adv.detach().to("cpu")[m].to(torch.float64)
        x = v[torch.isfinite(v)].tolist()
    return pa.table({"first_row": [first], "values": pa.array([x], type=pa.list_(pa.float64()))})


def shard_valid_of(shards: list[Shard], valid_len) -> list[int]:
    """Σ mask of each shard's rows, from the per-row ``valid_len`` [R] (global rows)."""
    from ..figures.arrays import to_numpy

    vstart = np.concatenate([[0], np.cumsum(to_numpy(valid_len, np.int64))])
    return [int(vstart[s.first + s.stop - s.start] - vstart[s.first]) for s in shards]


def histogram_edges(cl, map_seed, shard_valid: list[int], seed_tokens: int, bins: int,
                    tick=None) -> np.ndarray | None:
    """The edges :class:`advcli.figures.StreamHistogram` fixes from the run's first ``seed_tokens``
    finite valid advantages, computed before the write pass by running it on the first shards only
    (``map_seed(cluster)``: the seed pass over ``cluster.shards``, yielding :func:`seed_values` tables;
    ``shard_valid``: each of ``cl.shards``' Σ mask, so that no per-row table is needed), so that the
    workers count every token against them. None when the run has at most ``seed_tokens`` valid
    tokens: the chunks then send their finite advantages, at most ``seed_tokens`` in all.
    ``tick()``: told after each batch received (progress for the node watch)."""
    from ..figures.histograms import seed_edges

    starts = np.concatenate([[0], np.cumsum(np.asarray(shard_valid, dtype=np.int64))])
    total = int(starts[-1])
    if total <= seed_tokens:
        return None
    n = len(cl.shards)
    want = seed_tokens
    while True:
        # shards [0, k) hold at least `want` valid tokens (every shard once every token is wanted)
        k = n if want >= total else min(int(np.searchsorted(starts, want)), n)
        parts = []
        for b in map_seed(dataclasses.replace(cl, shards=cl.shards[:k])).iter_batches(batch_format="pyarrow",
                                                                                     batch_size=None):
            parts += b.to_pylist()
            if tick is not None:
                tick()
        parts.sort(key=lambda p: p["first_row"])
        x = np.array([v for p in parts for v in p["values"]], dtype=np.float64)
        if x.size >= seed_tokens or k >= n:  # non-finite or rejected tokens among the first: read further
            return seed_edges(x[:seed_tokens], bins) if x.size else None
        want = min(total, 2 * want)
