"""The Ray engine's statistics merge without Ray: chunks' partial statistics made as a worker makes
them (a fresh :class:`PartialMaker` from the run's settings, other chunk sizes, histogram edges fixed
before the pass), arriving out of order at :class:`advcli.engines.ray_stats.StatsSink`, give the local
engine's report; and what a chunk sends does not grow with its tokens."""
from __future__ import annotations

import json
import pickle
import random

import pyarrow.parquet as pq
import pytest
import torch

from advcli.engines.ray_stats import StatsSink
from advcli.figures import collector
from advcli.figures.histograms import seed_edges
from advcli.flavors import resolve
from advcli.pipeline import run_pipeline
from advcli.pipeline.observe import PartialMaker, RunObserver
from advcli.sample import make_table


def _report(r) -> dict:
    return json.loads(json.dumps({"metrics": r.metrics, "per_step": r.per_step, "histograms": r.histograms,
                                  "group_health": r.group_health, "diagnostics": r.diagnostics,
                                  "by_position": r.by_position}, default=str))


def _merged_run(path, out, flavor, settings, chunk_rows, monkeypatch):
    """The local engine's run whose observer is fed as the Ray engine feeds it: each chunk's partials made
    by a worker's maker, merged by StatsSink in a shuffled arrival order."""
    chunks = []
    real_finish = RunObserver.finish

    def add(self, row0, layout, mask, adv, ret, tlr, tok, seen=None):
        chunks.append((row0, layout, mask.clone(), adv.clone(), ret.clone(), tlr.clone(),
                       {k: v.clone() for k, v in tok.items() if isinstance(v, torch.Tensor)}, seen))

    def finish(self, result):
        edges = None
        if not self.row_path:  # as the seed pass: the first seed_tokens finite valid advantages, in row order
            first = torch.cat([c[3][c[2] > 0].to(torch.float64) for c in chunks])
            first = first[torch.isfinite(first)][:self.figures.adv_hist.seed_tokens]
            edges = seed_edges(first, self.figures.bins)
            self.figures.adv_hist.fix_edges(edges)
        maker = PartialMaker(self.plan, self.partial_settings(), self.figures.valid_len.copy(), edges=edges)
        # seen: what the local engine's statistics pass found in the token columns (a worker has them)
        sent = [(row0, layout.num_rows, pickle.loads(pickle.dumps(maker.partials(row0, layout, m, a, r, t, tok,
                                                                                 seen=seen))))
                for row0, layout, m, a, r, t, tok, seen in chunks]
        random.Random(5).shuffle(sent)
        sink = StatsSink(self, self.figures.R)
        for row0, n, p in sent:
            sink.add(row0, n, p)
        assert sink.seen() == (len(chunks), self.figures.R)
        real_finish(self, result)

    monkeypatch.setattr(RunObserver, "add", add)
    monkeypatch.setattr(RunObserver, "finish", finish)
    cfg, native = resolve(flavor, settings)
    r = run_pipeline([path], out, cfg, flavor=flavor, native=native, chunk_rows=chunk_rows, device="cpu",
                     by_position=True)
    monkeypatch.undo()
    return r


@pytest.mark.parametrize("flavor,settings", [
    ("verl", [("algorithm.adv_estimator", "grpo")]),  # row path: row values checked against the last tokens
    ("verl", [("algorithm.adv_estimator", "gae")]),  # token path: sample, histogram counts, position sums
    ("advcli", [("estimator.name", "grpo"), ("reward.normalize.mean", "group"),  # NaN advantages: diagnostics
                ("reward.normalize.std", "group")]),
])
def test_merged_partials_give_the_local_report(tmp_path, monkeypatch, flavor, settings):
    p = str(tmp_path / "d.parquet")
    pq.write_table(make_table(600, 5, 2, 30, 3, steps=2), p)
    real = collector.FigureCollector.__init__

    def small(self, num_rows, **kw):  # a sample and a histogram seed far smaller than the run
        real(self, num_rows, **{**kw, "reservoir": 200})

    monkeypatch.setattr(collector.FigureCollector, "__init__", small)
    cfg, native = resolve(flavor, settings)
    local = run_pipeline([p], str(tmp_path / "local.parquet"), cfg, flavor=flavor, native=native, chunk_rows=64,
                         device="cpu", by_position=True)
    merged = _merged_run(p, str(tmp_path / "merged.parquet"), flavor, settings, 23, monkeypatch)
    want, got = _report(local), _report(merged)
    assert want["histograms"]["advantages"]["counts"] and want["by_position"]
    for key in want:
        if key == "by_position":  # position sums are added chunk by chunk (any engine): chunking moves an ulp
            for k, v in want[key].items():
                assert got[key][k] == (pytest.approx(v, rel=1e-12) if isinstance(v, list) else v), k
        else:
            assert got[key] == want[key], key


def test_partials_do_not_grow_with_the_response_length(tmp_path):
    """What a worker sends for a chunk of GAE advantages: the same size for 8-token and 400-token rows
    (the sample's values aside, which are bounded by the run, not the chunk)."""
    sizes = {}
    for max_len in (8, 400):
        p = str(tmp_path / f"d{max_len}.parquet")
        pq.write_table(make_table(64, 4, max_len, max_len, 1), p)
        cfg, native = resolve("verl", [("algorithm.adv_estimator", "gae")])
        got = []
        real_add = RunObserver.add

        def add(self, row0, layout, mask, adv, ret, tlr, tok, seen=None, got=got, real_add=real_add):
            maker = PartialMaker(self.plan, {**self.partial_settings(), "figures": {
                **self.partial_settings()["figures"], "reservoir": 1}}, self.figures.valid_len,
                edges=seed_edges(torch.tensor([-1.0, 1.0], dtype=torch.float64)))
            part = maker.partials(row0, layout, mask, adv, ret, tlr, tok, seen=seen)
            got.append(len(pickle.dumps(part, protocol=5)))
            return real_add(self, row0, layout, mask, adv, ret, tlr, tok, seen)

        RunObserver.add = add
        try:
            run_pipeline([p], str(tmp_path / f"o{max_len}.parquet"), cfg, flavor="verl", native=native,
                         chunk_rows=64, device="cpu")
        finally:
            RunObserver.add = real_add
        sizes[max_len] = got[0]
    assert sizes[400] <= sizes[8] + 64  # per row, not per token: 50x the tokens, same bytes
    assert sizes[400] < 400 * 64  # under one byte per token
