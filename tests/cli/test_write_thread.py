"""The write pass's writer thread (advcli.pipeline.write.WRITE_THREAD): the output's row groups are encoded and
written on a thread of their own while the math computes the next chunks. The output's rows, order and bytes are
those of the run that encodes on the math's thread; an error of the writing is the same one message either way,
nothing written; an interrupt (a second one inside the clean-up included) leaves no temporary file."""
from __future__ import annotations

import errno
import hashlib
import os
import signal
import time

import pyarrow.parquet as pq
import pytest
from conftest import run_main
from test_interrupt import EARLIER, temps

from advcli import pipeline
from advcli.errors import AdvcliError
from advcli.flavors import resolve
from advcli.io import writer as writer_mod
from advcli.pipeline import write as write_mod
from advcli.sample import make_table

GAE_K3 = {"algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": True,
          "algorithm.kl_penalty": "low_var_kl", "algorithm.gamma": 0.99, "algorithm.lam": 0.95}
GRPO = {"algorithm.adv_estimator": "grpo"}


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("writethread") / "in.parquet"
    pq.write_table(make_table(300, group_size=5, min_len=1, max_len=40, seed=11, steps=2), p, row_group_size=64)
    return str(p)


@pytest.fixture
def small_row_groups(monkeypatch):
    """Row groups of a few pieces of 16 rows: many row groups, so the writer thread has work queued while the
    math runs (and a failure can land in the middle of the run)."""
    monkeypatch.setattr(writer_mod, "PIECE_ROWS", 16)
    monkeypatch.setattr(writer_mod, "ROW_GROUP_WEIGHT", 400)


def run(src, out, settings, **kw):
    cfg, native = resolve("verl", list(settings.items()))
    return pipeline.run_pipeline([str(src)], str(out), cfg, flavor="verl", native=native, device="cpu", force=True,
                                 chunk_rows=23, **kw)


def sha(p) -> str:
    with open(p, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.mark.parametrize("settings", [GAE_K3, GRPO], ids=["gae_k3", "grpo"])
@pytest.mark.parametrize("mode", ["spliced", "full", "sidecar"])
def test_the_writer_thread_changes_no_byte(settings, mode, dump, tmp_path, monkeypatch, small_row_groups):
    monkeypatch.setattr(write_mod, "SPLICE", mode == "spliced")
    output_mode = "sidecar" if mode == "sidecar" else "full"
    threaded = run(dump, tmp_path / "threaded.parquet", settings, output_mode=output_mode)
    monkeypatch.setattr(write_mod, "WRITE_THREAD", False)
    inline = run(dump, tmp_path / "inline.parquet", settings, output_mode=output_mode)
    assert sha(tmp_path / "threaded.parquet") == sha(tmp_path / "inline.parquet")  # rows, order, pages, footer
    assert pq.read_metadata(tmp_path / "threaded.parquet").num_rows == 300
    if mode != "spliced":  # the writer's own row groups, many of them (a spliced file keeps the input's)
        assert pq.read_metadata(tmp_path / "threaded.parquet").num_row_groups > 5
    assert threaded.metrics == inline.metrics


def _failing(monkeypatch, cls, name, real, at):
    """``cls.name`` (the writer thread's work on one row group, ``real``) fails with an I/O error at its ``at``-th
    call (0: never; the calls are counted)."""
    calls = {"n": 0}

    def work(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == at:
            raise OSError(errno.EIO, "Input/output error (made up by the test)")
        return real(self, *a, **k)

    monkeypatch.setattr(cls, name, work)
    return calls


@pytest.mark.parametrize("mode", ["spliced", "full"])
@pytest.mark.parametrize("at", [3, "last"])
def test_an_error_of_the_writing_is_one_message_on_either_thread(mode, at, dump, tmp_path, monkeypatch,
                                                                 small_row_groups):
    """An I/O error encoding a row group in the middle of the run, or the last one (raised at the commit): the
    same message naming the output, with the writer thread or without, no output and no temporary file."""
    from advcli.io.splice import SplicedParquetWriter

    monkeypatch.setattr(write_mod, "SPLICE", mode == "spliced")
    cls, name = ((SplicedParquetWriter, "_encode") if mode == "spliced"
                 else (writer_mod.AtomicParquetWriter, "_write_group"))
    real = getattr(cls, name)
    if at == "last":  # count the row groups of a clean run first
        calls = _failing(monkeypatch, cls, name, real, 0)
        run(dump, tmp_path / "count.parquet", GRPO)
        at = calls["n"]
        assert at > 3
    messages = []
    for threaded in (True, False):
        monkeypatch.setattr(write_mod, "WRITE_THREAD", threaded)
        calls = _failing(monkeypatch, cls, name, real, at)
        out = tmp_path / f"o{threaded}.parquet"
        with pytest.raises(AdvcliError) as err:
            run(dump, out, GRPO)
        assert calls["n"] >= at
        messages.append(str(err.value).replace(str(out), "OUT"))
        assert not out.exists() and temps(out) == []
    assert messages[0] == messages[1], messages
    assert messages[0].startswith("OUT: writing failed:") and "Input/output error" in messages[0], messages


@pytest.mark.parametrize("threaded", [True, False])
def test_a_second_interrupt_in_the_clean_up_leaves_no_temporary_file_either_way(threaded, dump, tmp_path,
                                                                                  monkeypatch, capsys,
                                                                                  small_row_groups):
    """Ctrl-C at the third chunk, a second one as the clean-up begins: status 130, the earlier output as it was,
    no temporary file, with the writer thread or without."""
    monkeypatch.setattr(write_mod, "WRITE_THREAD", threaded)
    real_check, real_close = write_mod.refuse_overflow, write_mod._close_spill
    calls = {"chunks": 0, "second": 0}

    def interrupt_at_the_third_chunk(*a, **k):
        calls["chunks"] += 1
        if calls["chunks"] == 3:
            raise KeyboardInterrupt
        return real_check(*a, **k)

    def second_ctrl_c(res):
        if calls["chunks"] >= 3 and not calls["second"]:
            calls["second"] += 1
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)
        return real_close(res)

    monkeypatch.setattr(write_mod, "refuse_overflow", interrupt_at_the_third_chunk)
    monkeypatch.setattr(write_mod, "_close_spill", second_ctrl_c)
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    code, _, err = run_main(["run", dump, "-o", str(out), "--flavor", "verl", "--set", "algorithm.adv_estimator=gae",
                             "--chunk-rows", "20", "--force", "-q"], capsys)
    assert calls["second"] == 1
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and not [p for p in os.listdir(tmp_path) if "advcli-tmp" in p]
