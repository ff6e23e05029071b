"""The write pass's decoding thread (advcli.pipeline.write.DECODE_AHEAD): the token columns of the next chunks
are decoded and checked on a thread of their own while the math runs. The output's rows, order and bytes are
those of the run that decodes on the math's thread, and an error found on the decoding thread is the same
one message, nothing written."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advcli import pipeline
from advcli.errors import AdvcliError
from advcli.flavors import resolve
from advcli.pipeline import moments, spill
from advcli.pipeline import write as write_mod
from advcli.sample import make_table

GRPO_KL = {"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": True}
# ReMax with KL in the reward: the per-row KL is deferred to the write pass, the first pass to decode the log-probs
REMAX_KL = {"algorithm.adv_estimator": "remax", "algorithm.use_kl_in_reward": True}
GAE_K3 = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
          "algorithm.kl_penalty": "low_var_kl", "algorithm.gamma": 0.99, "algorithm.lam": 0.95}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("pipelined") / "in.parquet"
    pq.write_table(make_table(200, group_size=5, min_len=1, max_len=40, seed=7, steps=2), p, row_group_size=64)
    return str(p)


def run(src, out, settings, **kw):
    cfg, native = resolve("verl", list(settings.items()))
    return pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                                 **kw)


@pytest.mark.parametrize("settings", [GRPO_KL, REMAX_KL, GAE_K3], ids=["grpo_kl", "remax_kl", "gae_k3_recomputed"])
@pytest.mark.parametrize("output_mode", ["full", "sidecar"])
def test_decoding_ahead_changes_no_byte(settings, output_mode, dump, tmp_path, monkeypatch):
    monkeypatch.setattr(moments, "TOKEN_CACHE_BYTES", 0)  # GAE: the write pass decodes again
    monkeypatch.setattr(spill, "SPILL_MARGIN", 1 << 62)
    ahead = run(dump, tmp_path / "ahead.parquet", settings, chunk_rows=7, output_mode=output_mode)
    monkeypatch.setattr(write_mod, "DECODE_AHEAD", 0)
    inline = run(dump, tmp_path / "inline.parquet", settings, chunk_rows=7, output_mode=output_mode)
    a, b = pq.read_table(tmp_path / "ahead.parquet"), pq.read_table(tmp_path / "inline.parquet")
    assert a.equals(b) and a.schema.metadata == b.schema.metadata  # rows, order, values, provenance
    for c in ("advantages", "returns"):  # bit for bit, not only equal as floats
        assert np.array_equal(a.column(c).combine_chunks().values.to_numpy().view(np.uint32),
                              b.column(c).combine_chunks().values.to_numpy().view(np.uint32))
    assert ahead.metrics == inline.metrics and ahead.per_step == inline.per_step


@pytest.mark.parametrize("ahead", [2, 0])
def test_an_error_on_the_decoding_thread_is_todays_message(ahead, dump, tmp_path, monkeypatch):
    """A NaN in ref_log_probs far into the dump, first decoded by the write pass (ReMax: the per-row KL is
    deferred there): the one message naming file, row and column, whichever thread decoded it."""
    t = pq.read_table(dump)
    ref = t.column("ref_log_probs").to_pylist()
    bad_row = 151
    ref[bad_row][0] = float("nan")
    t = t.set_column(t.schema.get_field_index("ref_log_probs"), "ref_log_probs",
                     pa.array(ref, t.schema.field("ref_log_probs").type))
    src = tmp_path / "bad.parquet"
    pq.write_table(t, src, row_group_size=64)
    monkeypatch.setattr(write_mod, "DECODE_AHEAD", ahead)
    out = tmp_path / "o.parquet"
    with pytest.raises(AdvcliError) as err:
        run(src, out, REMAX_KL, chunk_rows=7)
    msg = str(err.value)
    assert str(src) in msg and "ref_log_probs" in msg and f"row {bad_row}" in msg, msg
    assert not out.exists()
    if ahead:
        monkeypatch.setattr(write_mod, "DECODE_AHEAD", 0)
        with pytest.raises(AdvcliError) as inline:
            run(src, out, REMAX_KL, chunk_rows=7)
        assert str(inline.value) == msg


def test_an_earlier_chunks_error_comes_before_a_later_chunks(dump, tmp_path, monkeypatch):
    """The write pass runs one chunk behind (chunk k's host work after chunk k+1's math is queued): an error of
    chunk k's host work (its overflow check, here made to fail on row 141) is still the one reported when
    chunk k+1's token columns are bad too (a NaN in row 151), as in a loop that finishes one chunk at a time."""
    t = pq.read_table(dump)
    ref = t.column("ref_log_probs").to_pylist()
    ref[151][0] = float("nan")  # chunk 21 (rows 147-153) with 7 rows a chunk; row 141 is in chunk 20
    t = t.set_column(t.schema.get_field_index("ref_log_probs"), "ref_log_probs",
                     pa.array(ref, t.schema.field("ref_log_probs").type))
    src = tmp_path / "bad.parquet"
    pq.write_table(t, src, row_group_size=64)
    real = write_mod.refuse_overflow

    def overflow_at_141(plan, file, row_base, offsets, row, outs):
        if row_base <= 141 < row_base + len(offsets) - 1:
            raise AdvcliError(f"{file}: row 141: advantages overflow (made up by the test)")
        return real(plan, file, row_base, offsets, row, outs)

    monkeypatch.setattr(write_mod, "refuse_overflow", overflow_at_141)
    for ahead in (2, 0):
        monkeypatch.setattr(write_mod, "DECODE_AHEAD", ahead)
        with pytest.raises(AdvcliError) as err:
            run(src, tmp_path / "o.parquet", REMAX_KL, chunk_rows=7)
        assert "row 141: advantages overflow" in str(err.value), str(err.value)
        assert not (tmp_path / "o.parquet").exists()
