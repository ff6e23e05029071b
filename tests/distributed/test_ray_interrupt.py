"""--engine ray interrupted: its part files are written into a temporary directory beside the output
(``.NAME.advcli-tmp-PID``), handed over as the run's output last; a Ctrl-C or SIGTERM before that removes the
directory, and the removal is shielded (advcli.io.commit.shielded) so that a second signal inside it cannot cut
it short. The signals are raised in the driver at the worst moments: every part file written (the most to
remove), then again inside the removal.
"""
from __future__ import annotations

import glob
import os
import signal
import time

import pyarrow.parquet as pq
import pytest
from conftest import run_main

GRPO = ["--flavor", "verl", "--set", "algorithm.adv_estimator=grpo"]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    from advcli.sample import make_table

    p = tmp_path_factory.mktemp("rayintr") / "in.parquet"
    pq.write_table(make_table(240, 6, 2, 24, 3), p)
    return str(p)


def leftovers(out) -> list[str]:
    d, name = os.path.split(str(out))
    return glob.glob(os.path.join(d, f".{name}.advcli-*"))


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_the_output_is_handed_over_then_another_in_the_clean_up(second, ray_session, dump, tmp_path,
                                                                            monkeypatch, capsys):
    """SIGINT once every part file is written, as the directory is handed over; then ``second`` while the
    clean-up removes it. Status 130, one message, the earlier output directory as it was, no temporary
    directory. (The hand-over was outside the clean-up's reach, and a second signal cut the removal short.)"""
    from advcli.engines import ray_engine

    out = tmp_path / "out"
    out.mkdir()
    (out / "part-000000000000.parquet").write_bytes(b"an earlier output")
    real_rmtree, seen = ray_engine.shutil.rmtree, {"first": 0, "second": 0, "parts": 0}

    def hand_over(tmp, output):
        seen["parts"] = len(glob.glob(os.path.join(tmp, "part-*.parquet")))
        seen["first"] += 1
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, on this thread

    class Shutil:  # ray_engine's shutil, with a second signal as the clean-up starts removing the directory
        def __getattr__(self, name):
            import shutil

            return getattr(shutil, name)

        @staticmethod
        def rmtree(path, *a, **k):
            if seen["first"] and not seen["second"]:
                seen["second"] += 1
                assert os.path.isdir(path)  # the worst moment: every part file still there
                signal.raise_signal(second)
                time.sleep(0.01)
            return real_rmtree(path, *a, **k)

    monkeypatch.setattr(ray_engine, "replace_dir", hand_over)
    monkeypatch.setattr(ray_engine, "shutil", Shutil())
    code, _, err = run_main(["run", dump, "-o", str(out), *GRPO, "--engine", "ray", "--device", "cpu",
                             "--chunk-rows", "60", "--force", "-q"], capsys)
    assert seen["first"] == 1 and seen["second"] == 1 and seen["parts"] >= 1
    assert code == 130, err
    assert "Traceback" not in err and err.count("advcli: error:") == 1 and "interrupted" in err, err
    assert os.listdir(out) == ["part-000000000000.parquet"]
    assert (out / "part-000000000000.parquet").read_bytes() == b"an earlier output"
    assert leftovers(out) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers as they were


def test_a_signal_between_the_library_outputs_two_renames_waits_for_the_second(tmp_path, monkeypatch):
    """advcli.run (no staged command) puts the Ray engine's directory in place itself: the earlier one moved
    aside, the new one renamed in. A Ctrl-C between the two is held until the new one is in place (it was
    raised there, leaving no output at all, the earlier one under a temporary name). Needs no Ray."""
    from advcli.engines import ray_output

    out, tmp = tmp_path / "out", tmp_path / ".out.advcli-tmp-1"
    out.mkdir()
    (out / "old.parquet").write_bytes(b"old")
    tmp.mkdir()
    (tmp / "new.parquet").write_bytes(b"new")
    calls = {"n": 0}

    class Os:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def replace(a, b):
            os.replace(a, b)
            calls["n"] += 1
            if calls["n"] == 1:  # the earlier one aside, the new one not yet in place
                signal.raise_signal(signal.SIGINT)
                time.sleep(0.01)

    monkeypatch.setattr(ray_output, "os", Os())
    with pytest.raises(KeyboardInterrupt):
        ray_output.swap_dir(str(tmp), str(out))
    assert calls["n"] == 2
    assert os.listdir(out) == ["new.parquet"] and not tmp.exists()
