"""Streaming: the output and the run's figures do not depend on how the input is cut into chunks
(rows per chunk 1, 7, 257 or everything; the token bound), on the reader's prefetching, on whether
the statistics pass keeps its results for the write pass, or on whether the per-row KL is read in
pass 1 or computed in the write pass."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli import pipeline
from advcli.errors import AdvcliError
from advcli.flavors import resolve
from advcli.io import reader as reader_mod
from advcli.io.reader import InputSet, prefetched
from advcli.sample import make_table

NEW = ["advantages", "returns", "token_level_rewards"]
CONFIGS = {
    # token estimator + fixed KL: per-row KL deferred to the write pass; whitening: cached chunks
    "gae_k3": {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
               "algorithm.kl_penalty": "low_var_kl", "algorithm.gamma": 0.99, "algorithm.lam": 0.95},
    # adaptive controller over steps: the KL must be known in pass 1
    "gae_adaptive": {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
                     "algorithm.kl_ctrl.type": "adaptive", "algorithm.kl_ctrl.kl_coef": 0.1},
    "grpo_kl": {"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True},
    "rloo": {"algorithm.adv_estimator": "rloo"},
    "reinforce_plus_plus": {"algorithm.adv_estimator": "reinforce_plus_plus"},
}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("stream") / "in.parquet"
    # 3 steps, groups of 5 scattered inside each step, lengths 1..48, masked spans and tails
    pq.write_table(make_table(300, group_size=5, min_len=1, max_len=48, seed=3, steps=3), p, row_group_size=64)
    return str(p)


def run(src, out, settings, output_mode="full", **kw):
    cfg, native = resolve("verl", list(settings.items()))
    return pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                                 output_mode=output_mode, **kw)


def new_columns(path):
    t = pq.read_table(path)
    return {c: t.column(c).to_pylist() for c in NEW if c in t.column_names}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_output_and_figures_for_any_chunking(name, dump, tmp_path):
    ref = run(dump, tmp_path / "ref.parquet", CONFIGS[name], chunk_rows=None, chunk_tokens=None)
    want = new_columns(tmp_path / "ref.parquet")
    assert want["advantages"] and len(want["advantages"]) == 300
    for i, (rows, tokens) in enumerate([(1, None), (7, None), (257, None), (4096, 200), (None, 1000)]):
        got = run(dump, tmp_path / f"o{i}.parquet", CONFIGS[name], chunk_rows=rows, chunk_tokens=tokens)
        assert new_columns(tmp_path / f"o{i}.parquet") == want, (rows, tokens)
        for k in ("actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff", "critic/advantages/mean",
                  "critic/rewards/mean", "critic/score/mean"):
            if ref.metrics.get(k) is None:
                assert got.metrics.get(k) is None, k
            else:
                assert got.metrics[k] == pytest.approx(ref.metrics[k], rel=1e-12, abs=1e-15), k
        assert [s.get("kl") for s in got.per_step] == [s.get("kl") for s in ref.per_step]


def test_deferred_row_kl_equals_pass_one_kl(dump, tmp_path, monkeypatch):
    """GAE with a fixed β computes the per-row KL in the write pass; forcing it into pass 1 (as an
    adaptive controller needs) gives the same file and the same KL figures."""
    settings = CONFIGS["gae_k3"]
    plan_defers = run(dump, tmp_path / "a.parquet", settings, chunk_rows=31)
    monkeypatch.setattr(pipeline.prepare, "defer_row_kl", lambda plan: False)
    in_pass1 = run(dump, tmp_path / "b.parquet", settings, chunk_rows=31)
    assert new_columns(tmp_path / "a.parquet") == new_columns(tmp_path / "b.parquet")
    assert plan_defers.metrics["actor/reward_kl_penalty"] == in_pass1.metrics["actor/reward_kl_penalty"]
    assert plan_defers.metrics["actor/reward_kl_penalty"] > 0
    assert [s["kl"] for s in plan_defers.per_step] == [s["kl"] for s in in_pass1.per_step]
    assert plan_defers.metrics["critic/rewards/mean"] == in_pass1.metrics["critic/rewards/mean"]


def test_defer_only_where_nothing_needs_the_kl_before_the_write_pass():
    import tempfile

    from advcli.pipeline import make_plan
    from advcli.pipeline.rows import defer_row_kl

    with tempfile.TemporaryDirectory() as d:
        p = f"{d}/x.parquet"
        pq.write_table(make_table(20, group_size=4, min_len=2, max_len=8, seed=0), p)
        inputs = InputSet.open([p])
        for name, want in (("gae_k3", True), ("gae_adaptive", False), ("grpo_kl", False)):
            cfg, _ = resolve("verl", list(CONFIGS[name].items()))
            assert defer_row_kl(make_plan(cfg, inputs, {}, "cpu")) is want, name


def test_token_cache_and_recompute_agree(dump, tmp_path, monkeypatch):
    """Whitened GAE: the write pass reuses the statistics pass's chunks when they fit the cache
    budget, and computes them again otherwise (no room for a temporary file either); same bytes of
    output values."""
    settings = CONFIGS["gae_k3"]
    run(dump, tmp_path / "cached.parquet", settings, chunk_rows=50)
    monkeypatch.setattr(pipeline.moments, "TOKEN_CACHE_BYTES", 0)
    monkeypatch.setattr(pipeline.spill, "SPILL_MARGIN", 1 << 62)
    run(dump, tmp_path / "recomputed.parquet", settings, chunk_rows=50)
    assert new_columns(tmp_path / "cached.parquet") == new_columns(tmp_path / "recomputed.parquet")


@pytest.mark.parametrize("output_mode", ["full", "sidecar"])
def test_cached_write_pass_decodes_no_token_column(dump, tmp_path, monkeypatch, output_mode):
    """When the statistics pass cached every chunk, the write pass reads no token column (the run
    statistics and diagnostics take what the statistics pass saw in them), and its output and every
    figure of its report are those of the run that decodes the inputs again. The KL clamps of
    low_var_kl (|ref − logp| > 20) are hit on purpose so that the diagnostics have findings."""
    settings = {**CONFIGS["gae_k3"], "algorithm.kl_penalty": "low_var_kl"}
    t = pq.read_table(dump)
    ref = t.column("ref_log_probs").to_pylist()
    for i in range(0, len(ref), 37):  # a far-off reference log-prob on some token of every 37th row
        if ref[i]:
            ref[i][len(ref[i]) // 2] = -60.0
    t = t.set_column(t.schema.get_field_index("ref_log_probs"), "ref_log_probs",
                     pa.array(ref, t.schema.field("ref_log_probs").type))
    src = tmp_path / "in.parquet"
    pq.write_table(t, src, row_group_size=64)
    token_cols = {"response_mask", "old_log_probs", "ref_log_probs", "values"}
    reads: list[list[str]] = []
    iter_batches = InputSet.iter_batches

    def recording(self, columns, batch_rows, prefetch=None):
        reads.append(list(columns))
        return iter_batches(self, columns, batch_rows, prefetch)

    monkeypatch.setattr(InputSet, "iter_batches", recording)
    cached = run(src, tmp_path / "cached.parquet", settings, output_mode, chunk_rows=50)
    assert token_cols & set(reads[-2]) and not token_cols & set(reads[-1])  # statistics pass, write pass
    monkeypatch.setattr(pipeline.moments, "TOKEN_CACHE_BYTES", 0)
    monkeypatch.setattr(pipeline.spill, "SPILL_MARGIN", 1 << 62)  # nor a temporary file: recompute
    reads.clear()
    decoded = run(src, tmp_path / "decoded.parquet", settings, output_mode, chunk_rows=50)
    assert token_cols <= set(reads[-1])
    assert pq.read_table(tmp_path / "cached.parquet").equals(pq.read_table(tmp_path / "decoded.parquet"))
    for field in ("metrics", "per_step", "histograms", "group_health", "diagnostics", "warnings"):
        assert getattr(cached, field) == getattr(decoded, field), field
    kl_in = [d for d in cached.diagnostics if d["kind"] == "kl_input_clamp"][0]
    assert kl_in["count"] > 0 and kl_in["examples"][0]["row"] == 0


def test_spilled_chunks_give_the_cached_result(dump, tmp_path, monkeypatch):
    """Beyond the memory budget the statistics pass's chunks go to a temporary file (pipeline.spill)
    and the write pass reads them back instead of decoding the inputs: same output and figures as
    the in-memory cache; with no room on the temporary filesystem the write pass recomputes."""
    from advcli.pipeline import spill as spill_mod

    settings = CONFIGS["gae_k3"]
    memory = run(dump, tmp_path / "memory.parquet", settings, chunk_rows=50)
    reads: list[list[str]] = []
    iter_batches = InputSet.iter_batches
    monkeypatch.setattr(InputSet, "iter_batches", lambda self, columns, batch_rows, prefetch=None: (
        reads.append(list(columns)), iter_batches(self, columns, batch_rows, prefetch))[1])
    opened: list = []
    real_open = spill_mod.open_spill
    monkeypatch.setattr(pipeline.moments, "open_spill", lambda need: opened.append(real_open(need)) or opened[-1])
    monkeypatch.setattr(pipeline.moments, "TOKEN_CACHE_BYTES", 0)
    spilled = run(dump, tmp_path / "spilled.parquet", settings, chunk_rows=50)
    assert opened and opened[0] is not None and opened[0].size > 0 and opened[0].fh.closed
    assert "response_mask" not in reads[-1]  # the write pass decoded no token column
    assert pq.read_table(tmp_path / "memory.parquet").equals(pq.read_table(tmp_path / "spilled.parquet"))
    for field in ("metrics", "per_step", "histograms", "group_health", "diagnostics", "warnings"):
        assert getattr(memory, field) == getattr(spilled, field), field
    monkeypatch.setattr(spill_mod, "SPILL_MARGIN", 1 << 62)  # no filesystem has that much room
    reads.clear()
    recomputed = run(dump, tmp_path / "recomputed.parquet", settings, chunk_rows=50)
    assert "response_mask" in reads[-1]
    assert pq.read_table(tmp_path / "memory.parquet").equals(pq.read_table(tmp_path / "recomputed.parquet"))
    assert memory.metrics == recomputed.metrics


def test_prefetch_on_and_off_agree(dump, tmp_path, monkeypatch):
    settings = CONFIGS["grpo_kl"]
    run(dump, tmp_path / "a.parquet", settings, chunk_rows=13)
    monkeypatch.setattr(reader_mod, "PREFETCH", 0)
    run(dump, tmp_path / "b.parquet", settings, chunk_rows=13)
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


def test_prefetch_keeps_order_and_reraises_in_the_consumer():
    def gen():
        yield from range(5)
        raise AdvcliError("broken file after row 5")

    got = []
    with pytest.raises(AdvcliError, match="after row 5"):
        for x in prefetched(gen(), 2):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    # a consumer that stops early stops the producer (no hang)
    it = prefetched(iter(range(1000)), 1)
    assert next(it) == 0
    it.close()


def test_chunk_rows_from_the_token_bound(tmp_path):
    """Rows per chunk = min(--chunk-rows, chunk_tokens / mean row length), the length from the
    Parquet metadata alone."""
    lengths = [10] * 50 + [30] * 50  # mean 20
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    n = int(offsets[-1])
    t = pa.table({"response_mask": pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(n, np.int8))),
                  "reward": pa.array(np.zeros(100, np.float32))})
    p = tmp_path / "t.parquet"
    pq.write_table(t, p, row_group_size=30)
    inputs = InputSet.open([str(p)])
    assert inputs.list_tokens("response_mask") == n == 2000
    cfg, _ = resolve("verl", [("algorithm.adv_estimator", "reinforce_plus_plus")])
    plan = pipeline.make_plan(cfg, inputs, {}, "cpu")
    assert pipeline.chunk_rows_for(plan, inputs, 4096, 1000) == 50
    assert pipeline.chunk_rows_for(plan, inputs, 7, 1000) == 7
    assert pipeline.chunk_rows_for(plan, inputs, None, None) == 100
    assert pipeline.chunk_rows_for(plan, inputs, 4096, 5) == 1


def test_an_error_on_the_writer_thread_is_one_message_and_leaves_nothing(tmp_path, monkeypatch):
    """The encoding thread's failure (a full disk, say) reaches the caller as AdvcliError naming the
    output; the temp file is removed and nothing appears at the target."""
    import pyarrow as pa

    from advcli.errors import AdvcliError
    from advcli.io import writer as writer_mod

    def full_disk(self, pieces):
        raise OSError("No space left on device")

    monkeypatch.setattr(writer_mod.AtomicParquetWriter, "_write_group", full_disk)
    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", 200)
    t = pa.table({"a": list(range(2000))})
    target = tmp_path / "o.parquet"
    w = writer_mod.AtomicParquetWriter(str(target), t.schema)
    with pytest.raises((AdvcliError, OSError)) as err:
        for b in t.to_batches(max_chunksize=100):
            w.write(b)
        w.commit()
    if not isinstance(err.value, AdvcliError):  # surfaced at a later write(): the caller aborts
        w.abort()
    else:
        assert str(target) in str(err.value) and "No space left" in str(err.value)
    assert not target.exists() and not os.path.exists(w.tmp)


def test_flush_behind_syncs_while_writing_and_leaves_no_descriptor(tmp_path, monkeypatch):
    """The writer hands each row group's bytes to the disk as it goes (fdatasync on a shared thread),
    so the commit's fsync has only the tail left; no descriptor stays open after commit or abort."""
    import time

    from advcli.io import writer as writer_mod

    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(writer_mod.os, "fdatasync", lambda fd: (synced.append(os.fstat(fd).st_size), real(fd)))
    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", 200)
    t = pa.table({"a": list(range(2000))})
    fds = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for finish in ("commit", "abort"):
        target = tmp_path / f"{finish}.parquet"
        w = writer_mod.AtomicParquetWriter(str(target), t.schema)
        for b in t.to_batches(max_chunksize=100):
            w.write(b)
        if finish == "commit":  # the flush runs on its own thread: on a loaded machine give it time to
            # start, so that the check below is of flush-behind, not of scheduling
            deadline = time.monotonic() + 30
            while not synced and time.monotonic() < deadline:
                time.sleep(0.01)
        getattr(w, finish)()
        assert target.exists() == (finish == "commit") and not os.path.exists(w.tmp)
    assert synced and min(synced) > 0  # flushed while row groups were being written
    assert pq.read_table(tmp_path / "commit.parquet").column("a").to_pylist() == list(range(2000))
    if fds is not None:  # the flush thread holds a descriptor only while it syncs
        deadline = time.monotonic() + 60  # generous: a loaded disk can take seconds to sync
        while not set(os.listdir("/proc/self/fd")) <= fds | {str(max(map(int, fds)) + 1)}:
            assert time.monotonic() < deadline, "a descriptor was left open"
            time.sleep(0.01)


@pytest.mark.parametrize("weight", [1, 150, 200, 400, 1000])
def test_every_row_is_written_whatever_piece_completes_the_last_row_group(tmp_path, monkeypatch, weight):
    """Regression: when the last, partial piece made its row group heavy enough to close, finish()
    dropped that row group (up to PIECE_ROWS - 1 rows lost, silently)."""
    from advcli.io import writer as writer_mod

    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", weight)
    monkeypatch.setattr(writer_mod, "PIECE_ROWS", 64)
    for n in (1, 63, 64, 65, 200, 208, 2000):
        t = pa.table({"a": list(range(n)), "l": [[0.5] * (i % 3) for i in range(n)]})
        target = tmp_path / f"{weight}-{n}.parquet"
        w = writer_mod.AtomicParquetWriter(str(target), t.schema)
        for b in t.to_batches(max_chunksize=50):
            w.write(b)
        w.commit()
        assert pq.read_table(target).column("a").to_pylist() == list(range(n)), (weight, n)


def test_a_commit_that_lost_rows_is_refused(tmp_path, monkeypatch):
    """The committed file's footer must count every row handed to write(); if it does not (a bug
    like the dropped last row group above), nothing appears at the target."""
    from advcli.io import writer as writer_mod

    monkeypatch.setattr(writer_mod._Rebatcher, "finish", lambda self: None)  # loses the tail
    t = pa.table({"a": list(range(300))})
    target = tmp_path / "o.parquet"
    w = writer_mod.AtomicParquetWriter(str(target), t.schema)
    w.write(t.to_batches()[0])
    with pytest.raises(AdvcliError, match="300 rows were handed to the writer but the file holds 0"):
        w.commit()
    assert not target.exists() and not os.path.exists(w.tmp)


def test_a_run_keeps_every_row_when_the_last_piece_closes_a_row_group(tmp_path, monkeypatch):
    import advcli
    from advcli.io import writer as writer_mod

    monkeypatch.setattr(writer_mod, "PIECE_ROWS", 16)
    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", 300)
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    t = make_table(203, 4, 4, 12, seed=3)
    pq.write_table(t, src)
    advcli.run(str(src), str(out), settings={"algorithm.adv_estimator": "grpo"}, chunk_rows=50)
    got = pq.read_table(out)
    assert got.num_rows == 203 and got.column("prompt_id").equals(t.column("prompt_id"))
