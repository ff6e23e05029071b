"""`advcli filter` interrupted: its output is written like a run's (a temporary file beside the target, put in
place last), and its clean-up is shielded the same way (advcli.io.commit.shielded): a signal landing as the
temporary file is created, or a second one inside the clean-up of the first, still leaves no temporary file,
the earlier output untouched, and status 130 / 143 with one message.

Real processes are stopped mid-copy with the test-only hook ``ADVCLI_TEST_SLOW_WRITE`` (the filter writes through
advcli/io/writer.py's writer too); the worst moments are hit in process by raising the signal there.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from conftest import interrupted_once_created, run_main
from test_interrupt import EARLIER, olds, temps, wait_for_temp

from advcli.sample import make_table

FILTER = ["--drop-uniform", "--chunk-rows", "20"]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    p = tmp_path_factory.mktemp("intrf") / "in.parquet"
    pq.write_table(make_table(400, group_size=8, min_len=4, max_len=64, seed=5), p)
    return str(p)


def start_filter(dump, out):
    env = dict(os.environ, ADVCLI_TEST_SLOW_WRITE="0.25")
    return subprocess.Popen([sys.executable, "-m", "advcli", "filter", dump, "-o", str(out), *FILTER, "--force",
                             "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("sig,code,repeats", [(signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 8)])
def test_a_signal_mid_copy_keeps_the_earlier_output(sig, code, repeats, dump, tmp_path):
    """SIGINT once, or SIGTERM repeated over the clean-up (a scheduler's repeats): 130 / 143, one message, the
    earlier output as it was, no temporary file."""
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    proc = start_filter(dump, out)
    wait_for_temp(proc, out)
    time.sleep(0.4)  # a few batches into the temporary file
    for _ in range(repeats):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.count("advcli: error:") == 1 and "interrupted" in err, err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


def _filter_in_process(dump, out, capsys):
    code, _, err = run_main(["filter", dump, "-o", str(out), *FILTER, "--force", "-q"], capsys)
    return code, err


def test_an_interrupt_as_the_filters_output_is_created_leaves_no_temporary_file(dump, tmp_path, monkeypatch,
                                                                                capsys):
    """Ctrl-C the moment the temporary file exists, before the filter holds its writer (Python runs the
    handler right after the constructor returns): held until the writer is held, then raised; the clean-up
    removes the file. Unshielded, the file was left with nobody to remove it."""
    from advcli.io import writer as writer_mod

    made = []
    monkeypatch.setattr(writer_mod, "AtomicParquetWriter",
                        interrupted_once_created(writer_mod.AtomicParquetWriter, made))
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    code, err = _filter_in_process(dump, out, capsys)
    assert len(made) == 1
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and not os.path.exists(made[0])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers as they were


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_inside_the_filters_clean_up_still_removes_the_output(second, dump, tmp_path, monkeypatch,
                                                                              capsys):
    """Ctrl-C at the third written batch, then a second signal as the clean-up begins (before the writer's
    temporary file is removed): held until the clean-up is done, status 130, no temporary file."""
    from advcli.io.writer import AtomicParquetWriter

    real_write, real_abort = AtomicParquetWriter.write, AtomicParquetWriter.abort
    calls = {"writes": 0, "second": 0}

    def write(self, batch):
        calls["writes"] += 1
        if calls["writes"] == 3:
            raise KeyboardInterrupt
        return real_write(self, batch)

    def abort(self):
        if not calls["second"]:
            calls["second"] += 1
            assert os.path.exists(self.tmp)  # the worst moment: the file is still there
            signal.raise_signal(second)
            time.sleep(0.01)
        return real_abort(self)

    monkeypatch.setattr(AtomicParquetWriter, "write", write)
    monkeypatch.setattr(AtomicParquetWriter, "abort", abort)
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    code, err = _filter_in_process(dump, out, capsys)
    assert calls["second"] == 1 and calls["writes"] == 3
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_while_the_staged_output_is_discarded_still_removes_it(dump, tmp_path, monkeypatch,
                                                                               capsys):
    """The filter's output is complete in its temporary file and waits for the command's last step (after the
    report); Ctrl-C there, then a second one while the staged file is discarded: it is removed all the same."""
    import advcli.report
    from advcli.io import commit

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    real_remove, calls = commit._remove, {"second": 0}

    def remove(path):
        if not calls["second"]:
            calls["second"] += 1
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)
        return real_remove(path)

    monkeypatch.setattr(advcli.report, "write_report", interrupt)
    monkeypatch.setattr(commit, "_remove", remove)
    out = tmp_path / "kept.parquet"
    out.write_bytes(EARLIER)
    code, _, err = run_main(["filter", dump, "-o", str(out), *FILTER, "--force", "--report", str(tmp_path / "f.json")],
                            capsys)
    assert calls["second"] == 1
    assert code == 130, err
    assert out.read_bytes() == EARLIER
    assert temps(out) == [] and olds(out) == []


# ------------------------------------------------------------------ advcli run --drop-uniform: the kept rows' file
GAE = ["--flavor", "verl", "--set", "algorithm.adv_estimator=gae"]


def test_run_drop_uniform_stopped_removes_its_kept_rows_even_on_a_second_signal(dump, tmp_path, monkeypatch, capsys):
    """`advcli run --drop-uniform` computes on a file of the kept rows beside the output: Ctrl-C as the engine
    starts on it, then a second Ctrl-C as it is removed: status 130, the earlier output as it was, the file gone."""
    import advcli.engines
    from advcli.runs import runner

    seen = {"kept": None, "second": 0}

    def engine(name, inputs, *a, **k):
        seen["kept"] = inputs[0]
        assert os.path.exists(inputs[0]) and ".advcli-tmp-" in inputs[0]
        raise KeyboardInterrupt

    class Os:  # the runner's os, with a second Ctrl-C as the kept rows' file is removed
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def remove(path):
            if not seen["second"]:
                seen["second"] += 1
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.01)
            os.remove(path)

    monkeypatch.setattr(advcli.engines, "run", engine)
    monkeypatch.setattr(runner, "os", Os())
    out = tmp_path / "out.parquet"
    out.write_bytes(EARLIER)
    code, _, err = run_main(["run", dump, "-o", str(out), *GAE, "--drop-uniform", "--force", "-q"], capsys)
    assert seen["second"] == 1 and seen["kept"] is not None
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert out.read_bytes() == EARLIER
    assert not os.path.exists(seen["kept"]) and temps(out) == [] and olds(out) == []


def test_the_kept_rows_of_a_killed_run_are_removed_by_the_next_run(dump, tmp_path, capsys):
    """A run killed (SIGKILL) while it computed on its kept rows leaves their file, named as the output's temporary
    files are: the next run for that output removes it (its process is gone); a live process's is kept."""
    out = tmp_path / "out.parquet"
    dead = tmp_path / ".out.parquet.advcli-tmp-999999999.filter.parquet"
    dead.write_bytes(b"the kept rows of a killed run")
    # killed while the kept rows were being written: the writer's own temporary file for them
    dead_writing = tmp_path / "..out.parquet.advcli-tmp-999999999.filter.parquet.advcli-tmp-999999999"
    dead_writing.write_bytes(b"half the kept rows of a killed run")
    live = tmp_path / f".out.parquet.advcli-tmp-{os.getppid()}.filter.parquet"
    live.write_bytes(b"a running advcli's")
    live_writing = tmp_path / f"..out.parquet.advcli-tmp-{os.getppid()}.filter.parquet.advcli-tmp-{os.getppid()}"
    live_writing.write_bytes(b"a running advcli's, being written")
    code, _, err = run_main(["run", dump, "-o", str(out), *GAE, "--drop-uniform", "-q"], capsys)
    assert code == 0, err
    assert not dead.exists() and not dead_writing.exists()
    assert live.exists() and live_writing.exists()
    assert pq.read_table(out).num_rows > 0
