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


@pytest.mark.parametrize("settings", [GRPO_KL, GAE_K3], ids=["grpo_kl", "gae_k3_recomputed"])
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
    """A NaN in ref_log_probs far into the dump, first decoded by the write pass (the per-row KL is
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
        run(src, out, GRPO_KL, chunk_rows=7)
    msg = str(err.value)
    assert str(src) in msg and "ref_log_probs" in msg and f"row {bad_row}" in msg, msg
    assert not out.exists()
    if ahead:
        monkeypatch.setattr(write_mod, "DECODE_AHEAD", 0)
        with pytest.raises(AdvcliError) as inline:
            run(src, out, GRPO_KL, chunk_rows=7)
        assert str(inline.value) == msg
